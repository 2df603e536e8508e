"""Simulator prediction for a measured DEP run (FinDEP plan), side by side with the measurement.

Task durations for the simulator are calibrated from the same run: ``attn``, ``shared`` and
``expert`` are the medians of the measured ``A``, ``S`` and ``E`` spans; ``a2e = e2a`` is half
the median round trip of one chunk's messages (counts + rows out, rows back) between AG rank 0
and EG rank ``ag``, timed right before the run (:func:`calibrate_link`). The FinDEP task graph
for the plan's ``(ma, r1, r2, order)`` is then simulated by :func:`moeplan.planners.dep.solver.schedule` and written
as a Chrome trace next to the measured one. The difference between the two makespans is the
simulator's error on this machine for this schedule (the measured spans include Python
overheads and gloo's CPU transfers that the model treats as separate resources).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from moeplan.planners.dep.solver import DepConfig, DepProblem, DepResult, DepTimes, schedule
from moeplan.runtime.engines.dep_params import DepParams
from moeplan.sim import chrome_trace


def calibrate_link(
    p: DepParams, rows: int, hidden: int, rank: int, rounds: int = 10, device: str = "cpu"
) -> float | None:
    """Half the median round trip (s) of one chunk's messages between AG 0 and EG ``ag``:
    forward the per-expert counts then ``[rows, hidden]`` fp32 rows (as A2E does), back the rows
    (as E2A does). Returned as both ``a2e`` and ``e2a``."""
    if rank not in (0, p.ag):
        return None
    buf = torch.zeros(max(rows, 1), hidden, device=device)
    counts = torch.zeros(8, dtype=torch.long, device=device)
    peer = p.ag if rank == 0 else 0
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        if rank == 0:
            dist.send(counts, peer)
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(counts, peer)
            dist.recv(buf, peer)
            dist.send(buf, peer)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / 2


def chunk_rows(p: DepParams, seq: int, top_k: int) -> int:
    """Rows one EG rank receives per chunk on average: ``ag · ma·S/r2 · top_k / eg``."""
    return max(1, round(p.ag * p.ma * seq / p.r2 * top_k / p.eg))


def _median(events: list[dict[str, Any]], prefix: str, lane: int) -> float:
    durs = [
        e["dur"]
        for e in events
        if e.get("ph") == "X"
        and e["tid"] == lane
        and e["name"].startswith(prefix)
        and e["name"][len(prefix) :][:1].isdigit()
    ]
    return statistics.median(durs) * 1e-6 if durs else 0.0


def predicted_trace(
    events: list[dict[str, Any]],
    p: DepParams,
    layers: int,
    seq: int,
    link_s: float,
    measured_s: float,
) -> dict[str, Any]:
    """Chrome trace of the simulator's schedule for this plan (calibrated task times)."""
    times = DepTimes(
        attn=_median(events, "A", 0),
        shared=_median(events, "S", 0),
        expert=_median(events, "E", 0),
        a2e=link_s,
        e2a=link_s,
    )
    cfg = DepConfig(ma=p.ma, r1=p.r1, r2=p.r2, order=p.order)
    problem = DepProblem(
        ag=p.ag,
        eg=p.eg,
        seq_len=seq,
        layers=layers,
        times=lambda ma, r2: times,
        max_r1=lambda ma: p.r1,
    )
    result = DepResult(
        variant="findep",
        config=cfg,
        makespan=0.0,
        tokens=problem.tokens(p.ma, p.r1),
        times=times,
        me=0.0,
    )
    sched = schedule(problem, result)
    return chrome_trace(
        {"simulated (calibrated)": sched},
        metadata={
            "source": "moeplan.sim (predicted)",
            "measured_makespan_s": measured_s,
            "predicted_makespan_s": float(sched.makespan),
            "calibrated_times_s": {
                "attn": times.attn,
                "shared": times.shared,
                "expert": times.expert,
                "a2e": times.a2e,
                "e2a": times.e2a,
            },
        },
    )
