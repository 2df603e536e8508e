"""A small MoE decoder (attention + MoE per layer) and its single-process reference forward.

Each layer: ``h = x + attn(rms(x))``; ``y = h + moe(rms(h))``. Attention is causal multi-head
attention without positional encoding (the runtime measures parallel layouts, not language
quality); TP shards heads, so a TP rank's attention output is a partial sum. Weights are drawn
from a seeded generator, so every rank rebuilds the same model without communication, or are
loaded from safetensors files (:func:`load_safetensors`, no pickle).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from moeplan.errors import MoeplanError
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.moe_layer import MoEWeights, init_moe_weights, moe_forward, swiglu


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
    mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
    scores = (q @ k.transpose(-1, -2)) / d**0.5
    ctx = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v  # [B, h, S, d]
    return ctx.transpose(1, 2).reshape(b, s, heads * d) @ w.wo[cols, :]


def reference_layer(x: torch.Tensor, w: LayerWeights, cfg: MoEConfig) -> torch.Tensor:
    """One decoder layer on ``x [B, S, H]``."""
    h = x + attention(rms(x), w.attn, cfg)
    flat = h.reshape(-1, h.shape[-1])
    if w.mlp is not None:
        return (flat + swiglu(rms(flat), w.mlp.w_gate, w.mlp.w_up, w.mlp.w_down)).view_as(x)
    return (flat + moe_forward(rms(flat), w.experts, cfg)).view_as(x)


def reference_forward(x: torch.Tensor, layers: list[LayerWeights], cfg: MoEConfig) -> torch.Tensor:
    for w in layers:
        x = reference_layer(x, w, cfg)
    return x


def make_inputs(cfg: MoEConfig, batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    """Deterministic input hidden states ``[batch, seq, H]``."""
    return torch.randn(batch, seq, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))


def _moe_tensors(layer: int, w: MoEWeights) -> dict[str, torch.Tensor]:
    p = f"model.layers.{layer}.mlp."
    out = {p + "gate.weight": w.gate.T.contiguous()}
    if w.bias is not None:
        out[p + "gate.e_score_correction_bias"] = w.bias
    for e in range(w.w_gate.shape[0]):
        q = f"{p}experts.{e}."
        out[q + "gate_proj.weight"] = w.w_gate[e].T.contiguous()
        out[q + "up_proj.weight"] = w.w_up[e].T.contiguous()
        out[q + "down_proj.weight"] = w.w_down[e].T.contiguous()
    if w.shared_gate is not None:
        out[p + "shared_experts.gate_proj.weight"] = w.shared_gate.T.contiguous()
        out[p + "shared_experts.up_proj.weight"] = w.shared_up.T.contiguous()
        out[p + "shared_experts.down_proj.weight"] = w.shared_down.T.contiguous()
    return out


def save_safetensors(layers: list[LayerWeights], path: str | Path) -> None:
    """Write MoE weights with Hugging Face DeepSeek key names (``[out, in]`` matrices)."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for i, lw in enumerate(layers):
        if lw.moe is None:
            raise MoeplanError(f"layer {i} (dense) cannot be saved: only MoE layers are supported")
        tensors.update(_moe_tensors(i, lw.moe))
        for n in ("q", "k", "v", "o"):
            tensors[f"model.layers.{i}.self_attn.{n}_proj.weight"] = getattr(
                lw.attn, f"w{n}"
            ).T.contiguous()
    save_file(tensors, str(path))


_MIXTRAL = {"gate": "w1", "up": "w3", "down": "w2"}


def _alias(t: dict[str, torch.Tensor], i: int) -> None:
    """Rename layer ``i``'s Mixtral (``block_sparse_moe``, ``w1/w3/w2``) and Qwen2-MoE
    (``shared_expert``) keys to the DeepSeek names in place."""
    old = f"model.layers.{i}.block_sparse_moe."
    new = f"model.layers.{i}.mlp."
    for key in [k for k in t if k.startswith(old)]:
        rest = key[len(old) :]
        for ours, theirs in _MIXTRAL.items():
            rest = rest.replace(f".{theirs}.weight", f".{ours}_proj.weight")
        t[new + rest] = t.pop(key)
    for key in [k for k in t if k.startswith(f"{new}shared_expert.")]:
        t[key.replace(".shared_expert.", ".shared_experts.")] = t.pop(key)


def load_safetensors(paths: list[str | Path], cfg: MoEConfig) -> list[LayerWeights]:
    """Load ``cfg.num_layers`` layers from safetensors shards (Hugging Face DeepSeek/Qwen names;
    Mixtral's ``block_sparse_moe.experts.E.w1/w3/w2`` and Qwen2-MoE's ``shared_expert`` too)."""
    from safetensors.torch import load_file

    t: dict[str, torch.Tensor] = {}
    for p in paths:
        t.update(load_file(str(p)))
    for i in range(cfg.num_layers):
        _alias(t, i)

    def get(key: str) -> torch.Tensor:
        if key not in t:
            raise MoeplanError(f"weights ({key}) missing from safetensors files")
        return t[key].float().T.contiguous()

    layers = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}.mlp."
        ex = [
            [get(f"{p}experts.{e}.{n}_proj.weight") for e in range(cfg.num_experts)]
            for n in ("gate", "up", "down")
        ]
        has_shared = f"{p}shared_experts.gate_proj.weight" in t
        sh = [
            get(f"{p}shared_experts.{n}_proj.weight") if has_shared else None
            for n in ("gate", "up", "down")
        ]
        bias = t.get(p + "gate.e_score_correction_bias")
        moe = MoEWeights(
            gate=get(p + "gate.weight"),
            bias=None if bias is None else bias.float(),
            w_gate=torch.stack(ex[0]),
            w_up=torch.stack(ex[1]),
            w_down=torch.stack(ex[2]),
            shared_gate=sh[0],
            shared_up=sh[1],
            shared_down=sh[2],
        )
        a = [get(f"model.layers.{i}.self_attn.{n}_proj.weight") for n in ("q", "k", "v", "o")]
        layers.append(LayerWeights(attn=AttnWeights(wq=a[0], wk=a[1], wv=a[2], wo=a[3]), moe=moe))
    return layers


def to_device(layers: list[LayerWeights], device: torch.device | str) -> list[LayerWeights]:
    """Copy every weight tensor of ``layers`` to ``device``."""
    from dataclasses import fields, replace

    def move(obj):
        return replace(
            obj,
            **{
                f.name: None if getattr(obj, f.name) is None else getattr(obj, f.name).to(device)
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
