"""Runtime engines on CPU/gloo: one forward of each layout at world size 4 vs one process.

Each case runs ``moeplan.runtime.runner.run_rank`` in 4 spawned processes (gloo, one thread
each) on the default small model (hidden 64, 8 heads, 2 layers, 8 experts top-2), 1024 tokens
in sequences of 32: one warm-up, then ``REPS`` timed forwards; ``value`` is the median over
repetitions of the slowest rank's wall time. ``reference`` is the single-process reference
forward (``reference_forward``) on the same model and tokens, timed in this process in the
same run; ``ratio`` = distributed / reference (on CPU a W=4 run is *slower*: four processes
share two cores and every collective is a loopback copy — these rows check that the engines
run and agree, they are not a speed claim). Each row's note gives the max abs error against
the reference (target <= 1e-5).

    .venv/bin/python bench/bench_runtime.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

REPS = 5
TOKENS, SEQ = 1024, 32


def _strategy(atp: int, mtp: int, **details: Any) -> dict[str, Any]:
    return {
        "schema": "moeplan.plan/1",
        "family": "strategy",
        "layout": {
            "world_size": 4,
            "attn": {"tp": atp, "dp": 4 // atp},
            "moe": {"tp": mtp, "ep": 4 // mtp},
            "pp": 1,
        },
        "details": details,
    }


def _module(kind: str, layer: int) -> dict[str, Any]:
    return {"kind": kind, "layer": layer, "tp": 1, "ep": 2, "dpmoe": 1}


CASES: dict[str, dict[str, Any]] = {
    "EP (attn DP4, MoE EP4)": {
        "schema": "moeplan.plan/1",
        "family": "ep",
        "layout": {"world_size": 4, "attn": {"tp": 1, "dp": 4}, "moe": {"tp": 1, "ep": 4}},
    },
    "hybrid TP2xEP2, fused (MixServe)": _strategy(2, 2, fused=True),
    "hybrid TP2xEP2, unfused": _strategy(2, 2, fused=False),
    "attn TP4 + MoE EP4, predicted token plan (Sem-MoE)": _strategy(4, 1, token_plan="predicted"),
    "pipeline 2 stages x (TP1, EP2), 4 micro-batches (SMIDT)": {
        "schema": "moeplan.plan/1",
        "family": "pipeline",
        "layout": {
            "world_size": 4,
            "pp": 2,
            "stages": [
                {"modules": [{**_module("attn", 0), "ep": 1, "dpmoe": 2}, _module("moe", 0)]},
                {"modules": [{**_module("attn", 1), "ep": 1, "dpmoe": 2}, _module("moe", 1)]},
            ],
        },
        "details": {"microbatches": 4},
    },
    "DEP ag=2 eg=2, r1=2 r2=2 ASAS (FinDEP)": {
        "schema": "moeplan.plan/1",
        "family": "dep",
        "layout": {"world_size": 4, "ag": 2, "eg": 2},
        "details": {"ma": 8, "r1": 2, "r2": 2, "order": "ASAS", "seq_len": SEQ},
    },
}


def _worker(rank: int, world: int, plans: list[dict[str, Any]]) -> list[list[float]]:
    from moeplan.runtime.runner import RunOptions, run_rank
    from moeplan.runtime.spawn import init_distributed

    init_distributed(rank, world, timeout_s=120)
    out = []
    for plan in plans:
        opts = RunOptions(tokens=TOKENS, seq=SEQ, warmup=1, timeout_s=120)
        errs, walls = [], []
        for _ in range(REPS):
            rep = run_rank(rank, world, plan, opts)
            walls.append(rep["wall_s"])
            errs.append(rep["max_abs_err"] or 0.0)
        out.append([*walls, max(errs)])
    return out


def measure(plans: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Per plan: (median over reps of the slowest rank's wall s, max abs error)."""
    from moeplan.runtime.spawn import spawn_world

    reports = spawn_world(_worker, 4, (plans,), deadline_s=600)
    bad = [r for r in reports if not r["ok"]]
    if bad:
        raise RuntimeError(bad[0]["error"])
    out = []
    for i in range(len(plans)):
        per_rank = [r["result"][i] for r in reports]
        slowest = [max(rank[k] for rank in per_rank) for k in range(REPS)]
        out.append((statistics.median(slowest), max(rank[REPS] for rank in per_rank)))
    return out


def reference_s() -> float:
    """Median time of the single-process reference forward on the same model and tokens."""
    import torch

    from moeplan.runtime.config import MoEConfig
    from moeplan.runtime.layers.decoder import reference_forward
    from moeplan.runtime.layers.model import init_model, make_inputs

    torch.set_num_threads(1)
    cfg = MoEConfig()
    layers, x = init_model(cfg, 0), make_inputs(cfg, TOKENS // SEQ, SEQ, 1)
    times = []
    with torch.no_grad():
        for _ in range(REPS + 1):
            start = time.perf_counter()
            reference_forward(x, layers, cfg)
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def run() -> list[dict]:
    ref = reference_s()
    rows = []
    for name, (wall, err) in zip(CASES, measure(list(CASES.values())), strict=True):
        rows.append(
            {
                "name": f"{name}, W=4, {TOKENS} tokens (CPU/gloo)",
                "value": wall * 1e3,
                "unit": "ms",
                "reference": ref * 1e3,
                "ratio": wall / ref,
                "target": "max abs err <= 1e-5 (no speed target on CPU)",
                "note": f"reference = one-process forward, 1 thread; max abs err {err:.1e}",
            }
        )
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
