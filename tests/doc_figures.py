"""The figures of the benchmark docs (``docs/BENCHMARKS.md``, ``docs/benchmarks/*.md``) and
the records they come from.

A block of a doc (a table row, or a paragraph / list item between blank lines) is linked to
its record by a comment inside it, ``<!-- figures: NAME -->`` or ``<!-- figures: NAME; given
2 8 -->``, naming ``docs/benchmarks/data/NAME.json`` (``NAME + OTHER``: a block quoting two
machine-written records is matched against both). Every number of a linked block must be
found in the record, or be one of the block's ``given`` numbers (the question and the
target, not a result). A record says what produced it, ``command`` and ``date``, and its
``kind``; only runs this machine cannot repeat may be transcribed:

- ``bench``: rows a program wrote: ``python bench/run_all.py --record BENCH`` (the
  benchmark's ``run()`` rows), ``python bench/record_cli.py NAME -- ARGS`` (a ``moeplan
  ... --json`` answer) or a bench script's own ``--record``. A doc number matches a number of
  the rows (a field, or a number inside a text field) rounded to the digits the doc shows, in
  the same unit or scaled (s and ms, a fraction and a percentage, millions).
- ``output``: a file a run wrote as it is (``file``, a path in the repository: a command's
  ``--json`` answer redirected there, ``--errors-out``, ``--rows-out``, or what a command
  printed, kept by ``python bench/record_output.py NAME -- COMMAND``); its numbers are read
  from that file (a JSON document's values, a text's numbers) and matched as a bench's rows
  are, so rewriting the file without the doc (or the doc without the file) fails.
- ``pinned``: facts a test computes and holds (``figures``: ``{label: number}``; ``tests``:
  the test files). Each named test reads the record with :func:`pinned` and asserts every
  figure equal to what the code computes or the bound it holds, so a figure edited in the
  record fails that test and one edited in the doc fails here; matched as a bench's rows.
- ``gpu``, ``peer``: a run that needs a GPU or a peer tool such as aiconfigurator; ``figures``
  holds the run's figures as printed, transcribed with its command and date. A doc number
  matches one of them as written.

:data:`PENDING` names the records still transcribed from runs this machine can repeat (kinds
``long`` and ``test``): each names the command that re-records it as a ``bench``, ``output``
or ``pinned`` record (``rerecord``), and the list only shrinks.

So a figure in a linked block changes only with its record: rerunning the benchmark (or,
for a GPU or peer run, transcribing a new run with its command and date). The match is by
value, not by cell: a figure swapped with another figure of the same record, or a small
count edited into another number of the record, is not caught.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "BENCHMARKS.md", *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]
DATA = ROOT / "docs" / "benchmarks" / "data"
#: written by a program / transcribed from a run that needs a GPU or a peer tool
MACHINE_WRITTEN = {"bench", "output", "pinned"}
TRANSCRIBED = {"gpu", "peer"}
KINDS = MACHINE_WRITTEN | TRANSCRIBED
#: records still transcribed from a run this machine can repeat (a long sweep, a test's
#: printout), each with the command that re-records it; only shrinks
PENDING: set[str] = set()

MARKER = re.compile(
    r"<!--\s*figures:\s*([\w.-]+(?:\s*\+\s*[\w.-]+)*)\s*(?:;\s*given\s+([^>]*?))?\s*-->"
)
# a number standing alone: not part of a name (H100, Qwen3, DP16), a version (0.12.0) or a
# date; an optional k / M multiplier (57k, 1.15 M is two tokens and reads 1.15)
NUMBER = re.compile(r"(?<![\w.])(\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?)([kM]?)(?!\w|\.\d)")
_HIDDEN = [
    re.compile(r"<!--.*?-->"),  # comments (the markers)
    re.compile(r"`[^`]*`"),  # code: commands and their arguments are inputs
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),  # dates
]
# the doc's unit against the record's: the same, a percentage of a fraction, s and ms,
# µs, millions written "11.6 M", bytes written in GB
_SCALES = (1.0, 100.0, 1e3, 1e6, 1e-3, 1e-6, 1e-9)


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based first line
    text: str
    record: str | None  # the NAME of its marker (``A+B`` for two records)
    given: tuple[str, ...]


@dataclass(frozen=True)
class Number:
    text: str  # as written (with its k / M)
    value: float  # times its multiplier
    tolerance: float  # half a unit of the last digit shown


def blocks(doc: Path) -> list[Block]:
    """Table rows (not header or separator rows) and paragraphs of ``doc``, outside code
    blocks (fenced or indented) and headings."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    para: list[tuple[int, str]] = []
    fenced = indented = False  # in a fenced / an indented code block

    def flush() -> None:
        if para:
            out.append(_block(doc, para[0][0], "\n".join(t for _, t in para)))
            para.clear()

    for i, line in enumerate(lines, 1):
        s = line.strip()
        if s.startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if indented or (not para and line.startswith("    ") and s):
            indented = bool(s)  # an indented code block ends at a blank line
            continue
        if s.startswith("|"):
            flush()
            separator = set(s) <= set("|-: ")
            nxt = lines[i].strip() if i < len(lines) else ""
            header = set(nxt) <= set("|-: ") and nxt.startswith("|")
            if not separator and not header:
                out.append(_block(doc, i, s))
            continue
        if not s or s.startswith("#"):
            flush()
            continue
        if s.startswith(("- ", "* ")) or re.match(r"\d+\. ", s):
            flush()
        para.append((i, line))
    flush()
    return out


