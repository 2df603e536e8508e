"""MixServe communication model: Eqs. 1-3 and 5 with an alpha-beta cost per link level.

Paper: MixServe (``papers/003_955f11cbd404f896.txt``), §III-B2 (Table I, Eqs. 1-3) and
§III-B3/§III-B4 (DP/EP cases, Eq. 5). Every collective is priced as
``alpha + beta * bytes`` on the link it runs over; a link is the intra-node one or the
inter-node one (:class:`Link`, built from the cost model's ``link_transfer``).

Placement (the rank grid): inside a pipeline stage ranks are numbered node-major and the
TP group is innermost (contiguous ranks), so a TP group of degree ``t`` is intra-node when
``t <= gpus_per_node``; the DP (attention) and EP (MoE) groups are strided by the TP degree.

Departures from the paper, and why:
- Eq. 1 says RS/AG cost is proportional to ``size/degree`` (one full-duplex round over
  dedicated pair links). That holds on a full-mesh fabric (``Link.mesh``, e.g. HCCS, where
  the spec's bandwidth is read as per pair link): ``RS = AG = alpha + beta*size/d``, and the
  intra-node pairwise A2A rounds run at once. On a switched fabric (NVSwitch, PCIe, the
  network) bandwidth is *per GPU per direction* (DESIGN.md), so a GPU must push
  ``(d-1)/d * size`` bytes: ``RS = AG = alpha + beta*size*(d-1)/d``.
- Eq. 2 writes ``AR(size) = RS(size/d) + AG(size/d)``; with Eq. 1 that would scale as
  ``size/d**2``, contradicting Table I (``O(bsh/d)`` per round). We read the ``size/d`` as
  the per-peer message and price ``AR(size, d) = RS(size, d) + AG(size, d)``.
- Eq. 3 (pairwise A2A, ``d-1`` rounds of ``size/d``) is priced round by round: with the XOR
  pairwise pattern, a rank's partners on its own node take ``c-1`` rounds on the intra link
  and the other ``d-c`` rounds run on the inter link (``c`` = group members per node).
- Eq. 5's MoE all-reduce: when the MoE TP group spans several attention DP groups
  (``moe_tp > attn_tp``) it must hold the union of their tokens, so its AR buffer is
  ``moe_tp/attn_tp`` times the attention one (the paper leaves this case implicit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moeplan.errors import require


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """One link level: ``t(bytes) = alpha + beta * bytes`` (seconds, seconds per byte).

    ``mesh``: a fully connected fabric with a dedicated link per GPU pair (HCCS), where a
    rank's transfers to different peers run at once (paper §II-B, Table I "1 round").
    """

    alpha: float
    beta: float
    mesh: bool = False

    def __post_init__(self) -> None:
        require(self.alpha >= 0, f"link.alpha ({self.alpha}) must be >= 0")
        require(self.beta >= 0, f"link.beta ({self.beta}) must be >= 0")

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` in one message."""
        return self.alpha + self.beta * nbytes


@dataclass(frozen=True, kw_only=True, slots=True)
class Links:
    """The two link levels of a cluster plus its node width."""

    intra: Link
    inter: Link
    gpus_per_node: int

    def for_group(self, degree: int, stride: int) -> Link:
        """The bottleneck link of a group of ``degree`` ranks ``stride`` apart."""
        return self.inter if spans_nodes(degree, stride, self.gpus_per_node) else self.intra


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


def spans_nodes(degree: int, stride: int, gpus_per_node: int) -> bool:
    """Whether ``degree`` ranks ``stride`` apart (node-major numbering) cross a node."""
    return degree > 1 and (degree - 1) * stride >= gpus_per_node


def reduce_scatter(size: float, degree: int, link: Link) -> float:
    """Eq. 1: reduce-scatter of a ``size``-byte input over ``degree`` ranks."""
    if degree <= 1:
        return 0.0
    if link.mesh:
        return link.alpha + link.beta * size / degree
    return link.alpha + link.beta * size * (degree - 1) / degree


def all_gather(size: float, degree: int, link: Link) -> float:
    """Eq. 1: all-gather producing a ``size``-byte output on each of ``degree`` ranks."""
    return reduce_scatter(size, degree, link)


def all_reduce(size: float, degree: int, link: Link) -> float:
    """Eq. 2: all-reduce of a ``size``-byte buffer = RS + AG (see module note)."""
    return reduce_scatter(size, degree, link) + all_gather(size, degree, link)


def pairwise_rounds(degree: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(intra-node rounds, inter-node rounds) of XOR-pairwise A2A over a strided group."""
    per_node = max(1, gpus_per_node // stride) if stride <= gpus_per_node else 1
    per_node = min(per_node, degree)
    return per_node - 1, degree - per_node


def all_to_all(size: float, degree: int, stride: int, links: Links) -> float:
    """Eq. 3: pairwise A2A, ``degree-1`` rounds of ``size/degree`` bytes each.

    ``size`` is what one rank sends in total (its own share included, as in the paper).
    """
    if degree <= 1:
        return 0.0
    intra, inter = pairwise_rounds(degree, stride, links.gpus_per_node)
    piece = size / degree
    if links.intra.mesh:
        intra = min(intra, 1)
    return intra * links.intra.time(piece) + inter * links.inter.time(piece)


def layer_comm(
    *,
    token_bytes: float,
    top_k: float,
    batch: int,
    attn_tp: int,
    attn_dp: int,
    moe_tp: int,
    moe_ep: int,
    links: Links,
    is_moe: bool = True,
) -> LayerComm:
    """Eq. 5 for one layer: ``token_bytes`` = seq_len * hidden * dtype bytes of one request.

    Attention AR over ``attn_tp`` on ``ceil(b/dp)`` requests; MoE (when ``is_moe``): AR over
    ``moe_tp`` and dispatch + combine A2A in the DP/EP case of §III-B3.
    """
    x = math.ceil(batch / attn_dp) * token_bytes
    attn = all_reduce(x, attn_tp, links.for_group(attn_tp, 1))
    if not is_moe:
        mlp = all_reduce(x, attn_tp, links.for_group(attn_tp, 1))
        return LayerComm(attn_allreduce=attn, moe_allreduce=mlp, dispatch=0.0, combine=0.0)
    moe_x = x * max(1, moe_tp // attn_tp)
    moe = all_reduce(moe_x, moe_tp, links.for_group(moe_tp, 1))
    if attn_dp >= moe_ep:
        a2a = all_to_all(x * top_k, moe_ep, moe_tp, links)
    else:
        a2a = all_to_all(math.ceil(batch / moe_ep) * token_bytes * top_k, attn_dp, attn_tp, links)
    return LayerComm(attn_allreduce=attn, moe_allreduce=moe, dispatch=a2a, combine=a2a)


def p2p_boundaries(pp: int, num_nodes: int) -> tuple[int, int]:
    """(intra-node, inter-node) stage boundaries of ``pp`` stages laid over ``num_nodes``."""
    if pp <= 1:
        return 0, 0
    inter = min(pp, num_nodes) - 1
    return pp - 1 - inter, inter
