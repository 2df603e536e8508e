"""MixServe communication (Eqs. 1-3, 5): which collective runs over which group on which bytes.

Paper: MixServe (``papers/003_955f11cbd404f896.txt``), §III-B2 (Table I, Eqs. 1-3) and
§III-B3/§III-B4 (DP/EP cases, Eq. 5). This module keeps the paper's *structure* — per layer
an attention all-reduce over ``attn_tp``, a MoE all-reduce over ``moe_tp`` and a dispatch and a
combine all-to-all over the EP (or DP) group — and takes every collective's *time* from the
cost model's public collective API (:meth:`moeplan.cost.CostModel.collective`, ``p2p``), the
same calls the serving iteration model (:mod:`moeplan.serve.iteration.model`) and the other planners
make (DESIGN.md "one cost path"). With an engine those calls use the kernel database (custom
all-reduce, DeepEP); without one, the two-level α-β collectives of
:mod:`moeplan.cost.collectives`. :class:`Collectives` memoises them per (op, bytes, degree,
stride): they are pure.

Placement (the rank grid): inside a pipeline stage ranks are numbered node-major and the
TP group is innermost (contiguous ranks); the DP (attention) and EP (MoE) groups are strided
by the TP degree. A group's node count (:func:`group_nodes`) is counted from rank 0.

Departures from the paper, and why:
- Eqs. 1 and 3 (RS/AG ``~size/d``, pairwise A2A in ``d-1`` rounds) are no longer priced
  here: the cost model prices each whole collective (full mesh or switched fabric, and
  hierarchically when the group spans nodes; :mod:`moeplan.cost.collectives`). Earlier
  versions kept private α-β formulas with link α/β finite-differenced from ``link_transfer``.
- Eq. 2 (AR = RS + AG) is not priced as two calls: a TP block's all-reduce is the cost
  model's ``collective("all_reduce", ...)``, as the serving iteration model charges it, so
  the two families price the same TP layout identically. Without an engine that call *is*
  Eq. 2 (the α-β all_reduce equals its reduce_scatter plus all_gather, across nodes too);
  with one, inside a node it is the engine's custom all-reduce (SGLang's and vLLM's TP
  all-reduce: their one-/two-shot kernel for small messages, NCCL for large; the measured
  table runs 0.3-0.9x of RS + AG). The fused Algs. 1-2 keep their RS / AG steps.
- Eq. 5's MoE all-reduce: when the MoE TP group spans several attention DP groups
  (``moe_tp > attn_tp``) it must hold the union of their tokens, so its AR buffer is
  ``moe_tp/attn_tp`` times the attention one (the paper leaves this case implicit).
- Expert-load imbalance (max/mean over EP ranks) scales the dispatch/combine *bytes* of the
  busiest receiver, as :mod:`moeplan.serve.iteration.model` does (not the time afterwards).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Protocol

from moeplan.errors import require


class CollectiveCost(Protocol):
    """The cost model's communication API (:class:`moeplan.cost.CostModel`)."""

    def collective(self, op: str, nbytes: float, group_size: int, nodes: int = 1) -> float: ...
    def p2p(self, nbytes: float, inter_node: bool) -> float: ...


def group_nodes(degree: int, stride: int, gpus_per_node: int) -> int:
    """Nodes spanned by ranks ``0, stride, ..., (degree-1)*stride`` (node-major numbering)."""
    require(
        degree >= 1 and stride >= 1 and gpus_per_node >= 1,
        f"group (degree {degree}, stride {stride}, gpus_per_node {gpus_per_node}) must be positive",
    )
    if stride >= gpus_per_node:
        return degree
    return (degree - 1) * stride // gpus_per_node + 1


def spans_nodes(degree: int, stride: int, gpus_per_node: int) -> bool:
    """Whether ``degree`` ranks ``stride`` apart (node-major numbering) cross a node."""
    return group_nodes(degree, stride, gpus_per_node) > 1


