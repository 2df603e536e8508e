"""``moeplan validate``: every measured run of a CSV through ``moeplan bench``, scored per
half of the frozen split.

Oracles: the split file against its own stated rule (fixed by the report names alone,
disjoint, covering every report of the shipped CSV); a three-row CSV whose rows are
simulated, listed as not run with the reason, and scored; bad input refused in one line.
The full 126-row validation is ``-m slow``."""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
from importlib import resources
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.commands.validate import (
    MEASURED_COLUMNS,
    graphs_group,
    read_rows,
    read_split,
    repeated_runs,
    shipped_csv,
    spearman,
)


def test_the_split_is_fixed_by_the_report_names_and_disjoint():
    split = read_split()
    docs = sorted({r["doc"] for r in read_rows(None)})
    dev, test = set(split["dev"]), set(split["test"])
    assert not dev & test
    assert dev | test == set(docs)
    ordered = sorted(docs, key=lambda d: hashlib.sha256(d.encode()).hexdigest())
    assert set(ordered[: len(docs) // 2]) == dev  # the rule the file states
    assert split["rows"]["dev"] + split["rows"]["test"] == len(read_rows(None))


def _three_rows(tmp_path, peaks: bool = False) -> str:
    """Three shipped rows as a CSV of the lab's columns (``peaks``: and the peak column)."""
    rows = {r["case_id"]: r for r in read_rows(None)}
    pick = ["gpt-oss-20b/h100#06", "gpt-oss-20b/h100#10", "gpt-oss-20b/h100#03"]  # #03: TRT-LLM
    with shipped_csv().open() as f:
        fields = list(csv.DictReader(f).fieldnames or ())
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields + ["peak_out_tok_s"] * peaks, extrasaction="ignore")
    w.writeheader()
    for c in pick:
        w.writerow(rows[c])
    path = tmp_path / "three.csv"
    path.write_text(buf.getvalue())
    return str(path)


def test_validate_three_rows(capsys, tmp_path):
    path = _three_rows(tmp_path)
    out_csv = tmp_path / "rows.csv"
    code, out, err = run_main(capsys, "validate", path, "--jobs", "1", "--json",
                              "--rows-out", str(out_csv))  # fmt: skip
    assert code == 0, err
    ans = json.loads(out)
    assert ans["runs"] == 3
    by_id = {r["case_id"]: r for r in ans["rows"]}
    trt = by_id["gpt-oss-20b/h100#03"]
    if not trt["ran"]:  # an engine moeplan does not simulate: listed with why
        assert "trtllm" in trt["reason"]
    ran = [r for r in ans["rows"] if r["ran"]]
    assert len(ran) == ans["ran"] >= 2
    for r in ran:
        t = r["total_tok_s"]
        assert t["ratio"] == pytest.approx(t["predicted"] / t["measured"])
        shares = [x["share"] for x in r["price_sources"].values()]  # the run's priced seconds
        assert abs(sum(shares) - 1.0) < 1e-9
    t = ans["tables"]["dev"]["total_tok_s"]["all"]["all"]  # gpt-oss-20b/h100 is a dev report
    assert t["n"] == len(ran)
    (group,) = [g for g in ans["groups"] if g["isl"] == "32000"]
    assert group["half"] == "dev" and group["runs"] == 2
    assert out_csv.read_text().count("\n") == 4
    assert out_csv.read_text().splitlines()[0].endswith(",engine_time_above_cuda_graphs")
    # every simulated run in exactly one CUDA-graph regime (graphs_group)
    regimes = ans["tables"]["dev"]["total_tok_s"]["graphs"]
    assert set(regimes) <= {"above capture", "within capture", "not stated"}
    assert sum(s["n"] for s in regimes.values()) == len(ran)


def test_validate_text_reports_both_halves(capsys, tmp_path):
    code, out, err = run_main(capsys, "validate", _three_rows(tmp_path), "--jobs", "1")
    assert code == 0, err
    assert "== dev half ==" in out and "== test half ==" in out
    assert "rank agreement" in out


def test_validate_bad_csv_is_one_line(capsys, tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("case_id,doc\nx,y\n")
    out_csv = tmp_path / "rows.csv"
    code, out, err = run_main(capsys, "validate", str(f), "--rows-out", str(out_csv))
    assert code == 2 and out == "" and not out_csv.exists()
    assert "lacks the column" in err and len(err.strip().splitlines()) == 1


def test_spearman():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1], [1, 2]) is None


