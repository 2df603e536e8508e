"""EP engine: attention data-parallel, MoE expert-parallel (DESIGN.md "EP layer").

Every rank holds its own sequences (attention DP) and ``E/ep`` consecutive experts. Per layer:
local attention; route; permute rows by expert; all-to-all dispatch with split sizes; grouped
SwiGLU on the received rows; all-to-all combine; weighted scatter-add; shared experts locally.
This is the baseline layout the Sem-MoE and MixServe papers compare against. An expert
placement from the plan (:mod:`moeplan.runtime.layers.placement`) maps experts to physical
slots. :func:`ep_moe` is also the MoE block of the attention-TP engine (:mod:`.tp_ep`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moeplan.errors import require
from moeplan.runtime.comm.collectives import combine_back, dispatch
from moeplan.runtime.comm.groups import RankGroups
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines.base import Engine, RunContext, require_dp_batch
from moeplan.runtime.layers.decoder import Local, decoder_modules, forward
from moeplan.runtime.layers.model import LayerWeights, rms
from moeplan.runtime.layers.moe import experts_by_id, local_experts, route, shared_out
from moeplan.runtime.layers.permute import combine, gather_rows, permute
from moeplan.runtime.layers.placement import (
    Placement,
    physical_weights,
    placements,
    to_physical,
)
from moeplan.runtime.mesh import Mesh, StageModule
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


@dataclass(frozen=True, kw_only=True, slots=True)
class EPLayout:
    """Attention as on one device (data parallel); MoE through :func:`ep_moe`."""

    cfg: MoEConfig
    g: RankGroups
    tl: Timeline
    placement: list[Placement] | None

    def attn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        return Local(cfg=self.cfg).attn(x, w, m)

    def ffn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        pl = None if self.placement is None else self.placement[m.layer]
        return (flat + ep_moe(rms(flat), w, self.cfg, self.g, "moe_ep", self.tl, pl)).view_as(x)


@dataclass(frozen=True, kw_only=True)
class EPEngine(Engine):
    placement: list[Placement] | None = None

    def global_batch(self, seq: int, tokens: int) -> int:
        batch = tokens // seq
        require_dp_batch(batch, self.mesh.attn_dp)
        return batch

    def local_input(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        return x.tensor_split(self.mesh.world_size)[rank]

    def run(
        self, x: torch.Tensor | None, layers: list[LayerWeights], ctx: RunContext
    ) -> torch.Tensor:
        assert x is not None and ctx.groups is not None
        layout = EPLayout(cfg=self.cfg, g=ctx.groups, tl=ctx.tl, placement=self.placement)
        return forward(x, layers, layout, decoder_modules(layers), ctx.tl)


def build(mesh: Mesh, cfg: MoEConfig) -> EPEngine:
    """EP engine; the plan's placement (if any) replaces the divisibility rule for experts."""
    pl = placements(mesh.details, cfg.num_layers, cfg.num_experts, mesh.moe_ep)
    if pl is None:
        require(
            cfg.num_experts % mesh.moe_ep == 0,
            f"model.num_experts ({cfg.num_experts}) must be divisible by ep ({mesh.moe_ep})",
        )
    return EPEngine(mesh=mesh, cfg=cfg, placement=pl)
