"""Simulate a given P/D deployment under load (``serve-sim --pd``): the pools and the run of
:mod:`moeplan.search.disagg` for one user-given :class:`~moeplan.serve.pd.PDLayout`.

Each pool's scheduler is the one ``moeplan plan``'s P/D search gives that layout
(:func:`~moeplan.search.disagg.prefill_pool`: the engine's default chunk per attention-DP
rank; :func:`~moeplan.search.disagg.decode_pool`: the largest decode batch within the KV
pool and the engine's running cap — and within 90 % of the TPOT SLO, as the search sizes
it), found without the SLO filters the search applies (a given deployment is simulated
even when it misses them; the result says so). The run is
:func:`~moeplan.search.disagg.evaluate_candidate`: the largest Poisson rate meeting the SLOs
with both pools' queues stable, then the user's workload at ``--rate`` or at that rate.
"""

from __future__ import annotations

from dataclasses import replace

from moeplan.errors import MoeplanError, require
from moeplan.search.disagg import (
    Candidate,
    Context,
    DisaggResult,
    PoolSetup,
    _transfer_fn,
    decode_pool,
    evaluate_candidate,
    prefill_pool,
)
from moeplan.serve.afd import AFDLayout
from moeplan.serve.layout import ServeLayout, kv_capacity_tokens
from moeplan.serve.metrics import SLO
from moeplan.serve.pd import PDLayout, transfer_inter_node


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


def given_candidate(c: Context, pd: PDLayout) -> Candidate:
    """The deployment ``pd`` with its pools' schedulers and analytic capacities."""
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
    pd = replace(pd, prefill_knobs=p.knobs, decode_knobs=d.knobs, prefill_chunk=p.cfg.chunk_tokens)
    setup = PoolSetup(
        layout=pd,
        prefill_cfg=p.cfg,
        decode_cfg=d.cfg,
        prefill_eval=p.evaluate,
        decode_eval=d.evaluate,
        transfer=_transfer_fn(c, pd.prefill, transfer_inter_node(c.cluster, pd)),
    )
    rate = min(pd.x * p.rate, pd.y * d.rate)
    return Candidate(
        layout=pd,
        setup=setup,
        estimate=rate * c.workload.osl.mean / pd.gpus,
        rho=(rate / (pd.x * p.rate), rate / (pd.y * d.rate)),
        decode_note=d.note,
        capacity=(pd.x * p.rate, pd.y * d.rate),
    )


def simulate_given(
    c: Context, pd: PDLayout, *, rate_given: bool, search_requests: int
) -> DisaggResult:
    """The given deployment under ``c.workload`` (module docstring)."""
    k = given_candidate(c, pd)
    return evaluate_candidate(c, k, rate_given=rate_given, search_requests=search_requests)
