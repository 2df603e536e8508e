"""Weights of a small MoE decoder (attention + MoE or dense MLP per layer) and its attention.

Each layer: ``h = x + attn(rms(x))``; ``y = h + moe(rms(h))`` (the loop is
:mod:`moeplan.runtime.layers.decoder`). Attention is causal multi-head attention without
positional encoding (the runtime measures parallel layouts, not language quality); TP shards
heads, so a TP rank's attention output is a partial sum. Weights are drawn from a seeded
generator, so every rank rebuilds the same model without communication, or are loaded from
safetensors files (:mod:`moeplan.runtime.layers.weights`, no pickle).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from moeplan.runtime.config import MoEConfig
from moeplan.runtime.layers.moe import MoEWeights, init_moe_weights


@dataclass(frozen=True, kw_only=True, slots=True)
class AttnWeights:
    """``wq, wk, wv [H, H]`` (columns grouped by head), ``wo [H, H]`` (rows grouped by head)."""

    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor


@dataclass(frozen=True, kw_only=True, slots=True)
class DenseWeights:
    """Dense SwiGLU MLP: ``w_gate, w_up [H, I]``, ``w_down [I, H]``."""

    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerWeights:
    """One decoder layer: attention and either an MoE block or a dense MLP (``mlp``)."""

    attn: AttnWeights
    moe: MoEWeights | None
    mlp: DenseWeights | None = None

    @property
    def experts(self) -> MoEWeights:
        """The MoE block (internal invariant: only called on MoE layers)."""
        assert self.moe is not None, "dense layer has no MoE block"
        return self.moe


def init_model(cfg: MoEConfig, seed: int = 0) -> list[LayerWeights]:
    """Deterministic random weights for ``cfg.num_layers`` layers."""
    gen = torch.Generator().manual_seed(seed)
    h = cfg.hidden_size
    layers: list[LayerWeights] = []
    for _ in range(cfg.num_layers):
        a = [torch.randn(h, h, generator=gen) / h**0.5 for _ in range(4)]
        attn = AttnWeights(wq=a[0], wk=a[1], wv=a[2], wo=a[3])
        if len(layers) in cfg.dense_layers:
            i = cfg.dense_intermediate_size
            mlp = DenseWeights(
                w_gate=torch.randn(h, i, generator=gen) / h**0.5,
                w_up=torch.randn(h, i, generator=gen) / h**0.5,
                w_down=torch.randn(i, h, generator=gen) / i**0.5,
            )
            layers.append(LayerWeights(attn=attn, moe=None, mlp=mlp))
        else:
            layers.append(LayerWeights(attn=attn, moe=init_moe_weights(cfg, gen)))
    return layers


def rms(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def attention(
    x: torch.Tensor, w: AttnWeights, cfg: MoEConfig, tp: int = 1, rank: int = 0
) -> torch.Tensor:
    """Causal MHA on ``x [B, S, H]`` using heads of TP rank ``rank``; returns a partial sum."""
    b, s, h = x.shape
    heads = cfg.num_heads // tp
    d = h // cfg.num_heads
    cols = slice(rank * heads * d, (rank + 1) * heads * d)
    q, k, v = ((x @ m[:, cols]).view(b, s, heads, d).transpose(1, 2) for m in (w.wq, w.wk, w.wv))
    # fused causal attention (FlashAttention on CUDA); the S x S score matrix is never built
    ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return ctx.transpose(1, 2).reshape(b, s, heads * d) @ w.wo[cols, :]


def make_inputs(cfg: MoEConfig, batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    """Deterministic input hidden states ``[batch, seq, H]``."""
    return torch.randn(batch, seq, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))


def to_device(
    layers: list[LayerWeights], device: torch.device | str, dtype: torch.dtype | None = None
) -> list[LayerWeights]:
    """Copy every weight tensor of ``layers`` to ``device`` (cast to ``dtype`` when given)."""

    def move(obj: Any) -> Any:
        return replace(
            obj,
            **{
                f.name: None
                if getattr(obj, f.name) is None
                else getattr(obj, f.name).to(device=device, dtype=dtype)
                for f in fields(obj)
            },
        )

    return [
        LayerWeights(
            attn=move(lw.attn),
            moe=None if lw.moe is None else move(lw.moe),
            mlp=None if lw.mlp is None else move(lw.mlp),
        )
        for lw in layers
    ]
