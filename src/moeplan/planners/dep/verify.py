"""Exact job-shop optimum of a small DEP instance with OR-Tools CP-SAT (FinDEP §3.2's
scheduling subproblem with *free* task order on every resource).

For fixed ``(ma, r1, r2)`` the tasks, durations and precedence edges are those of
:func:`moeplan.planners.dep.schedule.build_graph`; CP-SAT may order the tasks on each of the
four resources (AG, A→E link, EG, E→A link) any way it likes, so its optimum is a lower bound
on every fixed order (ASAS, AASS, and the FIFO order on links and EG). Durations are scaled to
integers (``unit`` seconds, about 10^5 units in all) and the heuristics are re-simulated with
the same rounded durations, so the gap compares like with like. The ASAS schedule is passed
as a hint and its makespan as the horizon.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from moeplan.planners.dep.schedule import ORDERS, DepConfig, DepTimes, build_graph
from moeplan.sim import simulate

FIELDS = ("attn", "shared", "expert", "a2e", "e2a")


def _rounded(
    times: DepTimes, cfg: DepConfig, layers: int, resolution: float
) -> tuple[DepTimes, float]:
    tasks_per_layer = cfg.r1 * (2 + 3 * cfg.r2)
    total = layers * tasks_per_layer * max(getattr(times, f) for f in FIELDS)
    unit = total / resolution if total > 0 else 1.0
    vals = {f: round(getattr(times, f) / unit) * unit for f in FIELDS}
    return replace(times, **vals), unit


def cpsat_optimum(
    times: DepTimes,
    cfg: DepConfig,
    layers: int,
    *,
    time_limit_s: float = 10.0,
    workers: int = 2,
    resolution: float = 1e5,
) -> dict[str, Any]:
    """Optimal makespan with free per-resource order vs the ASAS and AASS schedules.

    Returns ``optimum_s``, ``bound_s`` (CP-SAT's proven lower bound), ``status``
    (``OPTIMAL`` or ``FEASIBLE`` when the time limit hit), ``asas_s``, ``aass_s`` and
    ``gap_best`` = (best of ASAS/AASS − optimum) / optimum, plus the instance and ``ms``.
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    rt, unit = _rounded(times, cfg, layers, resolution)
    heur = {o: simulate(build_graph(rt, replace(cfg, order=o), layers)) for o in ORDERS}
    g = build_graph(rt, replace(cfg, order="ASAS"), layers)
    dur = [round(d / unit) for d in g.dur]
    hint = heur["ASAS"]
    horizon = round(hint.makespan / unit) + 1
    m = cp_model.CpModel()
    start = [m.new_int_var(0, horizon, f"s{i}") for i in range(len(g))]
    ivs = [m.new_fixed_size_interval_var(start[i], dur[i], f"iv{i}") for i in range(len(g))]
    for r in range(len(g.resources)):
        m.add_no_overlap([ivs[i] for i in g.tasks_on(r)])
    for i, ps in enumerate(g.preds):
        for p in ps:
            m.add(start[i] >= start[p] + dur[p])
    span = m.new_int_var(0, horizon, "makespan")
    for i in range(len(g)):
        m.add(span >= start[i] + dur[i])
        m.add_hint(start[i], round(hint.start[i] / unit))
    m.minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT returned {solver.status_name(status)}")
    opt = solver.objective_value * unit
    best = min(s.makespan for s in heur.values())
    return {
        "layers": layers,
        "ma": cfg.ma,
        "r1": cfg.r1,
        "r2": cfg.r2,
        "tasks": len(g),
        "status": solver.status_name(status),
        "optimum_s": opt,
        "bound_s": solver.best_objective_bound * unit,
        "asas_s": heur["ASAS"].makespan,
        "aass_s": heur["AASS"].makespan,
        "gap_best": (best - opt) / opt,
        "gap_asas": (heur["ASAS"].makespan - opt) / opt,
        "gap_aass": (heur["AASS"].makespan - opt) / opt,
        "ms": (time.perf_counter() - t0) * 1e3,
    }
