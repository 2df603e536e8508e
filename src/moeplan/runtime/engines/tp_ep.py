"""Attention-TP + MoE-EP engine with Sem-MoE's shuffled reduce-scatter / all-gather.

Layout: ``attn.tp == moe.ep == W`` (one group). After attention every rank holds a TP partial
sum of all tokens. Instead of all-reduce + slice, a *token plan* (one destination rank per
token) drives :func:`~moeplan.runtime.comm.shuffle.shuffled_reduce_scatter`: each rank receives
the reduced hidden states of the tokens sent to it, routes them, dispatches rows to the experts'
ranks (all-to-all), combines, and :func:`~moeplan.runtime.comm.shuffle.shuffled_all_gather`
restores the replicated, original-order activations for the next attention (Sem-MoE §4.3,
Alg. 3). The token plan only changes where tokens go, never the result, so any predictor is
correct; a good one keeps rows local (LAR, Sem-MoE's local activation rate).

Token plans (``details.token_plan``): ``contiguous`` (equal token slices: the usual AR+slice
baseline, and the default), ``round_robin``, ``predicted``. Departure: Sem-MoE predicts a
token's device from token-id and Markov tables built offline; here ``predicted`` routes the residual stream *before*
attention (available on every rank without communication) and sends the token to the rank of
its predicted top-1 expert — a stand-in for the tables, which need real traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from moeplan.errors import require
from moeplan.runtime.comm.groups import RankGroups
from moeplan.runtime.comm.shuffle import (
    ShufflePlan,
    shuffle_plan,
    shuffled_all_gather,
    shuffled_reduce_scatter,
)
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines.base import Engine, RunContext
from moeplan.runtime.engines.ep import ep_moe
from moeplan.runtime.layers.decoder import decoder_modules, forward
from moeplan.runtime.layers.model import LayerWeights, attention, rms
from moeplan.runtime.layers.moe import route
from moeplan.runtime.mesh import Mesh, StageModule
from moeplan.runtime.timeline import Timeline

TOKEN_PLANS = ("contiguous", "round_robin", "predicted")


def token_dest(kind: str, x: torch.Tensor, w: LayerWeights, cfg: MoEConfig, n: int) -> torch.Tensor:
    """Destination rank of each token of ``x [T, H]`` (same on every rank: ``x`` is replicated)."""
    t = x.shape[0]
    if kind == "contiguous":
        return torch.arange(t, device=x.device) * n // max(t, 1)
    if kind == "round_robin":
        return torch.arange(t, device=x.device) % n
    top1 = route(rms(x), w.experts, cfg).ids[:, 0].clamp_min(0)
    return top1 // (cfg.num_experts // n)


def local_rows(
    dest: torch.Tensor, x: torch.Tensor, w: LayerWeights, cfg: MoEConfig, n: int
) -> tuple[int, int]:
    """(rows whose expert lives on the token's rank, all rows): LAR's numerator, denominator."""
    ids = route(x, w.experts, cfg).ids
    valid = ids >= 0
    home = (ids // (cfg.num_experts // n)) == dest[:, None]
    return int((home & valid).sum()), int(valid.sum())


@dataclass(kw_only=True, slots=True)
class TpEpLayout:
    """Attention TP whose partial sums are reduce-scattered to each token's planned rank;
    the MoE runs on those rows (EP) and a shuffled all-gather restores the replicated batch.
    Stateful within a layer: ``attn`` keeps the token plan and the shape for ``ffn``."""

    cfg: MoEConfig
    g: RankGroups
    tl: Timeline
    kind: str
    lar: list[tuple[int, int]] = field(default_factory=list)
    plan: ShufflePlan | None = None
    dest: torch.Tensor | None = None
    shape: tuple[int, ...] = ()

    def attn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        n, r = self.g.size("attn_tp"), self.g.local_rank("attn_tp")
        flat_x = x.reshape(-1, x.shape[-1])
        self.dest = token_dest(self.kind, flat_x, w, self.cfg, n)
        self.plan, self.shape = shuffle_plan(self.dest, n), tuple(x.shape)
        a = attention(rms(x), w.attn, self.cfg, tp=n, rank=r).reshape(-1, x.shape[-1])
        mine = self.plan.order[r * self.plan.cap : r * self.plan.cap + int(self.plan.counts[r])]
        self.dest = self.dest[mine]
        with self.tl.span("shuffled_reduce_scatter", "comm"):
            rs = shuffled_reduce_scatter(a, self.plan, self.g.handles["attn_tp"], r)
        return flat_x[mine] + rs

    def ffn(self, h: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        assert self.plan is not None and self.dest is not None, "attn runs before ffn"
        u = rms(h)
        self.lar.append(local_rows(self.dest, u, w, self.cfg, self.g.size("attn_tp")))
        y = h + ep_moe(u, w, self.cfg, self.g, "moe_ep", self.tl)
        with self.tl.span("shuffled_all_gather", "comm"):
            return shuffled_all_gather(y, self.plan, self.g.handles["attn_tp"]).view(self.shape)


@dataclass(frozen=True, kw_only=True)
class TpEpEngine(Engine):
    """Replicated ``x [B, S, H]`` on every rank; reports per layer (local, all) rows."""

    def local_input(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        return x

    def run(
        self, x: torch.Tensor | None, layers: list[LayerWeights], ctx: RunContext
    ) -> torch.Tensor:
        assert x is not None and ctx.groups is not None
        kind = self.mesh.details.get("token_plan", "contiguous")
        layout = TpEpLayout(cfg=self.cfg, g=ctx.groups, tl=ctx.tl, kind=kind)
        out = forward(x, layers, layout, decoder_modules(layers), ctx.tl)
        ctx.extra["local_rows"] = layout.lar
        return out


def is_tp_ep(mesh: Mesh) -> bool:
    """Attention TP and MoE EP over the same ranks (Sem-MoE's attention-TP case)."""
    r = mesh.stage_size
    return mesh.pp == 1 and r > 1 and mesh.attn_tp == r and mesh.moe_ep == r


def build(mesh: Mesh, cfg: MoEConfig) -> TpEpEngine:
    kind = mesh.details.get("token_plan", "contiguous")
    require(
        kind in TOKEN_PLANS,
        f"plan.details.token_plan ({kind!r}) must be one of {', '.join(TOKEN_PLANS)}",
    )
    require(
        cfg.num_heads % mesh.attn_tp == 0 and cfg.num_experts % mesh.moe_ep == 0,
        f"model (num_heads {cfg.num_heads}, num_experts {cfg.num_experts}) must be "
        f"divisible by attn.tp = moe.ep ({mesh.attn_tp})",
    )
    return TpEpEngine(mesh=mesh, cfg=cfg)
