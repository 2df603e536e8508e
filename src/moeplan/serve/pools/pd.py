"""Prefill/decode disaggregation (DistServe; SGLang and vLLM PD modes) on the serving engine.

A deployment is ``x`` prefill instances of one layout and ``y`` decode instances of another
(a colocated :class:`Layout`, or an attention–FFN disaggregated :class:`AFDLayout`).
One run (:func:`simulate_pd`) reuses :func:`moeplan.serve.engine.run.simulate` for every
instance — no second simulator:

1. **Prefill pool.** Requests are dealt round-robin to the ``x`` instances (the PD router's
   round-robin policy); each instance runs them as prefill-only requests (output 1 token: the
   prefill engine computes the first token, as SGLang and vLLM PD do).
2. **KV transfer.** When its prefill ends, a request's KV cache
   (:meth:`ModelSpec.kv_bytes_for_context` of the prompt — MLA's compressed latent, sliding
   layers capped) goes to a decode instance: ``latency + bytes / (senders · bandwidth)``
   over the inter-node link (:meth:`CostModel.link_transfer`; intra-node when the whole
   deployment fits one node). ``senders`` = GPUs of the prefill rank holding distinct KV
   shards (GQA heads split over attention TP; MLA's latent is replicated: 1). Transfers of
   one prefill instance queue FIFO on ``attn_dp`` lanes (one per attention-DP rank).
3. **Decode pool.** In KV-arrival order, requests are dealt round-robin to the ``y``
   instances; each arrives with its prompt *and first token* in KV (a prefix-cache hit of
   ``isl`` tokens) and computes the next token as a one-token chunk in a mixed batch, then
   ``osl - 2`` decode steps. Requests with one output token stop at step 1. SGLang's decode
   server runs no forward for an arrival (``disaggregation/decode.py``: a "prebuilt extend"
   batch only populates metadata and is merged into the running batch to decode), so a
   colocated decode pool prices that one-token chunk as one more decoding sequence
   (:class:`DecodeStepEvaluator`).

Metrics (the user's view): TTFT = KV arrival − arrival (the decode instance streams the first
token; with an infinitely fast link this is the prefill pool's TTFT); TPOT = (finish − KV
arrival) / (osl − 1), the decode pool's; ITLs are the decode pool's plus each request's wait
for its first decode step. KV utilisation and preemptions are the decode pool's.

Departures: the prefill instance frees a request's KV when its prefill ends (the engines
hold it until the transfer completes); decode-instance KV is allocated on arrival, never
pre-reserved; link contention between prefill instances is not modelled (one NIC per GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from moeplan.cost import CostModel
from moeplan.errors import require
from moeplan.planners.layout import Layout
from moeplan.serve.deployment import PDLayout
from moeplan.serve.engine.config import EngineConfig, Evaluator, SimResult
from moeplan.serve.engine.run import simulate
from moeplan.serve.iteration.batch_grid import GridEvaluator
from moeplan.serve.iteration.grid import bucket
from moeplan.serve.iteration.model import Batch
from moeplan.serve.workload.arrivals import Requests
from moeplan.specs import ClusterSpec, ModelSpec


def kv_senders(model: ModelSpec, prefill: Layout) -> int:
    """GPUs of one prefill attention-DP rank that hold distinct shards of a request's KV."""
    return 1 if model.attention == "mla" else min(prefill.attn_tp, model.num_kv_heads)


def transfer_inter_node(cluster: ClusterSpec, layout: PDLayout) -> bool:
    """KV moves over the network unless the whole deployment sits in one NVLink domain (a
    node, or an NVL72 rack)."""
    return layout.gpus > cluster.nvlink_domain


def kv_transfer_s(
    model: ModelSpec, cost: CostModel, prefill: Layout, isl: int, inter_node: bool
) -> float:
    """Seconds to move one request's prompt KV (module docstring, step 2)."""
    nbytes = model.kv_bytes_for_context(isl) / kv_senders(model, prefill)
    return cost.link_transfer(nbytes, inter_node)


