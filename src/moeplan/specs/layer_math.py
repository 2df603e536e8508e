"""Parameters, FLOPs and cache bytes of one decoder layer, per mixer / FFN kind.

Pure functions over :class:`~moeplan.specs.layers.Mixer`, :class:`~moeplan.specs.layers.FFN`
and :class:`~moeplan.specs.layers.LayerSpec` (``h`` is the model's hidden size). FLOPs count
2 per multiply-accumulate, for one token.

Parameter counts follow each architecture's modelling code (named per kind below); terms
below 0.1 % of a layer that the configs do not determine (DeepSeek-V4's compressor gates,
MiniMax-M3's index projections) are counted from the shapes the config states, which is an
estimate — the published totals they are tested against carry the 3 % tolerance.

Cache per sequence (:func:`kv_bytes_for_context`), by kind:

- ``mha`` / ``msa``: ``context`` x K and V of every KV head (``msa`` adds its index keys);
  ``swa``: at most ``window`` tokens; ``chunked``: at most one ``chunk``.
- ``mla``: the latent (``kv_lora_rank + qk_rope_head_dim`` values) per token; ``dsa`` adds
  the indexer's own key cache: ``index_head_dim`` fp8 values and one fp32 scale per 128
  (DeepSeek-V3.2 ``inference/model.py`` Indexer, ``block_size = 128``).
- ``csa`` / ``hca``: one ``head_dim`` entry per ``compress_ratio`` tokens (``csa``: plus the
  indexer's compressed keys) plus the last ``window`` tokens uncompressed.
- ``gdn`` / ``kda``: no KV; a fixed state of ``lin_value_heads x lin_key_dim x
  lin_value_dim`` values at ``state_bytes`` and a convolution window of ``conv_kernel - 1``
  tokens of the q/k/v channels (bf16). ``mamba2``: ``num_heads x head_dim x ssm_state``
  state values plus the convolution window of the x/B/C channels.
"""

from __future__ import annotations

import math

from moeplan.specs.layers import FFN, LayerSpec, Mixer

CONV_BYTES = 2  # convolution windows are kept in the activation dtype (bf16)
INDEX_FP8_BLOCK = 128  # DeepSeek-V3.2 Indexer: one fp32 scale per 128 fp8 key values
INDEX_SCALE_BYTES = 4
#: state-update multiply-accumulates per state element and token (delta rule: decay, k^T S,
#: rank-1 update, S q — Gated DeltaNet paper eq. 10; Mamba-2: decay, update, C^T h)
LINEAR_MACS_PER_STATE = 4
SSM_MACS_PER_STATE = 3


# ---- parameters ---------------------------------------------------------------------------
def _gqa_linear(m: Mixer, h: int) -> int:
    hd, vd, nh, nkv = m.head_dim, m.vo_dim, m.num_heads, m.num_kv_heads
    q = h * nh * hd * (2 if m.output_gate else 1)
    n = q + h * nkv * hd + (0 if m.k_eq_v else h * nkv * vd) + nh * vd * h
    if m.bias:
        n += nh * hd + nkv * hd + (0 if m.k_eq_v else nkv * vd)
    return n + (h if m.out_bias else 0)


def _mla_linear(m: Mixer, h: int) -> int:
    """DeepSeek-V2/V3 ``DeepseekV3Attention`` (the low-rank norms counted with q / kv_a)."""
    nh, qd = m.num_heads, m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * qd
    else:
        q = h * nh * qd
    kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    kv_b = m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv_a + kv_b + nh * m.v_head_dim * h


def _indexer(m: Mixer, h: int, q_in: int) -> int:
    """Lightning indexer (DeepSeek-V3.2 ``Indexer``): wq_b, wk, k_norm, weights_proj."""
    ih, idim = m.index_n_heads, m.index_head_dim
    return q_in * ih * idim + h * idim + 2 * idim + h * ih