#: cost model -> GPUs per NVLink domain -> memoised seconds (weak: dropped with the cost model)
_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Collectives:
    """Memoised collective and P2P seconds from one cost model (see module docstring)."""

    __slots__ = ("cm", "domain_gpus", "_memo")

    def __init__(self, cost_model: CollectiveCost, domain_gpus: int) -> None:
        """``domain_gpus``: GPUs of one NVLink domain (the node, or an NVL72 rack): a group
        spanning more of them crosses the network."""
        self.cm, self.domain_gpus = cost_model, domain_gpus
        try:  # shared by every evaluator on this cost model (analyze, --all-sizes, the CLI)
            memo = _MEMO.setdefault(cost_model, {})
        except TypeError:  # a cost model that takes no weak reference keeps its own
            memo = {}
        self._memo: dict[tuple, float] = memo.setdefault(domain_gpus, {})

    def time(self, op: str, nbytes: float, degree: int, stride: int = 1) -> float:
        """``op`` over ``degree`` ranks ``stride`` apart, ``nbytes`` in nccl-tests convention
        (AR: the buffer; AG: the output; RS: the input; A2A: what one rank sends in total)."""
        if degree <= 1 or nbytes <= 0:
            return 0.0
        key = (op, nbytes, degree, stride)
        v = self._memo.get(key)
        if v is None:
            nodes = group_nodes(degree, stride, self.domain_gpus)
            v = self._memo[key] = float(self.cm.collective(op, nbytes, degree, nodes))
        return v

    def all_reduce(self, nbytes: float, degree: int, stride: int = 1) -> float:
        """A TP block's all-reduce of the ``nbytes`` buffer: the cost model's ``all_reduce``
        (Eq. 2 without an engine, the engine's custom all-reduce with one; module docstring)."""
        return self.time("all_reduce", nbytes, degree, stride)

    def all_gather(self, nbytes: float, degree: int, stride: int = 1) -> float:
        return self.time("all_gather", nbytes, degree, stride)

    def reduce_scatter(self, nbytes: float, degree: int, stride: int = 1) -> float:
        return self.time("reduce_scatter", nbytes, degree, stride)

    def all_to_all(self, nbytes: float, degree: int, stride: int = 1) -> float:
        return self.time("all_to_all", nbytes, degree, stride)

    def p2p(self, nbytes: float, inter_node: bool) -> float:
        """One point-to-point message (a pipeline send, a fused algorithm's inter round)."""
        if nbytes <= 0:
            return 0.0
        key = ("p2p", nbytes, inter_node)
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = float(self.cm.p2p(nbytes, inter_node))
        return v


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerComm:
    """Communication seconds of one decoder layer on one rank (Eq. 5 terms)."""

    attn_allreduce: float
    moe_allreduce: float
    dispatch: float
    combine: float

    @property
    def total(self) -> float:
        return self.attn_allreduce + self.moe_allreduce + self.dispatch + self.combine


def layer_comm(
    *,
    token_bytes: float,
    top_k: float,
    batch: int,
    attn_tp: int,
    attn_dp: int,
    moe_tp: int,
    moe_ep: int,
    coll: Collectives,
    imbalance: float = 1.0,
    is_moe: bool = True,
) -> LayerComm:
    """Eq. 5 for one layer: ``token_bytes`` = seq_len * hidden * dtype bytes of one request.

    Attention AR over ``attn_tp`` on ``ceil(b/dp)`` requests; MoE (when ``is_moe``): AR over
    ``moe_tp`` and dispatch + combine A2A in the DP/EP case of §III-B3, the bytes scaled by
    ``imbalance`` (the busiest EP rank).
    """
    x = math.ceil(batch / attn_dp) * token_bytes
    attn = coll.all_reduce(x, attn_tp)
    if not is_moe:
        return LayerComm(attn_allreduce=attn, moe_allreduce=attn, dispatch=0.0, combine=0.0)
    moe = coll.all_reduce(x * max(1, moe_tp // attn_tp), moe_tp)
    if attn_dp >= moe_ep:
        a2a = coll.all_to_all(x * top_k * imbalance, moe_ep, moe_tp)
    else:
        per_dp = math.ceil(batch / moe_ep) * token_bytes * top_k * imbalance
        a2a = coll.all_to_all(per_dp, attn_dp, attn_tp)
    return LayerComm(attn_allreduce=attn, moe_allreduce=moe, dispatch=a2a, combine=a2a)


def p2p_boundaries(pp: int, num_nodes: int) -> tuple[int, int]:
    """(NVLink, network) stage boundaries of ``pp`` stages laid over ``num_nodes`` NVLink
    domains (nodes, or racks on NVL72)."""
    if pp <= 1:
        return 0, 0
    inter = min(pp, num_nodes) - 1
    return pp - 1 - inter, inter
