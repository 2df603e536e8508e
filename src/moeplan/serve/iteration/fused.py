"""MixServe's fused AR-A2A in serving: one MoE layer's communication on a fused layout.

A fused layout (:attr:`moeplan.serve.layout.Layout.fused`; MoE TP = one node's GPUs,
EP = the stage's ``n`` nodes) runs MixServe's Algorithms 1-2 (§III-D) instead of the TP
all-reduce + EP all-to-all pair: AG-Dispatch (``n - 1`` inter-node dispatch rounds, one peer
node each, overlapped with ``n`` intra-node all-gathers) and RS-Combine (``n - 1`` combine
rounds overlapped with ``n`` reduce-scatters, then the all-gather of the rank's output).

The steps are priced exactly as the strategy planner prices them
(:meth:`moeplan.planners.strategy.fused.FusedLayer.priced` through the same
:class:`~moeplan.planners.strategy.comm.Collectives` of the cost model: a node holds
``tokens / n`` tokens, each chunk the rank's ``1 / (n m)`` slice of their ``k`` routed copies
times the routing imbalance); the overlap is the shared mechanism's schedule
(:func:`moeplan.cost.overlap.fused_rounds`, the one two-batch overlap uses). As the strategy
planner does, a layer takes the cheaper of the fused schedule and the same bytes sent
sequentially, RS -> A2A -> AG (latency-bound decode steps may prefer the sequential path; a
runtime with both paths would). Both replace the unfused layout's TP all-reduce of every
token of the node and its all-to-all of unsharded hidden states.
"""

from __future__ import annotations

from moeplan.cost import CostModel
from moeplan.cost.overlap import fused_rounds
from moeplan.planners.strategy.comm import Collectives
from moeplan.planners.strategy.fused import FusedLayer
from moeplan.specs import ModelSpec


def fused_layer(
    cost: CostModel,
    model: ModelSpec,
    nodes: int,
    tp: int,
    tokens: float,
    k: float,
    imbalance: float = 1.0,
    a2a_scale: float = 1.0,
) -> FusedLayer:
    """Algorithms 1-2 of one MoE layer whose stage holds ``tokens`` tokens, priced by
    ``cost`` (TP = ``tp`` GPUs of one node, EP = ``nodes`` nodes)."""
    x = -(-tokens // nodes) * model.hidden_bytes  # the tokens one node (one TP group) holds
    chunk = x * k * imbalance * a2a_scale / (nodes * tp)
    coll = Collectives(cost, cost.cluster.nvlink_domain)
    return FusedLayer.priced(nodes=nodes, tp=tp, chunk_bytes=chunk, output_bytes=x, coll=coll)


def fused_comm(layer: FusedLayer) -> float:
    """Seconds of AG-Dispatch + RS-Combine of ``layer`` scheduled by the overlap mechanism,
    or of the same bytes sent sequentially (RS -> A2A -> AG) when that is cheaper — the
    strategy planner's choice per phase (:meth:`StrategyEvaluator.layer_comm`)."""
    inter = [layer.t_inter] * (layer.nodes - 1)
    dispatch = fused_rounds(inter, [layer.t_ag] * layer.nodes)
    combine = fused_rounds(inter, [layer.t_rs] * layer.nodes) + layer.t_ag_out
    ag, rs = layer.times()
    return min(dispatch + combine, ag.sequential + rs.sequential)