def _v4_linear(m: Mixer, h: int) -> int:
    """DeepSeek-V4 attention: low-rank q, one MQA KV head, grouped low-rank output, the
    compressor (KV and gate projections; doubled for the overlapping ratio-4 windows)."""
    nh, hd = m.num_heads, m.head_dim
    q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * hd
    kv = h * m.num_kv_heads * hd + hd
    if m.o_lora_rank and m.o_groups:
        o = nh * hd * m.o_lora_rank + m.o_groups * m.o_lora_rank * h
    else:
        o = nh * hd * h
    overlap = 2 if m.compress_ratio == 4 else 1
    comp = 2 * h * hd * overlap + m.compress_ratio * hd * overlap + hd if m.compress_ratio else 0
    n = q + kv + o + comp
    if m.kind == "csa":
        n += _indexer(m, h, m.q_lora_rank) + 2 * h * m.index_head_dim * overlap
    return n


def _linear_attn(m: Mixer, h: int) -> int:
    """Gated DeltaNet (Qwen3-Next ``Qwen3NextGatedDeltaNet``) / Kimi delta attention."""
    k, v = m.lin_key_heads * m.lin_key_dim, m.lin_value_heads * m.lin_value_dim
    conv = (2 * k + v) * m.conv_kernel
    if m.kind == "gdn":  # in_proj_qkvz, in_proj_ba, conv1d, A_log, dt_bias, norm, out_proj
        return (
            h * (2 * k + 2 * v)
            + h * 2 * m.lin_value_heads
            + conv
            + 2 * m.lin_value_heads
            + m.lin_value_dim
            + v * h
        )
    # kda (Kimi Linear KimiDeltaAttention): q/k/v, low-rank decay f_a/f_b and output gate
    # g_a/g_b, beta b_proj, A_log, dt_bias, output norm, o_proj
    d = m.lin_key_dim
    return (
        h * (2 * k + v)
        + conv
        + (h * d + d * k)
        + (h * d + d * v)
        + h * m.lin_value_heads
        + 2 * m.lin_value_heads
        + m.lin_value_dim
        + v * h
    )


def _mamba2(m: Mixer, h: int) -> int:
    """Mamba-2 (``NemotronHMamba2Mixer``): in_proj (z, x, B, C, dt), conv1d with bias,
    dt_bias / A_log / D, gated RMSNorm, out_proj."""
    d_in = m.num_heads * m.head_dim
    bc = 2 * m.ssm_groups * m.ssm_state
    return (
        h * (2 * d_in + bc + m.num_heads)
        + (d_in + bc) * (m.conv_kernel + 1)
        + 3 * m.num_heads
        + d_in
        + d_in * h
    )


def mixer_linear_params(m: Mixer, h: int) -> int:
    """Projection weights (and biases) of the mixer: what its GEMMs multiply by."""
    k = m.kind
    if k in ("csa", "hca") or (k == "swa" and m.shared_kv):
        return _v4_linear(m, h)
    if k in ("mha", "swa", "chunked"):
        return _gqa_linear(m, h)
    if k == "msa":  # GQA plus the index branch's query and key projections
        return _gqa_linear(m, h) + h * m.index_n_heads * m.index_head_dim + h * m.index_head_dim
    if k == "mla":
        return _mla_linear(m, h)
    if k == "dsa":
        return _mla_linear(m, h) + _indexer(m, h, m.q_lora_rank or h)
    if k in ("gdn", "kda"):
        return _linear_attn(m, h)
    if k == "mamba2":
        return _mamba2(m, h)
    return 0


def mixer_params(m: Mixer, h: int) -> int:
    """Every parameter of the mixer: projections, sinks, q/k norms (layer norms excluded)."""
    n = mixer_linear_params(m, h)
    if m.sinks:
        n += m.num_heads
    if m.qk_norm:
        n += 2 * m.head_dim
    return n


