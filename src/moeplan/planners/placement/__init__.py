"""Sem-MoE — expert placement and request/token scheduling from token–expert affinity (paper 002).

Sections implemented: §3.1 the affinity model from a routing trace — token→expert activation
counts, ``P(expert | token)``, expert hotness, inter-layer device-transition (n-gram, n = 2)
tables (:mod:`.affinity`); §3.2 co-clustering of tokens and experts into C = EP groups with equal
experts per device and balanced token load (:mod:`.cocluster`); §3.3 / App. B the online
schedulers: attention-DP request scheduling (Algorithm 2) and the attention-TP token plan
(Algorithm 3; :mod:`.sched`); metrics on a held-out split — LAR, imbalance, all-to-all bytes
and the layer time they imply through the cost model (:mod:`.metrics`). Baselines: contiguous
placement, DeepSeek EPLB (:mod:`.eplb`, reproduces the reference vectors), and an inter-layer
transition placement in the spirit of ExFlow / MoETuner (:mod:`.baselines`).

Entry point: :func:`place`.

Departures from the paper: the alternating greedy is replaced by exact assignment /
transportation steps (better, never worse on the same objective); one token clustering is
shared by all layers; a validation guard falls back to contiguous placement when Sem-MoE does
not beat it on held-out requests.
"""

from moeplan.planners.placement.eplb import rebalance_experts
from moeplan.planners.placement.planner import (
    METHODS,
    MethodResult,
    PlaceConfig,
    PlacementResult,
    cost_evaluator,
    physical_to_logical,
    place,
)

__all__ = [
    "METHODS",
    "MethodResult",
    "PlaceConfig",
    "PlacementResult",
    "cost_evaluator",
    "physical_to_logical",
    "place",
    "rebalance_experts",
]
