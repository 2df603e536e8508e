"""An upper bound of a disaggregated deployment's SLO-bound capacity, from its pools alone.

A deployment of ``x`` prefill instances and ``y`` decode instances serves ``lam`` requests/s
in steady state only if each pool does: the prefill pool computes every prompt and the
decode pool every output token after the first. Per instance, with the iteration-time lower
bounds of :mod:`moeplan.search.capacity.bound` (the same grid argument, the same shortest-context
pricing):

- **Prefill instance.** Prompt-only requests (one output token: the prefill engine computes
  the first token): ``lam_p <= P / pt``, ``P`` the prefill tokens/s bound over iterations of
  at most the instance's chunk (pieces of the shortest prompt), ``pt`` the mean prompt tokens
  not served from the prefix cache.
- **Decode instance.** Each request arrives with its prompt's KV and produces ``osl - 1``
  tokens (its first decode step is the one-token chunk that joins the running batch). At
  most ``b_max`` sequences run (the pool's running cap, and what its KV holds at the shortest
  context ``isl_min + 1``), so ``lam_d <= D / (osl - 1)``, ``D`` the decode tokens/s bound of
  :func:`moeplan.search.capacity.bound.capacity_bound` — cut, at an SLO percentile of 90 or more, to
  batches whose step fits the TPOT SLO (a request's TPOT is at least the mean step it sits
  in; the decode pool runs no prefill iterations, so the whole SLO is the step's), and
  scaled by MTP's tokens per step.

Deployment: ``lam <= min(x lam_p, y lam_d)``. Round-robin dealing, KV transfers and the
TTFT SLO only lower what the deployment reaches below this. One allowance: the capacity's
stability test (:mod:`moeplan.search.capacity.slo`) accepts a queue whose wait grows by less than
``GROWTH_SLOPE`` seconds per second of arrivals — a load up to ``1 + GROWTH_SLOPE`` times
what the pool sustains — so the bound is ``(1 + GROWTH_SLOPE) min(x lam_p, y lam_d) osl / G``
output tokens/s per GPU over the deployment's ``G`` GPUs (without it an attention-FFN
deployment's simulated capacity was 1 % above its pool's limit). tests/test_disagg_search.py
checks it is never below the simulated capacity.
"""

from __future__ import annotations

import math

from moeplan.search.capacity.bound import (
    BUCKET_MARGIN,
    TPOT_PERCENTILE,
    DecodeCurve,
    grid,
    prefill_batch,
    throughput,
)
from moeplan.search.capacity.slo import GROWTH_SLOPE
from moeplan.serve.engine.config import EngineConfig, Evaluator
from moeplan.serve.engine.run import tokens_per_step
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload


def _isl_min(workload: ServeWorkload) -> int:
    isl = workload.isl
    return isl.mean if isl.kind == "fixed" else isl.low


def prefill_rate_bound(evaluate: Evaluator, cfg: EngineConfig, workload: ServeWorkload) -> float:
    """Requests/s one prefill instance can never exceed (module docstring)."""
    isl_min = _isl_min(workload)
    q_min = max(1, isl_min - math.floor(workload.prefix_hit * isl_min))
    c_max = max(1, cfg.chunk_tokens or cfg.kv_tokens)
    p = throughput(grid(c_max), lambda c: evaluate(prefill_batch(c, min(c, q_min))))
    isl = workload.isl.mean
    pt = max(1e-9, isl - math.floor(workload.prefix_hit * isl))
    return p / pt


def decode_rate_bound(
    evaluate: Evaluator, cfg: EngineConfig, workload: ServeWorkload, slo: SLO
) -> float:
    """Requests/s one decode instance can never exceed (module docstring); inf when its
    requests produce no token after the first."""
    tokens = workload.osl.mean - 1
    if tokens <= 0:
        return math.inf
    isl_min = _isl_min(workload)
    ctx = max(1, math.floor((isl_min + 1) * (1 - BUCKET_MARGIN)))
    b_max = max(1, min(cfg.max_running, cfg.kv_tokens // (isl_min + 1)))
    tpot = slo.tpot_s if slo.tpot_s is not None and slo.percentile >= TPOT_PERCENTILE else math.inf
    tau = tokens_per_step(evaluate)
    return tau * DecodeCurve(evaluate, b_max, ctx).bound(tpot * tau) / tokens


def deployment_rate_bound(x: int, prefill_rps: float, y: int, decode_rps: float) -> float:
    """Requests/s a deployment of ``x`` and ``y`` such instances never sustains (module
    docstring: the stability test's allowance included)."""
    return (1.0 + GROWTH_SLOPE) * min(x * prefill_rps, y * decode_rps)