def mlp_params(h: int, inter: int, gated: bool, bias: bool = False) -> int:
    """One MLP / expert: gate, up, down (``gated``) or up, down; GPT-OSS biases."""
    n = (3 if gated else 2) * h * inter
    return n + ((2 * inter + h) if bias and gated else (inter + h) if bias else 0)


def ffn_params(f: FFN, h: int, active: bool = False) -> int:
    """The FFN's parameters; ``active``: only ``top_k`` routed experts."""
    if f.kind == "none":
        return 0
    one = mlp_params(h, f.intermediate_size, f.gated, f.bias)
    if f.kind == "dense":
        return one
    experts = (f.top_k if active else f.num_experts) * one
    shared = mlp_params(h, f.shared_intermediate_size, f.gated) + (h if f.shared_gate else 0)
    router = h * f.num_experts + (f.num_experts if f.router_bias else 0)
    if f.router == "hash":
        router = 0  # DeepSeek-V4 hash layers: a token-id table, no learned gate
    return experts + (shared if f.shared_intermediate_size else 0) + router


def layer_params(layer: LayerSpec, h: int, active: bool = False) -> int:
    return (mixer_params(layer.mixer, h) + ffn_params(layer.ffn, h, active) + layer.norms * h
            + hc_params(layer, h))  # fmt: skip


def hc_params(layer: LayerSpec, h: int) -> int:
    """mHC weights of one layer: per site (before the mixer, before the FFN) a
    ``hc_mult h -> (2 + hc_mult) hc_mult`` mixing projection, its bias and 3 gate scales
    (DeepSeek-V4 ``inference/model.py``: ``hc_attn_fn`` / ``hc_attn_base`` / ``hc_attn_scale``
    and the ``hc_ffn_*`` three)."""
    m = layer.hc_mult
    if m == 0:
        return 0
    mix = (2 + m) * m
    return 2 * (mix * m * h + mix + 3)


# ---- FLOPs per token ----------------------------------------------------------------------
def attended_keys(m: Mixer, context: float) -> float:
    """Keys one query attends to at ``context`` cached tokens (0 for linear kinds)."""
    k = m.kind
    if k in ("mha", "mla"):
        return context
    if k == "swa":
        return min(context, m.window)
    if k == "chunked":
        return min(context, m.chunk)
    if k == "dsa":
        return min(context, m.index_topk)
    if k == "csa":
        return min(context / m.compress_ratio, m.index_topk) + min(context, m.window)
    if k == "hca":
        return context / m.compress_ratio + min(context, m.window)
    if k == "msa":
        return min(context, (m.topk_blocks + m.local_blocks) * m.block_size)
    return 0.0


def indexer_flops(m: Mixer, context: float) -> float:
    """Index scores of one query over the cached index keys (dsa, csa, msa)."""
    if m.kind == "dsa":
        return 2.0 * m.index_n_heads * m.index_head_dim * context
    if m.kind == "csa":
        return 2.0 * m.index_n_heads * m.index_head_dim * context / m.compress_ratio
    if m.kind == "msa":
        return 2.0 * m.index_n_heads * m.index_head_dim * context / m.block_size
    return 0.0


def mixer_core_flops(m: Mixer, context: float) -> float:
    """The mixer's non-GEMM work for one token at ``context`` cached tokens."""
    if m.kind in ("gdn", "kda"):
        state = m.lin_value_heads * m.lin_key_dim * m.lin_value_dim
        return 2.0 * LINEAR_MACS_PER_STATE * state
    if m.kind == "mamba2":
        return 2.0 * SSM_MACS_PER_STATE * m.num_heads * m.head_dim * m.ssm_state
    if m.kind == "none":
        return 0.0
    keys = attended_keys(m, context)
    return 2.0 * m.num_heads * (m.q_dim + m.vo_dim) * keys + indexer_flops(m, context)


