"""Simulate a given P/D deployment under load (``serve-sim --pd``): the pools and the run of
:mod:`moeplan.search.disagg.pools` for one user-given :class:`~moeplan.serve.pools.pd.PDLayout`.

Each pool's scheduler is the one ``moeplan plan``'s P/D search gives that layout
(:func:`~moeplan.search.disagg.pools.prefill_pool`: the engine's default chunk per attention-DP
rank; :func:`~moeplan.search.disagg.pools.decode_pool`: the largest decode batch within the KV
pool and the engine's running cap — and within 90 % of the TPOT SLO, as the search sizes
it), found without the SLO filters the search applies (a given deployment is simulated
even when it misses them; the result says so). Its figure is the one ``moeplan plan`` ranks
by: the SLO-bound capacity of :func:`moeplan.search.disagg.search.search_capacity` (steady
state, the same measured window), then its steady run at ``--rate`` or at that capacity.
"""

from __future__ import annotations

from dataclasses import replace

from moeplan.errors import MoeplanError, require
from moeplan.planners.layout import Layout
from moeplan.search.disagg.bound import decode_rate_bound, prefill_rate_bound
from moeplan.search.disagg.capacity import result_of
from moeplan.search.disagg.pools import (
    Context,
    DisaggResult,
    InstanceCapacity,
    decode_pool,
    pool_fractions,
    prefill_pool,
)
from moeplan.search.disagg.search import pool_candidate, search_capacity
from moeplan.serve.deployment import AFDLayout, PDLayout, instance
from moeplan.serve.knobs import kv_pool
from moeplan.serve.layout import kv_capacity_tokens
from moeplan.serve.metrics import SLO


def _check_fits(c: Context, lay: Layout | AFDLayout, role: str) -> None:
    """One line on why ``lay`` cannot run ``c``'s model on ``c``'s cluster (an AFD
    instance: checked when its pool is sized)."""
    instance(lay).visit(colocated=lambda d: _check_layout(c, d.layout, role), afd=lambda _: None)


def _check_layout(c: Context, lay: Layout, role: str) -> None:
    """:func:`_check_fits` of a colocated instance: the largest KV pool of the memory
    fractions its pool is tried at (:func:`~moeplan.search.disagg.pools.pool_fractions`; the
    first one's error when none holds a pool)."""
    per_rank, first = 0, None
    for f in pool_fractions(c):
        try:
            lay.validate(c.model, c.cluster)
            pool = kv_pool(c.engine, c.model, c.cluster, lay, 0, f, role=role)
            got = kv_capacity_tokens(c.model, c.cluster, lay, lay.attn_dp, pool=pool)
        except MoeplanError as err:
            first = first or err
            continue
        per_rank = max(per_rank, got)
    if not per_rank and first is not None:
        raise MoeplanError(f"--pd {role} layout ({lay.label}): {first}")
    need = c.workload.isl.max + (c.workload.osl.max if role == "decode" else 1)
    require(
        need <= per_rank,
        f"--pd {role} layout ({lay.label}) holds {per_rank:,} KV tokens per rank; "
        f"one request needs {need:,}",
    )


def given_pools(c: Context, pd: PDLayout) -> tuple[InstanceCapacity, InstanceCapacity]:
    """The prefill and decode pools of the deployment ``pd`` (module docstring)."""
    n = c.cluster.num_gpus
    require(pd.gpus <= n, f"--pd deployment ({pd.label}) needs {pd.gpus} GPUs; the cluster has {n}")
    _check_fits(c, pd.prefill, "prefill")
    _check_fits(c, pd.decode, "decode")
    free = replace(c, slo=SLO(tpot_s=c.slo.tpot_s, percentile=c.slo.percentile))
    p = prefill_pool(free, pd.prefill)
    d = decode_pool(free, pd.decode)
    require(p is not None, f"--pd prefill layout ({pd.prefill.label}) cannot serve the prompts")
    require(
        d is not None,
        f"--pd decode layout ({pd.decode.label}) has no decode batch within the TPOT SLO",
    )
    assert p is not None and d is not None
    return p, d


def simulate_given(c: Context, pd: PDLayout, *, rate_given: bool, requests: int) -> DisaggResult:
    """The given deployment's SLO-bound capacity and its steady run at capacity or at the
    user's rate (module docstring)."""
    p, d = given_pools(c, pd)
    w = c.workload
    bounds = (
        prefill_rate_bound(p.evaluate, p.cfg, w),
        decode_rate_bound(d.evaluate, d.cfg, w, c.slo),
    )
    pc = pool_candidate(c, pd.family, p, d, pd.x, pd.y, bounds)
    search_capacity(pc, c, requests)
    return result_of(pc, c, rate_given=rate_given)
