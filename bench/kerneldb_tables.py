"""The kernel database's error tables in docs/benchmarks/kerneldb.md, from one calibrate run.

    .venv/bin/moeplan calibrate --kernels --json > calib.json
    .venv/bin/python bench/kerneldb_tables.py calib.json

Prints three Markdown tables (median / p90 of |predicted / measured - 1|): every GPU x
engine x op by method (held-out whole shapes, leave-one-GPU-out, its like-for-like-kernel
breakdown where it drops rows, datasheet roofline); fused MoE held-out by token regime and
load; attention and MLA held-out by token regime.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from moeplan.cost.kerneldb.families import OPS

GPUS = ("h100_sxm", "a100_sxm")
ENGINES = ("sglang", "vllm", "trtllm")
METHODS = (
    ("heldout_shape", "held-out whole shapes (interpolated)"),
    ("leave_one_gpu_out", "leave-one-GPU-out (transferred)"),
    ("leave_one_gpu_out_like_kernels", "same kernel family only"),
    ("roofline", "datasheet roofline"),
)
REGIMES = ("tokens<=64", "65-1024", ">1024")


def _cell(c: tuple[float, float] | None) -> str:
    return "—" if c is None else f"{100 * c[0]:.1f}% / {100 * c[1]:.1f}%"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(head)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def tables(rows: list[dict]) -> str:
    idx = {
        (r["gpu"], r["engine"], r["op"], r["method"], r["regime"], r["load"]): (
            r["median"],
            r["p90"],
        )
        for r in rows
    }
    keys = [
        (g, e, o)
        for g in GPUS
        for e in ENGINES
        for o in OPS
        if (g, e, o, "heldout_shape", "all", "all") in idx
    ]
    main = _table(
        ["GPU", "engine", "op", *(label for _, label in METHODS)],
        (
            [g, e, o, *(_cell(idx.get((g, e, o, m, "all", "all"))) for m, _ in METHODS)]
            for g, e, o in keys
        ),
    )
    moe = _table(
        ["GPU", "engine", "load", "tokens ≤ 64", "65–1024", "> 1024"],
        (
            [
                g,
                e,
                load,
                *(_cell(idx.get((g, e, "moe", "heldout_shape", r, load))) for r in REGIMES),
            ]
            for g, e, o in keys
            if o == "moe"
            for load in ("balanced", "power_law")
            if any((g, e, "moe", "heldout_shape", r, load) in idx for r in REGIMES)
        ),
    )
    attn = _table(
        ["GPU", "engine", "op", "tokens ≤ 64", "65–1024", "> 1024"],
        (
            [g, e, o, *(_cell(idx.get((g, e, o, "heldout_shape", r, "all"))) for r in REGIMES)]
            for g, e, o in keys
            if "attention" in o or "mla" in o
        ),
    )
    return f"{main}\n\n{moe}\n\n{attn}\n"


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        print(tables(json.load(fh)["rows"]), end="")
