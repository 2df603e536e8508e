"""The collectives of an engine's fused MoE under expert parallelism without DeepEP, priced.

Engines that run their fused MoE with ``--ep-size`` / ``--enable-expert-parallel`` and no
DeepEP send no token per routed copy: every rank of the MoE group holds all of the group's
tokens (already there under attention TP, gathered under attention DP), runs its local experts
on them and the outputs are summed back (an all-reduce, or a reduce-scatter under attention
DP). Which collectives, over which group and at how many bytes per token, is the engine's
decision (:meth:`moeplan.backends.base.EngineBackend.fused_ep_comm`); this module prices them
with the cluster's collective model (:meth:`moeplan.cost.CostModel.collective`: the engine's
measured all-reduce inside an NVLink domain where its tables have it, else the NCCL α-β
formulas of :mod:`moeplan.cost.collectives`).

Per rank the gather moves ``(n - 1) x`` a rank's tokens x one token's bytes, against an
all-to-all's ``top_k x`` a rank's tokens ``x (n - 1) / n``: at EP 2 with top-8 routing the
all-to-all is 4x the bytes of the all-gather. The routing's imbalance does not enter: every
rank receives every token.

Pure: the cost model is handed in.
"""

from __future__ import annotations

from moeplan.backends import backend_or_none
from moeplan.backends.base import EpCollective
from moeplan.cost import CostModel
from moeplan.planners.layout import Layout
from moeplan.specs import ModelSpec


def group_ranks(layout: Layout, gpn: int) -> dict[str, tuple[int, int]]:
    """``(ranks, NVLink domains spanned)`` of each group an :class:`EpCollective` names, for
    ``layout`` on a cluster of ``gpn`` GPUs per NVLink domain: ``moe`` every GPU of a
    pipeline stage, ``dp`` one rank per attention-DP group (strided by the attention TP, so
    it spans as many domains as the stage, at most one per rank), ``tp`` one attention-TP
    group."""
    w = layout.stage_gpus
    stage_nodes = -(-w // gpn)
    return {
        "moe": (w, stage_nodes),
        "dp": (layout.attn_dp, min(layout.attn_dp, stage_nodes)),
        "tp": (layout.attn_tp, -(-layout.attn_tp // gpn)),
    }


def collective_seconds(
    cost: CostModel,
    coll: EpCollective,
    groups: dict[str, tuple[int, int]],
    tokens: float,
    dp_tokens: float,
) -> float:
    """Seconds of ``coll`` when the attention-DP ranks hold ``tokens`` tokens together and one
    of them ``dp_tokens``: its buffer is ``tokens`` (``dp_tokens`` for a ``tp`` group) times
    its bytes per token (:class:`EpCollective`)."""
    n, nodes = groups[coll.group]
    buf = (dp_tokens if coll.group == "tp" else tokens) * coll.bytes_per_token
    return cost.collective(coll.op, buf, n, nodes)


def fused_ep_seconds(
    cost: CostModel,
    model: ModelSpec,
    layout: Layout,
    gpn: int,
    prefill: bool,
    tokens: float,
    dp_tokens: float,
) -> tuple[float, float] | None:
    """``(dispatch, combine)`` seconds of one MoE layer's fused expert parallelism on the
    engine of ``cost`` (module docstring), the attention-DP ranks holding ``tokens`` tokens
    together and one of them ``dp_tokens``; None where ``cost`` prices no engine or its
    engine states no such path (the all-to-all of moeplan's own model stays), or the layout
    has no EP."""
    b = backend_or_none(cost.engine)
    if b is None or layout.moe_ep <= 1:
        return None
    router_bytes = model.num_experts * model.hidden_bytes / model.hidden_size
    comm = b.fused_ep_comm(layout.attn_dp, layout.moe_ep, prefill, model.hidden_bytes, router_bytes)
    if comm is None:
        return None
    groups = group_ranks(layout, gpn)
    disp = sum(collective_seconds(cost, c, groups, tokens, dp_tokens) for c in comm.dispatch)
    comb = sum(collective_seconds(cost, c, groups, tokens, dp_tokens) for c in comm.combine)
    return disp, comb