@dataclass(frozen=True, kw_only=True, slots=True)
class PDRun:
    """One PD run: the user's view (``result``) and each pool's raw runs."""

    result: SimResult
    prefill_runs: tuple[SimResult, ...]
    decode_runs: tuple[SimResult, ...]
    kv_arrival_s: np.ndarray
    transfer_s: np.ndarray
    decode_index: tuple[tuple[SimResult, np.ndarray], ...] = ()

    def prefill_utilisation(self) -> float:
        """Busy fraction of the busiest prefill instance while requests arrive (iterations
        starting between the first and the last arrival). A decode instance is busy whenever
        it holds a request, so its load is judged by its queue instead (:meth:`waits`)."""
        a = self.result.arrival_s
        t0, t1 = float(a.min()), float(a.max())
        if t1 <= t0:
            return 0.0
        best = 0.0
        for r in self.prefill_runs:
            inside = (r.iter_start_s >= t0) & (r.iter_start_s < t1)
            best = max(best, float((r.iter_end_s - r.iter_start_s)[inside].sum()) / (t1 - t0))
        return best

    def waits(self) -> tuple[np.ndarray, np.ndarray]:
        """Queueing per request (arrival order) at the prefill and the decode pool (NaN for
        requests that never reach the decode pool)."""
        r = self.result
        pre = r.admit_s - r.arrival_s
        dec = np.full(len(pre), np.nan)
        for run, idx in self.decode_index:
            dec[idx] = run.admit_s - run.arrival_s
        return pre, dec


def _deal(n: int, parts: int) -> list[np.ndarray]:
    return [np.arange(j, n, parts) for j in range(parts)]


def _prefill_pool(
    reqs: Requests, x: int, cfg: EngineConfig, evaluate: Evaluator, horizon_s: float | None
) -> tuple[np.ndarray, np.ndarray, list[tuple[SimResult, np.ndarray]]]:
    """First-token and admission times of every request, and each instance's run."""
    n = len(reqs)
    first, admit = np.empty(n), np.empty(n)
    runs = []
    for idx in _deal(n, x):
        if len(idx) == 0:
            continue
        sub = Requests(
            arrival_s=reqs.arrival_s[idx],
            isl=reqs.isl[idx],
            osl=np.ones(len(idx), dtype=np.int64),
            cached=reqs.cached[idx],
        )
        res = simulate(sub, cfg, evaluate, horizon_s=horizon_s)
        first[idx], admit[idx] = res.first_token_s, res.admit_s
        runs.append((res, idx))
    return first, admit, runs