def ffn_flops(f: FFN, h: int) -> float:
    """FFN FLOPs of one token: ``top_k`` experts + shared experts + router, or the MLP."""
    if f.kind == "none":
        return 0.0
    mats = 3 if f.gated else 2
    one = 2.0 * mats * h * f.intermediate_size
    if f.kind == "dense":
        return one
    router = 0.0 if f.router == "hash" else 2.0 * h * f.num_experts
    return f.top_k * one + 2.0 * mats * h * f.shared_intermediate_size + router


# ---- cache bytes -------------------------------------------------------------------------
def index_key_bytes(m: Mixer) -> float:
    """One cached index key: fp8 values plus one fp32 scale per 128 (dsa / csa)."""
    return m.index_head_dim + INDEX_SCALE_BYTES * m.index_head_dim / INDEX_FP8_BLOCK


def kv_bytes_per_token(m: Mixer) -> float:
    """Cache bytes one more token of context adds to the layer (0 for linear kinds; the
    rate before any window cap; compressed kinds: per token, i.e. an entry / ratio)."""
    k = m.kind
    if k in ("mha", "swa", "chunked"):
        v = 0 if m.shared_kv else m.vo_dim  # DeepSeek-V4: one vector is K and V
        return float(m.num_kv_heads * (m.head_dim + v) * m.kv_bytes)
    if k == "msa":
        gqa = m.num_kv_heads * (m.head_dim + m.vo_dim) * m.kv_bytes
        return float(gqa + m.index_n_heads * m.index_head_dim * m.kv_bytes)
    if k in ("mla", "dsa"):
        latent = (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes
        return float(latent + (index_key_bytes(m) if k == "dsa" else 0.0))
    if k in ("csa", "hca"):
        entry = m.num_kv_heads * m.head_dim * m.kv_bytes
        idx = index_key_bytes(m) if k == "csa" else 0.0
        return (entry + idx) / m.compress_ratio
    return 0.0


def window_bytes_per_token(m: Mixer) -> float:
    """csa / hca: bytes per token of the uncompressed local window (capped at ``window``)."""
    if m.kind in ("csa", "hca"):
        return float(m.num_kv_heads * m.head_dim * m.kv_bytes)
    return 0.0


def state_bytes_per_seq(m: Mixer) -> float:
    """Fixed recurrent state of one sequence (linear kinds; 0 otherwise)."""
    if m.kind in ("gdn", "kda"):
        k, v = m.lin_key_heads * m.lin_key_dim, m.lin_value_heads * m.lin_value_dim
        state = m.lin_value_heads * m.lin_key_dim * m.lin_value_dim * m.state_bytes
        return float(state + (m.conv_kernel - 1) * (2 * k + v) * CONV_BYTES)
    if m.kind == "mamba2":
        d_in = m.num_heads * m.head_dim
        state = d_in * m.ssm_state * m.state_bytes
        conv = (m.conv_kernel - 1) * (d_in + 2 * m.ssm_groups * m.ssm_state) * CONV_BYTES
        return float(state + conv)
    return 0.0


def kept_tokens(m: Mixer, context: int) -> int:
    """Tokens of a ``context``-token sequence the layer's cache holds at the rate of
    :func:`kv_bytes_per_token` (window / chunk capped; compressed kinds: all of them)."""
    if m.kind == "swa":
        return min(context, m.window)
    if m.kind == "chunked":
        return min(context, m.chunk)
    return context if m.has_kv_cache else 0


def kv_bytes_for_context(m: Mixer, context: int) -> float:
    """Cache (KV or state) bytes of one sequence of ``context`` tokens in this layer."""
    if m.kind in ("csa", "hca"):
        entries = math.ceil(context / m.compress_ratio)
        return entries * kv_bytes_per_token(m) * m.compress_ratio + min(
            context, m.window
        ) * window_bytes_per_token(m)
    if m.is_linear:
        return state_bytes_per_seq(m) if context > 0 else 0.0
    return kept_tokens(m, context) * kv_bytes_per_token(m)
