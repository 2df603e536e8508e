"""MoE layer: router, SwiGLU routed experts computed per expert group, shared experts.

Grouped computation (no loop over tokens): rows sorted by expert (:mod:`.permute`) go through
:func:`moeplan.runtime.kernels.grouped_swiglu` — packed into a padded ``[E, C, H]`` buffer and
multiplied with one ``torch.bmm`` per projection (``method="bmm"``; on CUDA bf16 the ragged
``torch._grouped_mm``), or segment by segment (``method="segment"``, one ``mm`` per non-empty
expert — cheaper when load is very skewed). Expert weights ``w_gate, w_up [E, H, I]``,
``w_down [E, I, H]``; tensor parallelism shards ``I`` (:func:`shard_tp`), so each TP rank's
output is a partial sum. Shared experts are one SwiGLU MLP of width
``num_shared_experts * moe_intermediate_size`` (DeepSeek). Departures: Qwen2-MoE's sigmoid
``shared_expert_gate`` is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from moeplan.runtime.config import MoEConfig
from moeplan.runtime.kernels import grouped_moe, grouped_swiglu, swiglu
from moeplan.runtime.layers.permute import Permutation, combine, gather_rows, permute
from moeplan.runtime.layers.routing import Routing, grouped_topk, softmax_topk, topp_routing

__all__ = [
    "MoEWeights",
    "expert_rows",
    "experts_by_id",
    "grouped_swiglu",
    "init_moe_weights",
    "local_experts",
    "moe_forward",
    "route",
    "shard_tp",
    "shared_out",
    "swiglu",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class MoEWeights:
    """One MoE layer. ``gate [H, E]``; experts ``[E, H, I]``/``[E, I, H]``; shared optional."""

    gate: torch.Tensor
    bias: torch.Tensor | None
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor
    shared_gate: torch.Tensor | None = None
    shared_up: torch.Tensor | None = None
    shared_down: torch.Tensor | None = None


def init_moe_weights(cfg: MoEConfig, gen: torch.Generator) -> MoEWeights:
    """Random weights (std 1/sqrt(fan_in)) drawn from ``gen``."""
    h, i, e, s = (
        cfg.hidden_size,
        cfg.moe_intermediate_size,
        cfg.num_experts,
        cfg.shared_intermediate_size,
    )

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) / shape[-2] ** 0.5

    bias = torch.randn(e, generator=gen) * 0.1 if cfg.scoring == "sigmoid" else None
    shared = (rand(h, s), rand(h, s), rand(s, h)) if s > 0 else (None, None, None)
    return MoEWeights(
        gate=rand(h, e),
        bias=bias,
        w_gate=rand(e, h, i),
        w_up=rand(e, h, i),
        w_down=rand(e, i, h),
        shared_gate=shared[0],
        shared_up=shared[1],
        shared_down=shared[2],
    )


def route(x: torch.Tensor, w: MoEWeights, cfg: MoEConfig) -> Routing:
    """Router for tokens ``x [T, H]`` with the configured scheme."""
    logits = x @ w.gate
    if cfg.top_p is not None:
        return topp_routing(
            logits, cfg.top_p, k_min=cfg.k_min, k_max=cfg.top_k, renormalize=cfg.norm_topk_prob
        )
    if cfg.n_group > 1 or cfg.scoring == "sigmoid":
        return grouped_topk(
            logits,
            cfg.top_k,
            n_group=cfg.n_group,
            topk_group=cfg.topk_group,
            scoring=cfg.scoring,
            bias=w.bias,
            renormalize=cfg.norm_topk_prob,
            scaling=cfg.routed_scaling_factor,
        )
    return softmax_topk(logits, cfg.top_k, renormalize=cfg.norm_topk_prob)


def expert_rows(
    x: torch.Tensor, perm: Permutation, w: MoEWeights, method: str = "bmm"
) -> torch.Tensor:
    """Routed-expert outputs for the permuted rows of ``x [T, H]`` (unweighted), ``[N, H]``."""
    return grouped_swiglu(
        gather_rows(x, perm), perm.counts, w.w_gate, w.w_up, w.w_down, method=method
    )


def shared_out(x: torch.Tensor, w: MoEWeights) -> torch.Tensor:
    """Shared-expert output ``[T, H]`` (zeros when the model has none)."""
    if w.shared_gate is None or w.shared_up is None or w.shared_down is None:
        return torch.zeros_like(x)
    return swiglu(x, w.shared_gate, w.shared_up, w.shared_down)


def moe_forward(
    x: torch.Tensor, w: MoEWeights, cfg: MoEConfig, *, method: str = "bmm", expert_offset: int = 0
) -> torch.Tensor:
    """Reference MoE layer ``x [T, H]`` -> ``[T, H]`` (no residual). If ``w`` holds only experts
    ``expert_offset..`` (an EP shard), rows routed elsewhere are dropped (partial output)."""
    r = route(x, w, cfg)
    n_local = w.w_gate.shape[0]
    ids = r.ids - expert_offset
    ids = torch.where((r.ids >= 0) & (ids >= 0) & (ids < n_local), ids, torch.full_like(ids, -1))
    if x.is_cuda and method == "bmm":  # the sync-free fused path (kernels.grouped_moe)
        return grouped_moe(x, ids, r.weights, w.w_gate, w.w_up, w.w_down) + shared_out(x, w)
    perm = permute(ids, r.weights, n_local)
    return combine(expert_rows(x, perm, w, method), perm) + shared_out(x, w)


def shard_tp(w: MoEWeights, tp: int, rank: int) -> MoEWeights:
    """Slice the intermediate dim of routed and shared experts for TP rank ``rank`` of ``tp``."""

    def cols(t: torch.Tensor) -> torch.Tensor:
        return t.chunk(tp, dim=-1)[rank].contiguous()

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t.chunk(tp, dim=-2)[rank].contiguous()

    def maybe(fn: Callable[[torch.Tensor], torch.Tensor], t: torch.Tensor | None) -> Any:
        return None if t is None else fn(t)

    return replace(
        w,
        w_gate=cols(w.w_gate),
        w_up=cols(w.w_up),
        w_down=rows(w.w_down),
        shared_gate=maybe(cols, w.shared_gate),
        shared_up=maybe(cols, w.shared_up),
        shared_down=maybe(rows, w.shared_down),
    )


def local_experts(w: MoEWeights, start: int, stop: int) -> MoEWeights:
    """Keep routed experts ``start..stop-1`` (EP shard); router and shared experts are kept."""
    return replace(
        w, w_gate=w.w_gate[start:stop], w_up=w.w_up[start:stop], w_down=w.w_down[start:stop]
    )


def experts_by_id(
    rows: torch.Tensor, expert: torch.Tensor, w: MoEWeights, method: str = "bmm"
) -> torch.Tensor:
    """Expert outputs for rows in any order (``expert [M]`` local ids); output in input order."""
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=w.w_gate.shape[0])
    out = rows.new_empty(rows.shape[0], w.w_down.shape[2])
    out[order] = grouped_swiglu(rows[order], counts, w.w_gate, w.w_up, w.w_down, method=method)
    return out
