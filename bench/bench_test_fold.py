"""The frozen test fold's summary: how many cells of the B200 / GB200 tables meet the kernel
targets, per operation family, from the saved ``moeplan calibrate --kernels --test-fold
--json`` run (``docs/benchmarks/data/out/kerneldb-test-fold.json``, written by ``python
bench/record_output.py kerneldb-test-fold -- ...``), and the fused-MoE transfers pooled over
engines from ``src/moeplan/data/gpu_transfer.json``.

    python bench/bench_test_fold.py

Cells pooled over the engines (``engine == "all"``); a cell is judged with enough rows and
shapes and met when its median and p90 are within the targets (the run says which).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "benchmarks" / "data" / "out" / "kerneldb-test-fold.json"
TRANSFER = ROOT / "src" / "moeplan" / "data" / "gpu_transfer.json"


def family(op: str) -> str:
    """The operation families of docs/benchmarks/kerneldb-blackwell.md's summary."""
    if op in ("context_attention", "generation_attention"):
        return "attention"
    if op in ("moe", "trtllm_wideep_moe"):
        return "fused MoE"
    if "mla" in op:
        return "MLA"
    if op.startswith("deepep") or "allreduce" in op:
        return "DeepEP and all-reduce"
    return "newer layer kinds"


def run() -> list[dict]:
    cells = [c for c in json.loads(RUN.read_text(encoding="utf-8"))["test_fold"]]
    pooled = [c for c in cells if c["engine"] == "all"]
    judged = [c for c in pooled if c["judged"]]
    rows = [{
        "name": "test-fold cells pooled over engines: met / judged / all",
        "value": sum(c["met"] for c in judged), "unit": "cells",
        "judged": len(judged), "cells": len(pooled),
    }]  # fmt: skip
    for fam in sorted({family(c["op"]) for c in judged}):
        mine = [c for c in judged if family(c["op"]) == fam]
        row = {"name": f"{fam}: met / judged", "value": sum(c["met"] for c in mine),
               "unit": "cells", "judged": len(mine)}  # fmt: skip
        if fam == "fused MoE":
            row["median_min"] = min(c["median"] for c in mine)
            row["median_max"] = max(c["median"] for c in mine)
            row["p90_missed"] = sorted(c["p90"] for c in mine if not c["met"])
        rows.append(row)
    for t in json.loads(TRANSFER.read_text(encoding="utf-8"))["pooled"]:
        if (t["engine"], t["op"]) == ("all", "moe"):
            rows.append({"name": f"fused MoE transfer {t['transfer']}", "value": t["median"],
                         "unit": "median", "p90": t["p90"]})  # fmt: skip
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
