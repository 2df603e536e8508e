"""MixServe — automatic hybrid TP/EP/DP/PP strategy analysis (paper 003).

Sections implemented: §III-A the strategy grammar (per block an intra- and an inter-node parallel
kind, power-of-two degrees, PP across decoder layers; :mod:`.space`), §III-B the cost of a
strategy — compute (Eq. 4), communication (Eqs. 1–3, 5) per link level with the DP/EP cases of
§III-B3, PP point-to-point, the service time per token (Eq. 6), the memory constraint (Eq. 8,
with KV cache) — and the M/M/1 queueing estimates of TTFT/ITL/throughput (Eqs. 7, 9–11;
:mod:`.queueing`), §III-C the fused RS-Combine and AG-Dispatch (Algs. 1–2; :mod:`.fused`).

Entry point: :func:`analyze` (enumerate → evaluate → filter by memory and SLOs → rank →
baselines of §IV-A on the same footing). :func:`to_plan` builds the family's :class:`Plan`.

Departures from the paper (errata and decisions):
- Eq. 7 is reported as unstable (``rho >= 1``) instead of giving a negative waiting time.
- The paper names no single ranking objective; :func:`analyze` ranks stable queues first, then
  throughput (or TTFT / ITL on request), with deterministic tie-breaks.
- PP is priced as one batch walking through the stages (Eq. 6), without micro-batch
  pipelining; SMIDT's pipeline model (:mod:`moeplan.planners.pipeline`) overlaps micro-batches.
"""

from moeplan.planners.strategy.analyzer import (
    Analysis,
    analyze,
    evaluate_mixserve_default,
    gains,
    meets_slo,
    pareto_front,
    result_dict,
    to_plan,
    zipf_routing,
)
from moeplan.planners.strategy.cost import StrategyEvaluator, StrategyResult
from moeplan.planners.strategy.space import enumerate_strategies

__all__ = [
    "Analysis",
    "StrategyEvaluator",
    "StrategyResult",
    "analyze",
    "enumerate_strategies",
    "evaluate_mixserve_default",
    "gains",
    "meets_slo",
    "pareto_front",
    "result_dict",
    "to_plan",
    "zipf_routing",
]
