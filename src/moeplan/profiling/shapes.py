"""Shapes a preset model's layers run, derived from :class:`moeplan.specs.ModelSpec`.

The GEMMs are exactly those :class:`moeplan.cost.CostModel` prices (``attention_layer``,
``expert_ffn``, ``shared_expert``), so the fitted GEMM model is calibrated where it is used:

- attention projections (GQA: fused QKV and output; MLA: q down/up or q, kv down, kv up,
  output) at ``tokens`` rows;
- routed experts at realistic tokens per expert ``round(tokens * top_k / num_experts)``
  (balanced routing), gate+up fused (``n = 2I``) and down;
- shared experts (DeepSeek/Qwen2) at ``tokens`` rows.

``scale`` divides every model width (rounded up to a multiple of 8) so the same shapes, shrunk,
run on a CPU in the tests (``--quick``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from moeplan.cost.mixer_layers import (
    UNIFORM_ATTENTION_KINDS,
)  # the kinds priced as uniform attention
from moeplan.specs import ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class AttnShape:
    """One SDPA call: ``num_seqs`` x ``heads`` query heads of ``q_len`` over ``ctx_len`` keys."""

    num_seqs: int
    q_len: int
    ctx_len: int
    heads: int
    kv_heads: int
    qk_dim: int
    v_dim: int

    @property
    def macs(self) -> float:
        """Cost-model units (FinDEP Eq. 8): ``q_tokens * mean causal keys * heads * (dk + dv)``."""
        keys = self.ctx_len - (self.q_len - 1) / 2.0
        return self.num_seqs * self.q_len * keys * self.heads * (self.qk_dim + self.v_dim)


def _s(dim: int, scale: int) -> int:
    """``ceil(dim / scale)`` rounded up to a multiple of 8 (``dim`` itself when unscaled)."""
    if scale <= 1:
        return dim
    shrunk = math.ceil(dim / scale)
    return math.ceil(shrunk / 8) * 8


def attention_gemms(model: ModelSpec, tokens: int, scale: int = 1) -> list[tuple[int, int, int]]:
    """``(m, n, k)`` of the attention projections for ``tokens`` rows."""
    h, nh = _s(model.hidden_size, scale), model.num_attention_heads
    if model.attention == "mla":
        lora, rope = _s(model.kv_lora_rank, scale), model.qk_rope_head_dim
        qd, nope, v = model.q_dim, model.qk_nope_head_dim, model.v_head_dim
        hs = max(1, nh // scale)
        out = [(tokens, lora + rope, h), (tokens, hs * (nope + v), lora), (tokens, h, hs * v)]
        if model.q_lora_rank:
            ql = _s(model.q_lora_rank, scale)
            return out + [(tokens, ql, h), (tokens, hs * qd, ql)]
        return out + [(tokens, hs * qd, h)]
    hs, kv = max(1, nh // scale), max(1, model.num_kv_heads // scale)
    return [(tokens, (hs + 2 * kv) * model.head_dim, h), (tokens, h, hs * model.head_dim)]


def tokens_per_expert(model: ModelSpec, tokens: int) -> int:
    return max(1, round(tokens * model.top_k / model.num_experts))


def expert_gemms(model: ModelSpec, tokens: int, scale: int = 1) -> list[tuple[int, int, int]]:
    """Routed expert (at tokens per expert) and shared expert GEMMs for ``tokens`` tokens."""
    h, i = _s(model.hidden_size, scale), _s(model.moe_intermediate_size, scale)
    m = tokens_per_expert(model, tokens)
    out = [(m, 2 * i, h), (m, h, i)]
    if model.shared_intermediate_size:
        s = _s(model.shared_intermediate_size, scale)
        out += [(tokens, 2 * s, h), (tokens, h, s)]
    return out


def attention_views(model: ModelSpec) -> list[ModelSpec]:
    """``model`` once per distinct attention shape of its layers (Gemma-4's sliding and
    global layers differ in K/V heads and head dim): the views the cost model prices each
    layer with (:meth:`moeplan.cost.CostModel.layer_model`), the model itself first."""
    views = {(model.num_attention_heads, model.num_kv_heads, model.head_dim): model}
    for x in model.layer_specs:
        m = x.mixer
        if m.kind in UNIFORM_ATTENTION_KINDS:
            dims = (m.num_heads, max(1, m.num_kv_heads), m.head_dim)
            views.setdefault(
                dims,
                replace(model, num_attention_heads=dims[0], num_kv_heads=dims[1], head_dim=dims[2]),
            )
    return list(views.values())


def model_gemms(
    model: ModelSpec, tokens_list: list[int], scale: int = 1
) -> list[tuple[int, int, int]]:
    """All distinct GEMM shapes of the model over ``tokens_list`` (every layer's attention
    shape, :func:`attention_views`)."""
    shapes = {
        s
        for t in tokens_list
        for s in [a for v in attention_views(model) for a in attention_gemms(v, t, scale)]
        + expert_gemms(model, t, scale)
    }
    return sorted(shapes)


def attention_shapes(
    model: ModelSpec, contexts: list[int], batches: list[int], scale: int = 1
) -> list[AttnShape]:
    """Prefill (``q_len = ctx``, causal) and decode (``q_len = 1``) SDPA shapes.

    MLA is measured in its expanded form (``heads`` x ``q_dim``/``v_head_dim``, one KV head per
    query head), which is what :meth:`CostModel.attention_core` prices; the absorbed decode
    form (latent-dimension MQA) is not measured.
    """
    heads = max(1, model.num_attention_heads // scale)
    if model.attention == "mla":
        kv, qk, v = heads, model.q_dim, model.vo_dim
    else:
        kv, qk, v = max(1, model.num_kv_heads // scale), model.head_dim, model.head_dim
        kv = kv if heads % kv == 0 else 1
    out = []
    for ctx in contexts:
        for b in batches:
            for q_len in (ctx, 1):
                out.append(
                    AttnShape(
                        num_seqs=b,
                        q_len=q_len,
                        ctx_len=ctx,
                        heads=heads,
                        kv_heads=kv,
                        qk_dim=qk,
                        v_dim=v,
                    )
                )
    return out