def _block(doc: Path, line: int, text: str) -> Block:
    m = MARKER.search(re.sub(r"`[^`]*`", " ", text))  # a marker quoted in code is text
    given = tuple(m.group(2).split()) if m and m.group(2) else ()
    name = re.sub(r"\s+", "", m.group(1)) if m else None
    return Block(doc, line, text, name, given)


def visible(text: str) -> str:
    """``text`` as a reader sees its numbers: code, link targets, comments and dates left
    out, ``10 000`` written ``10000``."""
    for pattern in _HIDDEN:
        text = pattern.sub(" ", text)
    return re.sub(r"(?<![\d,.])(\d{1,3}) (\d{3})(?![\d,.])", r"\1\2", text)


def numbers(text: str) -> list[Number]:
    """The numbers a reader sees in ``text`` (see :data:`NUMBER`)."""
    out = []
    for m in NUMBER.finditer(visible(text)):
        digits, mult = m.group(1), {"k": 1e3, "M": 1e6, "": 1.0}[m.group(2)]
        mantissa = digits.split("e")[0].replace(",", "")
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exp = int(digits.split("e")[1]) if "e" in digits else 0
        value = float(digits.replace(",", "")) * mult
        tol = 0.5 * 10.0 ** (exp - decimals) * mult * (1 + 1e-9)
        out.append(Number(m.group(0), value, tol))
    return out


def load_record(name: str) -> dict:
    """The record ``NAME``; an ``output`` record's ``rows`` are its file's contents; ``A+B``
    is one ``bench`` record whose rows are both records' (without their commands)."""
    if "+" in name:
        parts = [load_record(n) for n in name.split("+")]
        kinds = {r.get("kind") for r in parts}
        kind = "bench" if kinds <= MACHINE_WRITTEN else "+".join(sorted(map(str, kinds)))
        rows = [{k: v for k, v in r.items() if k not in ("command", "file")} for r in parts]
        match = "row" if any(r.get("match") == "row" for r in parts) else None
        return {"kind": kind, "rows": rows, **({"match": match} if match else {})}
    rec = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    path = ROOT / str(rec.get("file", ""))
    if rec.get("kind") == "output" and path.is_file():
        text = path.read_text(encoding="utf-8")
        # a JSON file's values; printed text (bench/record_output.py's .txt) read as a reader does
        if path.suffix == ".json":
            rec["rows"] = json.loads(text)
        else:  # a unit printed against its number ("149.06s", "2.5x") is read apart from it
            rec["rows"] = re.sub(r"(\d)(s|ms|us|µs|x|GB|MB|MiB|GiB)\b", r"\1 \2", text)
    return rec


def pinned(name: str) -> dict[str, float]:
    """The figures of the ``pinned`` record ``NAME``, by label: what a test asserts equal to
    what the code computes (or the bound it holds)."""
    rec = load_record(name)
    assert rec.get("kind") == "pinned", (name, rec.get("kind"))
    return rec["figures"]


def record_problems(name: str, rec: dict) -> list[str]:
    """What a record lacks: its command, its date, a known kind and its figures."""
    bad = []
    if not str(rec.get("command", "")).strip():
        bad.append(f"{name}: no command")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(rec.get("date", ""))):
        bad.append(f"{name}: date {rec.get('date')!r} is not YYYY-MM-DD")
    kind = rec.get("kind")
    if name in PENDING and kind in ("long", "test"):
        if not rec.get("figures"):
            bad.append(f"{name}: no figures")
        if not str(rec.get("rerecord", "")).strip():
            bad.append(f"{name}: a pending record names the command that re-records it")
    elif kind not in KINDS:
        bad.append(f"{name}: kind {kind!r} not one of {sorted(KINDS)}")
    elif kind == "bench":
        if not rec.get("rows") or not str(rec["command"]).startswith("python bench/"):
            bad.append(f"{name}: a bench record holds the rows of a python bench/ command")
    elif kind == "output":
        if not rec.get("rows"):
            bad.append(f"{name}: an output record names a file of the repository it was read from")
    elif kind == "pinned":
        tests = rec.get("tests") or []
        if not isinstance(rec.get("figures"), dict) or not rec["figures"] or not tests:
            bad.append(
                f"{name}: a pinned record holds figures by label and the tests that hold them"
            )
        for t in tests:
            path = ROOT / t
            if not path.is_file() or f'pinned("{name}")' not in path.read_text(encoding="utf-8"):
                bad.append(f'{name}: {t} does not read it (pinned("{name}"))')
    elif not rec.get("figures"):
        bad.append(f"{name}: no figures")
    return bad


