"""Baselines for SMIDT (paper 001, §5.2): hand-tuned layer-level PP without DPMoE.

All on the same module cost tables as the search. Each baseline uses one *homogeneous*
configuration for the whole model — attention ``(tp, dp)`` (dense MLPs follow it when they
can) and MoE ``(tp, ep)`` with ``dpmoe = 1`` — and cuts only between whole layers:

* ``uniform``: ``N/S`` layers per stage (the first ``N mod S`` stages take one more).
* ``time_balanced``: the layer cut minimising the bottleneck stage time within memory (exact:
  the same binary search over one-choice "modules" that are whole layers).
* ``no_pp``: one stage on all GPUs (best TP/EP).

Each is reported at its best PP degree and configuration by the same throughput model as the
SMIDT plan (the paper's baselines are the best of a manual search over the same knobs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from moeplan.planners.pipeline.cost import Choice
from moeplan.planners.pipeline.search import search_partition
from moeplan.planners.pipeline.stages import DegreeTables, PipelinePlan, assemble, choose_plan


def homogeneous_configs(dt: DegreeTables) -> list[tuple[int, ...]]:
    """Choice index per module for every homogeneous (attention, MoE) configuration."""

    def index(table, want: Choice) -> int | None:
        return next((i for i, c in enumerate(table.choices) if c == want), None)

    attn = next(t for t in dt.tables if t.module.kind == "attn")
    moe = next((t for t in dt.tables if t.module.kind == "moe"), None)
    moe_opts = [c for c in moe.choices if c.dpmoe == 1] if moe else [None]
    out = []
    for a in attn.choices:
        for m in moe_opts:
            picks = []
            for t in dt.tables:
                want = m if t.module.kind == "moe" else a
                i = index(t, want) if want is not None else None
                if i is None and t.module.kind == "mlp":
                    i = int(np.argmin(t.times()))  # MLP cannot follow attention's split
                if i is None:
                    break
                picks.append(i)
            if len(picks) == len(dt.tables):
                out.append(tuple(picks))
    return out


def _layer_bounds_uniform(num_layers: int, stages: int) -> tuple[int, ...]:
    per, extra = divmod(num_layers, stages)
    bounds, layer = [0], 0
    for j in range(stages):
        layer += per + (1 if j < extra else 0)
        bounds.append(2 * layer)
    return tuple(bounds)


def _fits(dt: DegreeTables, bounds: tuple[int, ...], picks: tuple[int, ...]) -> bool:
    """Memory check in the search's units, so SMIDT's search space contains the baseline."""
    used = np.concatenate([[0], np.cumsum([dt.units[m][picks[m]] for m in range(len(picks))])])
    pre_b = np.concatenate([[0.0], np.cumsum(dt.base)])
    return all(
        used[b] - used[a] <= math.floor(dt.cap_units - (pre_b[b] - pre_b[a]))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    )


def _balanced_bounds(dt: DegreeTables, picks: tuple[int, ...]) -> tuple[int, ...] | None:
    n = len(picks)
    times = np.array([dt.tables[m].costs[picks[m]].time_s for m in range(n)])
    layer_t = times.reshape(-1, 2).sum(axis=1)
    layer_u = np.array([dt.units[m][picks[m]] for m in range(n)]).reshape(-1, 2).sum(axis=1)
    layer_b = dt.base.reshape(-1, 2).sum(axis=1)
    part = search_partition(
        [np.array([v]) for v in layer_t],
        [np.array([u]) for u in layer_u],
        dt.cap_units,
        dt.ctx.pp,
        eps=1e-7,
        base=layer_b,
    )
    return None if part is None else tuple(2 * b for b in part.bounds)


def baselines_for_degree(
    dt: DegreeTables, rounds: int, async_pp: bool
) -> dict[str, PipelinePlan | None]:
    """Best uniform and best time-balanced layer-level plan for this PP degree."""
    layers = len(dt.tables) // 2
    found: dict[str, list[PipelinePlan]] = {"uniform": [], "time_balanced": []}
    if layers < dt.ctx.pp:
        return {k: None for k in found}
    uniform = _layer_bounds_uniform(layers, dt.ctx.pp)
    for picks in homogeneous_configs(dt):
        if _fits(dt, uniform, picks):
            found["uniform"].append(assemble("uniform", dt, uniform, picks, rounds))
        balanced = _balanced_bounds(dt, picks)
        if balanced is not None:
            found["time_balanced"].append(assemble("time_balanced", dt, balanced, picks, rounds))
    return {k: choose_plan(v, async_pp) for k, v in found.items()}


def all_baselines(
    degrees: Mapping[int, DegreeTables | None], rounds: int, async_pp: bool
) -> dict[str, PipelinePlan | None]:
    """``uniform``/``time_balanced`` at their best PP degree; ``no_pp`` (PP 1)."""
    per: dict[str, list[PipelinePlan]] = {"uniform": [], "time_balanced": [], "no_pp": []}
    for pp, dt in degrees.items():
        if dt is None:
            continue
        got = baselines_for_degree(dt, rounds, async_pp)
        for name, plan in got.items():
            if plan is None:
                continue
            per["no_pp" if pp == 1 else name].append(plan)
    out = {k: choose_plan(v, async_pp) for k, v in per.items()}
    if out["no_pp"] is not None:
        out["no_pp"] = _renamed(out["no_pp"], "no_pp")
    return out


def _renamed(plan: PipelinePlan, method: str) -> PipelinePlan:
    from dataclasses import replace

    return replace(plan, method=method)