def _transfers(
    first: np.ndarray,
    runs: list[tuple[SimResult, np.ndarray]],
    lanes: int,
    seconds: Callable[[int], float],
    isl: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """KV arrival time and transfer time per request: FIFO on ``lanes`` per instance (NaN
    for a request whose prefill was not done at the simulation's horizon)."""
    arrive, took = np.full(len(first), np.nan), np.full(len(first), np.nan)
    sizes, inverse = np.unique(isl, return_inverse=True)
    took_all = np.array([seconds(int(n)) for n in sizes])[inverse]  # one call per prompt size
    for _, idx in runs:
        idx = idx[~np.isnan(first[idx])]
        idx = idx[np.argsort(first[idx], kind="stable")]
        took[idx] = took_all[idx]
        arrive[idx] = _fifo(first[idx].tolist(), took_all[idx].tolist(), lanes)
    return arrive, took


def _fifo(ready: list[float], dur: list[float], lanes: int) -> list[float]:
    """End times of jobs ready at ``ready`` (ascending) taking ``dur`` each, served in order
    by the first of ``lanes`` servers to become free (the lowest-numbered among ties)."""
    out = []
    if lanes == 1:
        free = 0.0
        for r, d in zip(ready, dur, strict=True):
            free = (r if r >= free else free) + d  # max(r, free): equal values are one float
            out.append(free)
        return out
    lane = [0.0] * lanes
    for r, d in zip(ready, dur, strict=True):
        j = lane.index(min(lane))
        lane[j] = (r if r >= lane[j] else lane[j]) + d
        out.append(lane[j])
    return out


def _decode_pool(
    reqs: Requests,
    kv_arrival: np.ndarray,
    y: int,
    cfg: EngineConfig,
    evaluate: Evaluator,
    horizon_s: float | None,
) -> tuple[np.ndarray, list[tuple[SimResult, np.ndarray]]]:
    """Finish times (NaN for one-token requests and requests not done at the horizon) and
    each decode instance's run."""
    finish = np.full(len(reqs), np.nan)
    todo = np.flatnonzero((reqs.osl > 1) & ~np.isnan(kv_arrival))
    todo = todo[np.argsort(kv_arrival[todo], kind="stable")]
    runs = []
    for part in _deal(len(todo), y):
        idx = todo[part]
        if len(idx) == 0:
            continue
        sub = Requests(
            arrival_s=kv_arrival[idx],
            isl=reqs.isl[idx] + 1,
            osl=reqs.osl[idx] - 1,
            cached=reqs.isl[idx],
        )
        res = simulate(sub, cfg, evaluate, horizon_s=horizon_s)
        finish[idx] = res.finish_s
        runs.append((res, idx))
    return finish, runs


class DecodeStepEvaluator:
    """A colocated decode pool's evaluator. A request arriving with its KV joins the running
    batch as one more decoding sequence (step 3 of the module docstring; SGLang's PD decode
    server adds it to the running decode batch, and :class:`moeplan.serve.pools.afd.AFDIteration`
    prices it so), so an iteration of ``b`` decode sequences and ``k`` one-token chunks is
    priced as a decode step of ``b + k`` sequences at their mean context (on the engine's
    context grid), and decode steps on the batch grid of
    :class:`moeplan.serve.iteration.batch_grid.GridEvaluator`. Longer chunks are priced as given."""

    def __init__(self, evaluate: Evaluator) -> None:
        self.inner = GridEvaluator(evaluate)

    def __call__(self, batch: Batch) -> float:
        pre = batch.prefill
        if pre:
            ctx = 0
            for q, c in pre:
                if q != 1:  # a longer chunk: priced as given
                    return self.inner(batch)
                ctx += c
            n = batch.decode + len(pre)
            total = batch.decode * batch.decode_ctx + ctx
            batch = Batch(n, bucket((total + n // 2) // n), ())
        return self.inner(batch)

    def breakdown(self, batch: Batch) -> dict[str, float]:
        return self.inner.breakdown(batch)


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolSetup:
    """What :func:`simulate_pd` needs of a deployment: each pool's scheduler and evaluator,
    and the KV transfer time of a prompt of ``isl`` tokens."""

    layout: PDLayout
    prefill_cfg: EngineConfig
    decode_cfg: EngineConfig
    prefill_eval: Evaluator
    decode_eval: Evaluator
    transfer: Callable[[int], float]


def simulate_pd(reqs: Requests, setup: PoolSetup, horizon_s: float | None = None) -> PDRun:
    """Run ``reqs`` (an open arrival stream) through the PD deployment (module docstring).
    ``horizon_s``: both pools stop at the first event after it (requests not done by then
    keep NaN times, as in :func:`moeplan.serve.engine.run.simulate`)."""
    require(reqs.closed == 0, "a PD simulation needs an open arrival stream (a rate)")
    lay = setup.layout
    first, admit, pre_runs = _prefill_pool(
        reqs, lay.x, setup.prefill_cfg, setup.prefill_eval, horizon_s
    )
    kv_at, took = _transfers(first, pre_runs, lay.prefill.attn_dp, setup.transfer, reqs.isl)
    finish, dec_runs = _decode_pool(
        reqs, kv_at, lay.y, setup.decode_cfg, setup.decode_eval, horizon_s
    )
    done_at_prefill = (reqs.osl <= 1) & ~np.isnan(kv_at)  # one-token requests end there
    finish = np.where(done_at_prefill, kv_at, finish)
    return PDRun(
        result=_combine(reqs, admit, kv_at, finish, pre_runs, dec_runs, setup.decode_cfg),
        prefill_runs=tuple(r for r, _ in pre_runs),
        decode_runs=tuple(r for r, _ in dec_runs),
        kv_arrival_s=kv_at,
        transfer_s=took,
        decode_index=tuple(dec_runs),
    )


def prefill_view(reqs: Requests, setup: PoolSetup, horizon_s: float | None = None) -> SimResult:
    """The user's view of ``reqs`` with only the prefill pool simulated: each KV transfer
    unqueued and the decode pool instantaneous (finish = KV arrival). The prefill runs are
    :func:`simulate_pd`'s own (same dealing, same horizon), so every request's prefill wait is
    the same and its TTFT at most what :func:`simulate_pd` gives: a deployment whose prefill
    view misses a TTFT percentile or grows a queue misses it too, at the prefill pool's cost
    alone."""
    lay = setup.layout
    first, admit, pre_runs = _prefill_pool(
        reqs, lay.x, setup.prefill_cfg, setup.prefill_eval, horizon_s
    )
    sizes, inverse = np.unique(reqs.isl, return_inverse=True)
    took = np.array([setup.transfer(int(n)) for n in sizes])[inverse]
    kv_at = first + took
    return _combine(reqs, admit, kv_at, kv_at, pre_runs, [], setup.decode_cfg)


def _combine(
    reqs: Requests,
    admit: np.ndarray,
    kv_at: np.ndarray,
    finish: np.ndarray,
    pre_runs: list[tuple[SimResult, np.ndarray]],
    dec_runs: list[tuple[SimResult, np.ndarray]],
    dec_cfg: EngineConfig,
) -> SimResult:
    """The user's view as one :class:`SimResult` (iterations: the decode pool's)."""
    dec = [r for r, _ in dec_runs]
    cat = np.concatenate

    def col(name: str, dtype: type = float) -> np.ndarray:
        return cat([getattr(r, name) for r in dec]) if dec else np.zeros(0, dtype=dtype)

    first_gap = [r.first_token_s - r.arrival_s for r in dec]
    itl_s = cat([col("itl_s"), *first_gap]) if dec else np.zeros(0)
    itl_w = cat([col("itl_weight", int), np.ones(sum(len(g) for g in first_gap), dtype=np.int64)])
    pre = [r for r, _ in pre_runs]
    return SimResult(
        arrival_s=reqs.arrival_s,
        admit_s=admit,
        first_token_s=kv_at,
        finish_s=finish,
        isl=reqs.isl,
        osl=reqs.osl,
        iter_start_s=col("iter_start_s"),
        iter_end_s=col("iter_end_s"),
        iter_decode=col("iter_decode", int),
        iter_prefill=col("iter_prefill", int),
        iter_kv=col("iter_kv", int),
        itl_s=itl_s,
        itl_weight=itl_w.astype(np.int64),
        kv_capacity=dec_cfg.kv_tokens,
        preemptions=sum(r.preemptions for r in pre + dec),
        prefill_tokens=sum(r.prefill_tokens for r in pre),
        recomputed_tokens=sum(r.recomputed_tokens for r in pre + dec),
        output_tokens=int(reqs.osl.sum()),
        # a decode instance's entry delivers the request's second token (the first came
        # with its KV: ``kv_at``), and its own recomputed prompts their next ones
        resumed_s=cat([col("first_token_s"), col("resumed_s")]) if dec else np.zeros(0),
    )
