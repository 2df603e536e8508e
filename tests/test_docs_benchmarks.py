"""Every figure of the benchmark docs is linked to the output that produced it
(tests/doc_figures.py): a linked block's numbers are checked against its record under
``docs/benchmarks/data/``, so a figure edited by hand fails here. Timing figures are checked
against the recorded run, not rerun."""

from __future__ import annotations

import pytest

from doc_figures import (
    DATA,
    DOCS,
    NUMBER,
    PENDING,
    ROOT,
    blocks,
    check_docs,
    load_record,
    numbers,
    record_problems,
    unmatched,
    visible,
)

#: Records still transcribed from a run this machine can repeat (doc_figures.PENDING).
#: They may only shrink: a record re-recorded by its command leaves the list.
MAX_PENDING = 0

#: Numbers in blocks that name no record: none (a new figure comes with its record).
MAX_UNLINKED = 0


@pytest.fixture(scope="module")
def checked():
    return check_docs()


def test_every_linked_figure_equals_its_record(checked):
    bad, _ = checked
    assert not bad, "\n".join(bad)


def test_every_record_names_its_command_date_and_kind():
    bad = [
        p for f in sorted(DATA.glob("*.json")) for p in record_problems(f.stem, load_record(f.stem))
    ]
    assert not bad, bad


def test_transcribed_records_are_gpu_or_peer_runs_or_pending():
    """Only a run that needs a GPU or a peer tool may be transcribed; the records still
    transcribed from repeatable runs are named in PENDING, and the list only shrinks."""
    kinds = {f.stem: load_record(f.stem).get("kind") for f in DATA.glob("*.json")}
    stale = sorted(n for n in PENDING if kinds.get(n) not in ("long", "test"))
    assert not stale, f"not transcribed (or gone): drop from PENDING: {stale}"
    assert len(PENDING) <= MAX_PENDING, (len(PENDING), MAX_PENDING)


def test_every_row_of_the_targets_table_is_linked():
    doc = ROOT / "docs" / "BENCHMARKS.md"
    lines = doc.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Targets at a glance")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("Disaggregated"))
    rows = [b for b in blocks(doc) if start < b.line <= end and b.text.startswith("|")]
    assert len(rows) >= 20
    assert [b.line for b in rows if b.record is None] == []


def test_unlinked_figures_do_not_grow(checked):
    _, loose = checked
    count = sum(len(numbers(b.text)) for b in loose)
    assert count <= MAX_UNLINKED, (
        f"{count} numbers in blocks without a <!-- figures: NAME --> record "
        f"(at most {MAX_UNLINKED}); link the new ones"
    )


def test_every_figure_in_the_docs_is_linked(checked):
    _, loose = checked
    assert not loose


def _edited(text: str, avoid: set[str], held=lambda e: False) -> str:
    """``text`` (a number as written) raised by 37 % or more, with as many decimals and its
    suffix, and none of the numbers in ``avoid`` nor one the record holds (``held``: a swap
    is not what this edit tests)."""
    suffix = text[-1] if text[-1] in "kM" else ""
    digits = text.removesuffix(suffix).replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits and "e" not in digits else 0
    v = float(digits)
    edits = [v * f for f in (1.37, 1.53, 1.71, 2.3, 3.7, 5.3, 9.1, 13.7, 29.3)]
    edits += [v + k * 10.0**-decimals for k in (7, 13, 97, 997, 9973)]
    return next(
        e for e in (f"{x:.{decimals}f}{suffix}" for x in edits) if e not in avoid and not held(e)
    )


def test_a_figure_edited_by_hand_is_caught():
    """The oracle can fail: each linked block, with its most precise figure raised by 37 %
    (or more), no longer matches its record."""
    tried = 0
    for doc in DOCS:
        for b in blocks(doc):
            if b.record is None:
                continue
            rec = load_record(b.record)
            shown = [n for n in numbers(b.text) if n.text not in b.given]
            if not shown:
                continue
            # the most precise figure: a one-digit count can equal another number by chance
            target = max(shown, key=lambda n: sum(c.isdigit() for c in n.text))
            # a swap with another figure of the block or of a transcribed record is not a
            # fresh number (doc_figures says so)
            avoid = {n.text for n in numbers(b.text)} | {str(f) for f in rec.get("figures", [])}

            seen = visible(b.text)
            at = next(m for m in NUMBER.finditer(seen) if m.group(0) == target.text)

            def edit(e: str, seen=seen, at=at, b=b):
                return type(b)(b.doc, b.line, seen[: at.start()] + e + seen[at.end() :],
                               b.record, b.given)  # fmt: skip

            # a bench or output record is matched by value: an edit onto another of its
            # values (at the digits shown; within one row for a record matched by rows) is
            # a swap too
            def held(e: str, rec=rec) -> bool:
                return e not in unmatched(edit(e), rec)

            edited = _edited(target.text, avoid, held)
            changed = edit(edited)
            assert edited in unmatched(changed, rec), (b.doc.name, b.line, target.text, edited)
            tried += 1
    assert tried >= 20


def test_numbers_are_read_as_a_reader_sees_them():
    text = "Qwen3-30B-A3B on 2×8 H100, `--isl 1024`, 10 000 requests, 57k/s, 0.12.0, 3.3e-6"
    assert [n.text for n in numbers(text)] == ["2", "8", "10000", "57k", "3.3e-6"]
    assert numbers("57k")[0].value == 57e3 and numbers("1.04 s")[0].tolerance == pytest.approx(
        0.005
    )
