"""SMIDT — module-level pipeline partition for dynamic top-k routing, with DPMoE (paper 001).

Sections implemented: §3 the module units ``[attn_1, moe_1, …, attn_N, moe_N]`` and each
module's ``(t, e, d)`` choices with ``t·e·d = P/S`` (:mod:`.cost`: ``Dur``/``Mem`` from the
cost model, including the TP all-reduce, EP all-to-all over the group it spans and the
re-sharding between attention and MoE layouts; MoE cost at the layer's mean activated experts);
§4 Eq. 1 with Algorithms 1–2 — binary search on the bottleneck, FEASIBLE's greedy stage
extension with a multiple-choice knapsack per stage (:mod:`.search`); the choice of PP degree
by predicted throughput with P2P sends and pipeline fill, sync and async (§4.3; :mod:`.stages`).
Baselines on the same tables: uniform layer-count PP, time-balanced layer-level PP, no PP
(:mod:`.baselines`).

Entry point: :func:`plan_pipeline`.

Departures from the paper: the paper picks the PP degree by "estimated throughput" without a
formula — ours is in :mod:`.stages`; after the search, memory is levelled across stages at the
same bottleneck when that costs < 1 % throughput; the exact check (``verify``) is exhaustive
search on small instances and an exact dynamic program otherwise.
"""

from moeplan.planners.pipeline.planner import plan_pipeline, smallest_memory_needed
from moeplan.planners.pipeline.stages import (
    DegreeTables,
    PipelinePlan,
    PipelineResult,
    StagePlan,
    degree_tables,
    pipeline_throughput,
    pp_degrees,
)

__all__ = [
    "DegreeTables",
    "PipelinePlan",
    "PipelineResult",
    "StagePlan",
    "degree_tables",
    "pipeline_throughput",
    "plan_pipeline",
    "pp_degrees",
    "smallest_memory_needed",
]