@pytest.mark.slow
def test_validate_every_lab_run(capsys):
    code, out, err = run_main(capsys, "validate", "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["runs"] == 126
    not_run = {r["case_id"]: r["reason"] for r in ans["rows"] if not r["ran"]}
    assert "glm-4.5-air/h100#05" in not_run and "GiB" in not_run["glm-4.5-air/h100#05"]
    assert all(reason for reason in not_run.values())


def test_random_rows_send_the_runs_own_token_totals():
    """A random row's outputs are the run's (ended at the end-of-sequence token, below the
    ``osl`` cap): gpt-oss-120b's 4K run generated 134.52 tokens per request on average
    (report: 67,259 of 500 x 200), so 67,260 whole tokens over 500 prompts, each 134 or 135."""
    from moeplan.commands.validate import random_run_lengths

    r = {r["case_id"]: r for r in read_rows(None)}["gpt-oss-120b/a100#08"]
    assert (r["dataset"], r["osl"], r["num_prompts"]) == ("random", "200", "500")
    p = random_run_lengths(r, 500)
    assert int(p.osl.sum()) == 67260 and set(p.osl.tolist()) == {134, 135}
    assert int(p.isl.sum()) == round(float(r["mean_in"]) * 500)
    assert p.isl.max() - p.isl.min() <= 1 and p.osl.max() <= 200


def test_random_row_mean_above_its_cap_is_one_line():
    from moeplan.commands.validate import random_run_lengths
    from moeplan.errors import MoeplanError

    r = dict({r["case_id"]: r for r in read_rows(None)}["gpt-oss-120b/a100#08"], mean_out="201")
    with pytest.raises(MoeplanError, match=r"mean_out \(201\) must not exceed osl \(200\)"):
        random_run_lengths(r, 500)


def test_repeated_measurements_across_reports_are_listed():
    """The lab's GLM-4.5-Air H100 report repeated its A100 report's eight ``random`` runs
    figure for figure: such copies (here the shipped A100 rows under the H100 report's name)
    are listed against the run they repeat. The shipped CSV has none; a copy within one
    report, or runs with fewer than four figures given, are not listed."""
    rows = read_rows(None)
    assert repeated_runs(rows) == []
    a100 = [r for r in rows if r["doc"] == "glm-4.5-air/a100" and r["dataset"] == "random"]
    assert len(a100) == 8
    copies = [{**r, "doc": "glm-4.5-air/h100", "case_id": f"copy#{i}"} for i, r in enumerate(a100)]
    got = {x["case_id"]: (x["same_as"], x["figures"]) for x in repeated_runs(rows + copies)}
    assert got == {f"copy#{i}": (r["case_id"], len(MEASURED_COLUMNS)) for i, r in enumerate(a100)}
    assert repeated_runs([a100[0], {**a100[0], "case_id": "same-report"}]) == []
    sparse = {**{c: "" for c in MEASURED_COLUMNS}, "total_tok_s": "1", "doc": "x", "case_id": "s"}
    assert repeated_runs([sparse, {**sparse, "doc": "y", "case_id": "t"}]) == []


def test_a_repeat_of_the_measured_best_launch_is_the_same_best():
    from moeplan.commands.validate import score

    rows = [
        r for r in read_rows(None) if r["case_id"] in ("gpt-oss-20b/a100#04", "gpt-oss-20b/a100#05")
    ]
    assert rows[0]["serve_flags"] == rows[1]["serve_flags"]  # one launch, measured twice
    hi, lo = sorted(rows, key=lambda r: -float(r["total_tok_s"]))

    def pred(t):
        return {
            "total_tok_s": t,
            "mean_ttft_ms": 1.0,
            "mean_tpot_ms": 1.0,
            "mean_itl_ms": 1.0,
            "peak_out_tok_s": 1.0,
        }

    res = [{"case_id": lo["case_id"], "ran": True, "predicted": pred(2.0)},
           {"case_id": hi["case_id"], "ran": True, "predicted": pred(1.0)}]  # fmt: skip
    (g,) = score(rows, res, read_split())["groups"]
    assert g["measured_best"] == hi["case_id"] and g["predicted_best"] == lo["case_id"]
    assert g["same_best"] is True


def test_shipped_rows_carry_their_reports_peaks():
    """The peaks file names shipped runs only, each with one positive peak, and the shipped
    rows carry exactly those (a row its report prints no peak for has none)."""
    peaks = resources.files("moeplan").joinpath("data", "benchmarks", "lab_peaks.csv")
    with peaks.open() as f:
        got = {r["case_id"]: float(r["peak_out_tok_s"]) for r in csv.DictReader(f)}
    rows = read_rows(None)
    assert set(got) <= {r["case_id"] for r in rows} and all(v > 0 for v in got.values())
    for r in rows:
        assert (float(r["peak_out_tok_s"]) if r["peak_out_tok_s"] else None) == got.get(
            r["case_id"]
        )
    # the GPT-OSS-120B H100 report prints no peak (its vLLM 0.10.2 blocks predate it)
    assert not any(k.startswith("gpt-oss-120b/h100") for k in got)
    assert got["glm-4.5-air/h100#04"] == 17690  # the report's TP4+EP4 block


def test_a_csv_peak_column_is_scored_and_optional(capsys, tmp_path):
    """A CSV without the peak column is read (the lab's own has none); with it, the peak is
    scored as predicted / measured."""
    code, out, err = run_main(capsys, "validate", _three_rows(tmp_path, peaks=True), "--jobs",
                              "1", "--json")  # fmt: skip
    assert code == 0, err
    ans = json.loads(out)
    by_id = {r["case_id"]: r for r in ans["rows"]}
    assert by_id["gpt-oss-20b/h100#06"]["peak_out_tok_s"]["measured"] is None  # none printed
    peak = by_id["gpt-oss-20b/h100#10"]["peak_out_tok_s"]
    assert peak["measured"] > 0 and peak["ratio"] == pytest.approx(
        peak["predicted"] / peak["measured"]
    )


def _lab_peaks():
    spec = importlib.util.spec_from_file_location(
        "lab_peaks", Path(__file__).resolve().parent.parent / "bench" / "lab_peaks.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_row_takes_the_peak_of_the_block_printing_its_figures():
    """The report parser: the block with the row's duration and total throughput gives the
    peak; no such block, or two with different peaks, give none."""
    lp = _lab_peaks()

    def block(dur, tot, peak):
        return (f"============ Serving Benchmark Result ============\n"
                f"Benchmark duration (s):                  {dur}\n"
                f"Peak output token throughput (tok/s):    {peak}\n"
                f"Total Token throughput (tok/s):          {tot}\n")  # fmt: skip

    found = lp.blocks(block(33.39, 12411.25, 17690.00) + block(66.93, 6189.64, 6512.00))
    row = {"duration_s": "66.93", "total_tok_s": "6189.64"}
    assert lp.peak_of(row, found) == 6512.0
    assert lp.peak_of({"duration_s": "10", "total_tok_s": "6189.64"}, found) is None
    twice = lp.blocks(block(66.93, 6189.64, 6512) + block(66.93, 6189.64, 7000))
    assert lp.peak_of(row, twice) is None
    assert lp.peak_of({"duration_s": "", "total_tok_s": "1"}, found) is None


def test_graphs_group_names_each_regime():
    def rec(share, flagged):
        return {"graphs": {"capture_max_batch_per_rank": 512, "engine_time_above_share": share,
                           "flagged": flagged}}  # fmt: skip

    assert graphs_group(rec(0.5, True)) == "above capture"
    assert graphs_group(rec(0.0, False)) == "within capture"
    assert graphs_group(rec(None, False)) == "not stated"
    assert graphs_group({"graphs": None}) == "not stated"  # a P/D pair
