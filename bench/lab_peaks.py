"""The peak output token throughput of every lab run whose report prints it: writes
``moeplan/data/benchmarks/lab_peaks.csv`` (``case_id``, ``peak_out_tok_s``).

``vllm bench serve`` prints "Peak output token throughput (tok/s)" (the most output chunks
in one second of the run, ``max_output_tokens_per_s``) in each result block; the lab's CSV
(``../shared/data/benchmarks/lab_a100_h100_moe.csv``, extracted from the GPUStack
performance-lab reports in ``../shared/data/benchmarks/lab_reports/``) does not carry it. A
CSV row is matched to the result block of its report (``doc`` ``glm-4.5-air/h100`` is
``glm-4.5-air_h100.md``) that prints the row's duration and total token throughput to the
hundredth; a row no block matches (one taken from a report's summary table) or that two
blocks match with different peaks gets no peak. Token counts only; nothing is fitted.

Run: ``python bench/lab_peaks.py [--reports DIR]`` (default: the shared reports folder).
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "src" / "moeplan" / "data" / "benchmarks" / "lab_a100_h100_moe.csv"
OUT = ROOT / "src" / "moeplan" / "data" / "benchmarks" / "lab_peaks.csv"
REPORTS = ROOT.parent / "shared" / "data" / "benchmarks" / "lab_reports"
LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 ()/.\-]*?):\s+([0-9.]+)\s*$")


def blocks(text: str) -> list[dict[str, float]]:
    """Each result block's figures by their printed (lower-cased) names."""
    out: list[dict[str, float]] = []
    cur: dict[str, float] | None = None
    for line in text.splitlines():
        if "Serving Benchmark Result" in line:
            cur = {}
            out.append(cur)
            continue
        m = LINE.match(line)
        if cur is not None and m:
            cur[m.group(1).strip().lower()] = float(m.group(2))
    return out


def peak_of(row: dict[str, str], found: list[dict[str, float]]) -> float | None:
    """The peak of the one block printing the row's duration and total throughput."""
    try:
        dur, tot = float(row["duration_s"]), float(row["total_tok_s"])
    except ValueError:
        return None
    peaks = {
        b["peak output token throughput (tok/s)"]
        for b in found
        if "peak output token throughput (tok/s)" in b
        and abs(b.get("benchmark duration (s)", -1) - dur) < 0.005
        and abs(b.get("total token throughput (tok/s)", -1) - tot) < 0.005
    }
    return peaks.pop() if len(peaks) == 1 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", default=str(REPORTS))
    a = ap.parse_args()
    with SHIPPED.open(newline="") as f:
        rows = list(csv.DictReader(f))
    cache: dict[str, list[dict[str, float]]] = {}
    out = []
    for r in rows:
        doc = r["doc"]
        if doc not in cache:
            path = Path(a.reports) / (doc.replace("/", "_") + ".md")
            cache[doc] = blocks(path.read_text(encoding="utf-8")) if path.is_file() else []
        p = peak_of(r, cache[doc])
        if p is not None:
            out.append((r["case_id"], f"{p:g}"))
    with OUT.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["case_id", "peak_out_tok_s"])
        w.writerows(out)
    print(f"{len(out)} of {len(rows)} runs have a peak: {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
