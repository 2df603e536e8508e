"""Attention-TP + MoE-EP engine with Sem-MoE's shuffled reduce-scatter / all-gather.

Layout: ``attn.tp == moe.ep == W`` (one group). After attention every rank holds a TP partial
sum of all tokens. Instead of all-reduce + slice, a *token plan* (one destination rank per
token) drives :func:`~moeplan.runtime.collectives.shuffled_reduce_scatter`: each rank receives
the reduced hidden states of the tokens sent to it, routes them, dispatches rows to the experts'
ranks (all-to-all), combines, and :func:`~moeplan.runtime.collectives.shuffled_all_gather`
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

import torch

from moeplan.errors import require
from moeplan.runtime.collectives import shuffled_all_gather, shuffled_reduce_scatter, token_plan
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines.ep import ep_moe
from moeplan.runtime.groups import RankGroups
from moeplan.runtime.model import LayerWeights, attention, rms
from moeplan.runtime.moe_layer import route
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


def run_tp_ep(
    x: torch.Tensor,
    layers: list[LayerWeights],
    cfg: MoEConfig,
    g: RankGroups,
    tl: Timeline,
    plan_kind: str = "predicted",
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Forward replicated ``x [B, S, H]``; returns the output and per layer (local, all) rows."""
    require(
        plan_kind in TOKEN_PLANS,
        f"plan.details.token_plan ({plan_kind!r}) must be one of {', '.join(TOKEN_PLANS)}",
    )
    n, r = g.size("attn_tp"), g.local_rank("attn_tp")
    group = g.handles["attn_tp"]
    lar = []
    for i, w in enumerate(layers):
        flat_x = x.reshape(-1, x.shape[-1])
        dest = token_dest(plan_kind, flat_x, w, cfg, n)
        plan = token_plan(dest, n)
        with tl.span(f"attn{i}"):
            a = attention(rms(x), w.attn, cfg, tp=n, rank=r).reshape(-1, x.shape[-1])
        mine_idx = plan.order[r * plan.cap : r * plan.cap + int(plan.counts[r])]
        with tl.span("shuffled_reduce_scatter", "comm"):
            h = flat_x[mine_idx] + shuffled_reduce_scatter(a, plan, group, r)
        u = rms(h)
        lar.append(local_rows(dest[mine_idx], u, w, cfg, n))
        y = h + ep_moe(u, w, cfg, g, "moe_ep", tl)
        with tl.span("shuffled_all_gather", "comm"):
            x = shuffled_all_gather(y, plan, group).view_as(x)
    return x, lar
