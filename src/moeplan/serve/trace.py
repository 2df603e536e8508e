"""Chrome trace (Perfetto) of a serving run: one complete event per engine iteration.

Built with :func:`moeplan.sim.chrome_trace` (the simulator's and runtime's format), so the
serving timeline opens next to task-level schedules. The iterations run on one resource
(``engine``), named ``prefill``/``decode``/``mixed`` by what they carry; each event's ``args``
add the decode tokens, prefill tokens and allocated KV tokens of that iteration. A second
resource, ``queue``, shows nothing but is left out; long runs are cut to ``max_iterations``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moeplan.serve.engine.run import SimResult
from moeplan.sim import Schedule, TaskGraph, chrome_trace

MAX_ITERATIONS = 20_000


def _kind(dec: int, pre: int) -> str:
    if dec and pre:
        return "mixed"
    return "prefill" if pre else "decode"


def serve_trace(
    res: SimResult,
    *,
    label: str = "engine",
    max_iterations: int = MAX_ITERATIONS,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Chrome trace-event object of the first ``max_iterations`` iterations of ``res``."""
    n = min(len(res.iter_end_s), max_iterations)
    g = TaskGraph()
    for i in range(n):
        dec, pre = int(res.iter_decode[i]), int(res.iter_prefill[i])
        kind = _kind(dec, pre)
        g.add(
            f"{kind} d{dec} p{pre}",
            "engine",
            float(res.iter_end_s[i] - res.iter_start_s[i]),
            kind=kind,
        )
    sched = Schedule(
        graph=g, start=res.iter_start_s[:n].copy(), end=res.iter_end_s[:n].copy(), mode="serve"
    )
    meta = {
        "iterations": int(len(res.iter_end_s)),
        "shown": n,
        "kv_capacity_tokens": res.kv_capacity,
        "preemptions": res.preemptions,
    }
    meta.update(metadata or {})
    trace = chrome_trace({label: sched}, metadata=meta)
    i = 0
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X":
            ev["args"] = {
                "iteration": i,
                "decode_tokens": int(res.iter_decode[i]),
                "prefill_tokens": int(res.iter_prefill[i]),
                "kv_tokens": int(res.iter_kv[i]),
            }
            i += 1
    return trace
