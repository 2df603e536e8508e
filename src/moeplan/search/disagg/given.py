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
from moeplan.search.disagg.bound import decode_rate_bound, prefill_rate_bound
from moeplan.search.disagg.capacity import result_of
from moeplan.search.disagg.pools import (
    Candidate,
    Context,
    DisaggResult,
    Pool,
    decode_pool,
    make_candidate,
    prefill_pool,
)
from moeplan.search.disagg.search import pool_candidate, search_capacity
from moeplan.serve.layout import ServeLayout, kv_capacity_tokens
from moeplan.serve.metrics import SLO
from moeplan.serve.pools.afd import AFDLayout
from moeplan.serve.pools.pd import PDLayout


def _check_fits(c: Context, lay: ServeLayout | AFDLayout, role: str) -> None:
    """One line on why ``lay`` cannot run ``c``'s model on ``c``'s cluster."""
    if isinstance(lay, AFDLayout):
        return
    try:
        lay.validate(c.model, c.cluster)
        per_rank = kv_capacity_tokens(c.model, c.cluster, lay, lay.attn_dp)
    except MoeplanError as err:
        raise MoeplanError(f"--pd {role} layout ({lay.label}): {err}") from None
    need = c.workload.isl.max + (c.workload.osl.max if role == "decode" else 1)
    require(
        need <= per_rank,
        f"--pd {role} layout ({lay.label}) holds {per_rank:,} KV tokens per rank; "
        f"one request needs {need:,}",
    )


def given_pools(c: Context, pd: PDLayout) -> tuple[Pool, Pool]:
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


def given_candidate(c: Context, pd: PDLayout) -> Candidate:
    """The deployment ``pd`` with its pools' schedulers and analytic capacities."""
    p, d = given_pools(c, pd)
    return make_candidate(c, p, d, pd.x, pd.y)


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