def _values(x) -> list[float]:
    if isinstance(x, bool):
        return []
    if isinstance(x, (int, float)):
        return [float(x)]
    if isinstance(x, str):
        return [n.value for n in numbers(x)]
    if isinstance(x, dict):
        return [v for y in x.values() for v in _values(y)]
    if isinstance(x, list):
        return [v for y in x for v in _values(y)]
    return []


def _leaves(x) -> list[list[float]]:
    """The values of every object of ``x`` (at any depth) that holds a scalar: the rows of a
    JSON output, one list each."""
    out: list[list[float]] = []
    if isinstance(x, dict):
        scalars = {k: v for k, v in x.items() if not isinstance(v, (dict, list))}
        if scalars:
            out.append(_values(scalars))
        for v in x.values():
            out += _leaves(v)
    elif isinstance(x, list):
        for v in x:
            out += _leaves(v)
    return out


def _held(vals: list[float], n: Number) -> bool:
    # a number is read without its sign (NUMBER), so it matches a value's magnitude
    return any(abs(abs(v) * s - n.value) <= n.tolerance for v in vals for s in _SCALES)


def unmatched(block: Block, rec: dict) -> list[str]:
    """The numbers of ``block`` its record ``rec`` does not hold (nor its ``given``).

    A record with ``"match": "row"`` (an output of thousands of cells, where almost any
    number is some cell's by chance) holds a block only within one of its rows: every number
    of the block from one object of the output."""
    given = set(block.given)
    shown = [n for n in numbers(block.text) if n.text not in given]
    if rec.get("kind") in MACHINE_WRITTEN and rec.get("match") == "row":
        if "_cells" not in rec:  # every value with its row's index, once per record
            rows = _leaves(rec.get("rows"))
            rec["_cells"] = (
                np.abs(np.array([v for r in rows for v in r], dtype=float)),
                np.array([i for i, r in enumerate(rows) for _ in r], dtype=int),
                len(rows),
            )
        vals, row_of, n_rows = rec["_cells"]
        held = np.zeros((len(shown), n_rows), dtype=bool)  # number x row
        for i, n in enumerate(shown):
            hit = np.zeros(len(vals), dtype=bool)
            for sc in _SCALES:
                hit |= np.abs(vals * sc - n.value) <= n.tolerance
            held[i, row_of[hit]] = True
        if not shown or n_rows == 0:
            return [n.text for n in shown]
        best = int(held.sum(axis=0).argmax())
        return [n.text for i, n in enumerate(shown) if not held[i, best]]
    if rec.get("kind") in MACHINE_WRITTEN:
        # what produced the record is not a figure: its command, file, tests and a note
        vals = _values(
            {k: v for k, v in rec.items() if k not in ("command", "file", "tests", "note")}
        )
        return [n.text for n in numbers(block.text) if n.text not in given and not _held(vals, n)]
    figures = {str(f) for f in rec.get("figures", [])}
    return [n.text for n in numbers(block.text) if n.text not in given | figures]


def check_docs(docs: list[Path] = DOCS) -> tuple[list[str], list[Block]]:
    """Every linked block's numbers against its record: the mismatches (``doc:line: ...``)
    and the blocks with numbers that name no record."""
    bad: list[str] = []
    loose: list[Block] = []
    cache: dict[str, dict | None] = {}
    for doc in docs:
        for b in blocks(doc):
            where = f"{doc.relative_to(ROOT)}:{b.line}"
            if b.record is None:
                if numbers(b.text):
                    loose.append(b)
                continue
            if b.record not in cache:
                known = all((DATA / f"{n}.json").exists() for n in b.record.split("+"))
                cache[b.record] = load_record(b.record) if known else None
            rec = cache[b.record]
            if rec is None:
                bad.append(f"{where}: no record docs/benchmarks/data/{b.record}.json")
                continue
            missing = unmatched(b, rec)
            if missing:
                bad.append(f"{where}: not in {b.record}.json: {', '.join(missing)}")
    return bad, loose
