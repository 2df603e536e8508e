"""Hybrid TP-EP engine (MixServe §III-C/D): attention TP inside a node + DP across nodes, MoE
TP inside a node + EP across nodes, with the fused AG-Dispatch / RS-Combine collectives.

Per layer on TP rank ``t`` of node ``a``: attention on this rank's heads, all-reduce in TP;
route (replicated in the node); fused AG-Dispatch sends only hidden slice ``t`` of the rows to
the other nodes and all-gathers it in TP; experts run TP-sharded (intermediate dim), giving
partial sums; fused RS-Combine returns them and reduce-scatters in TP; top-k weighting on the
``H/m`` slice (Alg. 1 line 17); shared-expert partials are reduce-scattered the same way; one
TP all-gather restores full width. ``fused=False`` runs the unfused sequence (full-width
all-to-all dispatch/combine + TP all-reduce) for comparison. When ``attn.tp != moe.tp`` the
tokens are re-sharded between the two layouts around the MoE block (:func:`resharded_moe`).
Requires ``pp == 1``; strategy plans with ``pp > 1`` run on the pipeline engine
(:func:`moeplan.runtime.mesh.strategy_as_pipeline`). The layer loop is the shared one
(:func:`moeplan.runtime.layers.decoder.forward`) with :class:`HybridLayout` applied.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeplan.errors import require
from moeplan.runtime.comm.collectives import combine_back, dispatch, gather_sizes, gather_split
from moeplan.runtime.comm.fused import fused_ag_dispatch, fused_rs_combine
from moeplan.runtime.comm.groups import RankGroups
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines.base import Engine, RunContext, require_dp_batch
from moeplan.runtime.layers.decoder import decoder_modules, forward
from moeplan.runtime.layers.model import LayerWeights, attention, rms
from moeplan.runtime.layers.moe import (
    MoEWeights,
    experts_by_id,
    local_experts,
    route,
    shard_tp,
    shared_out,
)
from moeplan.runtime.layers.permute import combine, gather_rows, permute
from moeplan.runtime.mesh import Mesh, StageModule
from moeplan.runtime.timeline import Timeline


def check_hybrid(mesh: Mesh, cfg: MoEConfig) -> None:
    require(
        mesh.pp == 1,
        f"plan.layout.pp ({mesh.pp}) must be 1 for a strategy plan in the runtime "
        "(pipelined plans run through the pipeline family)",
    )
    require(
        cfg.num_heads % mesh.attn_tp == 0,
        f"model.num_heads ({cfg.num_heads}) must be divisible by attn.tp ({mesh.attn_tp})",
    )
    require(
        cfg.num_experts % mesh.moe_ep == 0,
        f"model.num_experts ({cfg.num_experts}) must be divisible by moe.ep ({mesh.moe_ep})",
    )
    require(
        cfg.hidden_size % mesh.moe_tp == 0 and cfg.moe_intermediate_size % mesh.moe_tp == 0,
        f"model widths (hidden {cfg.hidden_size}, moe_intermediate {cfg.moe_intermediate_size}) "
        f"must be divisible by moe.tp ({mesh.moe_tp})",
    )


def _local_moe(w: MoEWeights, g: RankGroups, num_experts: int) -> MoEWeights:
    n, e = g.size("moe_ep"), g.local_rank("moe_ep")
    per = num_experts // n
    return shard_tp(
        local_experts(w, e * per, (e + 1) * per), g.size("moe_tp"), g.local_rank("moe_tp")
    )


def hybrid_moe(
    x: torch.Tensor, w: MoEWeights, cfg: MoEConfig, g: RankGroups, tl: Timeline, fused: bool = True
) -> torch.Tensor:
    """MoE block: ``x [T, H]`` replicated in the TP group -> ``[T, H]`` replicated."""
    m, t = g.size("moe_tp"), g.local_rank("moe_tp")
    tp = g.handles["moe_tp"]
    lw = _local_moe(w, g, cfg.num_experts)
    with tl.span("route"):
        r = route(x, w, cfg)
        perm = permute(r.ids, r.weights, cfg.num_experts)
        rows = gather_rows(x, perm)
    with tl.span("dispatch", "comm"):
        if fused:
            d = fused_ag_dispatch(rows.chunk(m, dim=1)[t], perm.counts, g)
        else:
            d = dispatch(rows, perm.counts, g.handles["moe_ep"], g.size("moe_ep"))
    with tl.span("experts"):
        partial = experts_by_id(d.rows, d.local_expert, lw)
        shared = shared_out(x, lw)
    with tl.span("combine", "comm"):
        if not fused:
            y = combine(combine_back(partial, d, g.handles["moe_ep"]), perm) + shared
            dist.all_reduce(y, group=tp)
            return y
        y_slice = combine(torch.cat(fused_rs_combine(partial, d, g)), perm)
        s_slice = torch.empty_like(y_slice)
        dist.reduce_scatter(s_slice, [c.contiguous() for c in shared.chunk(m, dim=1)], group=tp)
        parts = [torch.empty_like(y_slice) for _ in range(m)]
        dist.all_gather(parts, y_slice + s_slice, group=tp)
        return torch.cat(parts, dim=1)


def resharded_moe(
    flat: torch.Tensor, w: MoEWeights, cfg: MoEConfig, g: RankGroups, tl: Timeline, fused: bool
) -> torch.Tensor:
    """MoE when ``attn.tp != moe.tp``: ``flat [T, H]`` is replicated in the attention TP group.
    Each attention-TP rank owns one share of the tokens; a MoE TP group works on the union of
    its members' shares (all-gather), so every token is computed once; the owners' rows are then
    all-gathered back to the attention layout (the re-sharding MixServe/SMIDT charge)."""
    shares = list(flat.tensor_split(g.size("attn_tp")))
    mine = shares[g.local_rank("attn_tp")]
    sizes = gather_sizes(mine.shape[0], g.handles["moe_tp"], g.size("moe_tp"), flat.device)
    with tl.span("reshard_in", "comm"):
        tokens = gather_split(mine, sizes, g.handles["moe_tp"])
    y = hybrid_moe(tokens, w, cfg, g, tl, fused)
    start = sum(sizes[: g.local_rank("moe_tp")])
    with tl.span("reshard_out", "comm"):
        return gather_split(
            y[start : start + mine.shape[0]], [len(p) for p in shares], g.handles["attn_tp"]
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class HybridLayout:
    """Attention TP (all-reduce of the heads' partial sums); MoE TP-EP, re-sharded when
    ``attn.tp != moe.tp``."""

    cfg: MoEConfig
    g: RankGroups
    tl: Timeline
    fused: bool

    def attn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        g = self.g
        a = attention(rms(x), w.attn, self.cfg, tp=g.size("attn_tp"), rank=g.local_rank("attn_tp"))
        with self.tl.span("attn_allreduce", "comm"):
            dist.all_reduce(a, group=g.handles["attn_tp"])
        return x + a

    def ffn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        moe = hybrid_moe if self.g.size("attn_tp") == self.g.size("moe_tp") else resharded_moe
        return (flat + moe(rms(flat), w.experts, self.cfg, self.g, self.tl, self.fused)).view_as(x)


@dataclass(frozen=True, kw_only=True)
class HybridEngine(Engine):
    """This node's sequences ``[B, S, H]``, replicated in the attention TP group."""

    def global_batch(self, seq: int, tokens: int) -> int:
        batch = tokens // seq
        require_dp_batch(batch, self.mesh.attn_dp)
        return batch

    def local_input(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        return x.tensor_split(self.mesh.attn_dp)[self.mesh.coords(rank)["attn_dp"]]

    def run(
        self, x: torch.Tensor | None, layers: list[LayerWeights], ctx: RunContext
    ) -> torch.Tensor:
        assert x is not None and ctx.groups is not None
        fused = ctx.opts.fused
        if fused is None:
            fused = bool(self.mesh.details.get("fused", True))
        layout = HybridLayout(cfg=self.cfg, g=ctx.groups, tl=ctx.tl, fused=fused)
        return forward(x, layers, layout, decoder_modules(layers), ctx.tl)


def build(mesh: Mesh, cfg: MoEConfig) -> HybridEngine:
    check_hybrid(mesh, cfg)
    return HybridEngine(mesh=mesh, cfg=cfg)
