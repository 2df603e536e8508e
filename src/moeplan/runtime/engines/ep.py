"""EP engine: attention data-parallel, MoE expert-parallel (DESIGN.md "EP layer").

Every rank holds its own sequences (attention DP) and ``E/ep`` consecutive experts. Per layer:
local attention; route; permute rows by expert; all-to-all dispatch with split sizes; grouped
SwiGLU on the received rows; all-to-all combine; weighted scatter-add; shared experts locally.
This is the baseline layout the Sem-MoE and MixServe papers compare against. An expert
placement from the plan (:mod:`moeplan.runtime.placement`) maps experts to physical slots.
"""

from __future__ import annotations

import torch

from moeplan.runtime.collectives import combine_back, dispatch
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.groups import RankGroups
from moeplan.runtime.model import LayerWeights, attention, rms
from moeplan.runtime.moe_layer import experts_by_id, local_experts, route, shared_out
from moeplan.runtime.permute import combine, gather_rows, permute
from moeplan.runtime.placement import Placement, physical_weights, to_physical
from moeplan.runtime.timeline import Timeline


def ep_moe(
    x: torch.Tensor,
    w: LayerWeights,
    cfg: MoEConfig,
    g: RankGroups,
    axis: str,
    tl: Timeline,
    placement: Placement | None = None,
) -> torch.Tensor:
    """MoE block over the EP group ``axis``: ``x [T, H]`` (already normalised) -> ``[T, H]``.
    With a ``placement``, rows go to physical slots (``P/ep`` per rank) instead of experts."""
    n, e = g.size(axis), g.local_rank(axis)
    slots = cfg.num_experts if placement is None else placement.num_slots
    experts = w.experts if placement is None else physical_weights(w.experts, placement)
    per = slots // n
    with tl.span("route"):
        r = route(x, w.experts, cfg)
        ids = r.ids if placement is None else to_physical(r.ids, placement)
        perm = permute(ids, r.weights, slots)
        rows = gather_rows(x, perm)
    with tl.span("dispatch", "comm"):
        d = dispatch(rows, perm.counts, g.handles[axis], n)
    with tl.span("experts"):
        y = experts_by_id(d.rows, d.local_expert, local_experts(experts, e * per, (e + 1) * per))
    with tl.span("combine", "comm"):
        back = combine_back(y, d, g.handles[axis])
    with tl.span("shared"):
        return combine(back, perm) + shared_out(x, w.experts)


def run_ep(
    x: torch.Tensor,
    layers: list[LayerWeights],
    cfg: MoEConfig,
    g: RankGroups,
    tl: Timeline,
    placement: list[Placement] | None = None,
) -> torch.Tensor:
    """Forward this rank's sequences ``x [B, S, H]`` through all layers."""
    for i, w in enumerate(layers):
        with tl.span(f"attn{i}"):
            h = x + attention(rms(x), w.attn, cfg)
        flat = h.reshape(-1, h.shape[-1])
        pl = None if placement is None else placement[i]
        x = (flat + ep_moe(rms(flat), w, cfg, g, "moe_ep", tl, pl)).view_as(x)
    return x
