"""Attention and MLA features (the family overview is :mod:`.families`).

- ``context_attention`` (causal prefill, sliding window ``W``): FLOPs ``4 b s h d keys``
  with ``keys`` the mean keys per query; bytes ``b s d (4 h + 2 kv c)`` (Q and O in bf16, K/V
  in the cache dtype of ``c`` bytes); per-work: each of the ``b h ceil(s / tile)`` blocks
  (64 query rows in TensorRT-LLM's fmha_v2, 128 in FlashAttention) costs a fixed latency,
  paid once per wave over the SMs (:class:`WaveFeatures`). That latency is the same on both
  table GPUs (s = 16: TensorRT-LLM 3.35 / 3.28 us a wave on A100 / H100, SGLang 0.76 / 0.80
  us), so it moves to another GPU unscaled (``Family.wave_latency_transfers``) and the SM
  count carries the GPU: the H100 is 1.2x faster per (sequence, head), not the 1.6x of HBM.
- ``generation_attention`` (one new token, ``ctx = isl + step`` keys): FLOPs ``4 b h d ctx``,
  bytes ``b ctx 2 kv d c + 4 b h d``, work ``b kv`` (decode kernels run one block per
  sequence and KV head: the tables' time at one key grows with KV heads, not query heads, and
  is one function of the grid size ``b kv`` whatever the group size — every engine, both GPUs
  — so the residual field's first coordinate is ``log2 b kv``, not ``log2 b``).
  TensorRT-LLM (``torch_flow``): XQA serves head groups ``g = h / kv`` up to
  :data:`XQA_MAX_GROUP`; larger groups fall back to masked MHA, one block per *query* head
  reading its group's K/V (:data:`MMHA_KV_SHARE` of it from HBM, the rest L2 hits): KV bytes
  and work count ``max(kv, h / 2)`` heads (both GPUs: h 64-128 on kv 1-2 run 10-15x slower
  than kv 4, 0.44-0.47x an MHA layer of h KV heads). The kernel path (MMHA: g > 32, or g = 1,
  MMHA too in TRT-LLM 1.0 on Ampere) is a field coordinate: shapes are corrected by their path.
  An MMHA block (one per query head: grid ``b h``) costs :data:`MMHA_BLOCK_WORK` of an XQA
  block: work ``b h / 4`` on that path. TensorRT-LLM also declines XQA when its blocks would
  not fill a quarter of the GPU's SMs (:func:`_xqa_declines`, TensorRT-LLM's own rule): small
  batches of few KV heads at short contexts run MMHA as well (the SM count of the GPU the
  row runs on, so the rule moves with the GPU on transfer).
- ``context_mla`` (DeepSeek MLA prefill, non-absorbed: q/k head dim 192, v 128):
  FLOPs ``2 b s h keys (192 + 128)``, bytes ``2 b s h (192 + 192 + 128 + 128)``, work ``b h``.
- ``generation_mla`` (absorbed decode: latent 512 + rope 64 shared by all heads):
  FLOPs ``2 b h ctx (576 + 512)``, bytes ``b ctx 576 c + 2 b h (576 + 512)``, work ``b``.
  vLLM's Triton decode (``vllm_triton_mla``) re-reads the latent cache per block of
  :data:`TRITON_MLA_BLOCK_H` heads: cache bytes x ``ceil(h / 16)`` (16 : 64 : 128 heads cost
  1 : 3.8 : 7.5 measured); its ``b ceil(h / 16)`` x :data:`TRITON_MLA_SPLITS` programs each
  walk ``ctx / 4`` keys serially (+ a fixed cost), paid once per wave over the SMs; h = 1 runs
  the non-grouped kernel (a field coordinate of its own); the ~300 us floor of
  vLLM 0.14 on the A100 is host time the kernel runs under (``Family.host_floor_kernels``).
  TensorRT-LLM's (``default``; A100 1.0: 15 ms for one sequence of
  128k keys, whatever the heads) walks keys serially, one block per sequence and
  :data:`TRTLLM_MLA_HEAD_BLOCK` heads: work ``ctx`` per block, ``b ceil(h / 64)`` blocks,
  paid once per wave over the SMs (:class:`WaveFeatures`).
- ``{context,generation}_mla_module`` (the whole DeepSeek-V3 MLA block): the core's terms
  plus the projections' FLOPs ``2 t W`` and weight bytes ``W w`` (``t`` tokens, ``W`` the
  projection weights per GPU with ``h`` heads, absorbed W_UK/W_UV when decoding).
- ``allreduce`` (engine custom all-reduce, ``m`` bf16 elements on ``n`` GPUs):
  link bytes ``2 (n-1)/n 2 m``.
- ``deepep_{normal,ll}_{dispatch,combine}`` (8 ranks in one node): normal kernels send each
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from moeplan.cost.kerneldb.base import BF16_BYTES, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2
from moeplan.cost.kerneldb.feature_base import (
    PATH_COORD,
    SM_COUNT_COLUMN,
    WaveFeatures,
    row_kernels,
)
from moeplan.cost.kerneldb.moe_features import WEIGHT_BYTES, rate_tier

# DeepSeek-V3 MLA dimensions (config.json: qk_nope_head_dim 128, qk_rope_head_dim 64,
# v_head_dim 128, kv_lora_rank 512) — the model NVIDIA's MLA tables were collected for.
MLA_QK, MLA_V, MLA_LATENT = 192, 128, 576

#: TensorRT-LLM decode attention (XQA / masked MHA, see module docstring)
TRTLLM_ATTENTION = "torch_flow"
XQA_MAX_GROUP = 32  # largest query-head group XQA serves (tables: g = 32 fast, 48-128 not)
#: query rows per prefill block (head 128): TensorRT-LLM's fmha_v2 flash attention
#: (``fmha_v2_flash_attention_bf16_64_128_S_qkv_128_*``: 64 Q x 128 KV), FlashAttention 2 / 3
#: (kBlockM 128)
FMHA_V2_TILE_Q = 64
FLASH_TILE_Q = 128
#: TensorRT-LLM's XQA dispatch (decoderXQAConstants.h: kEnableMinBlockFactor 4,
#: kMinHistoryTokensPerBlock 128): below that block count it runs masked MHA (A100 tables, one
#: key: b kv 32-64 run 12 us whatever the heads, b kv < 27 grow with b h, 19.6 us at b h 128)
XQA_MIN_BLOCK_FACTOR = 4.0
XQA_HISTORY_PER_BLOCK = 128.0
MMHA_KV_SHARE = 0.5  # HBM share of per-query-head K/V reads on the MMHA path (tables: 0.44-0.47)
#: per-block cost of masked MHA (one block per query head) relative to an XQA block (one per
#: KV head), at one key and b = 256: A100 16 / 62 ns, H100 10 / 40 ns (g = 1 and g > 32 alike)
MMHA_BLOCK_WORK = 0.25
TRITON_MLA = "vllm_triton_mla"
TRITON_MLA_BLOCK_H = 16  # vLLM triton_decode_attention: BLOCK_H heads per program
#: KV splits of vLLM's Triton MLA decode: programs per (sequence, 16-head block); A100 tables,
#: 64k keys: flat while b ceil(h/16) 4 <= 108 SMs, x2 beyond (h 2-16: b 16 -> 32; 32: 8 -> 16;
#: 64: 4 -> 8; 128: 2 -> 4)
TRITON_MLA_SPLITS = 4
#: a program's fixed cost in keys: 5-6 us a wave of programs at 2 keys (h 64-128, b 1024)
#: over 97 ns a key (h 2, one sequence, 32k -> 64k keys)
TRITON_MLA_SETUP_KEYS = 64.0
#: h = 1 runs vLLM's non-grouped kernel (4.7x the grouped kernel's time a key in the A100
#: rows). Only its own path coordinate models it: a per-key factor read from the h = 1 rows
#: would predict those rows from themselves when the held-out evaluation holds h = 1 out
#: (p90 23.3 % with it, 38.4 % without: the cell's figure is the latter).
TRTLLM_MLA = "default"
TRTLLM_MLA_HEAD_BLOCK = 64  # heads per block of TRT-LLM's MLA decode (tables: 64 -> 128 doubles)


def _kv_bytes(cols: Columns) -> np.ndarray:
    kv = np.asarray(cols["kv_cache_dtype"]).astype(str)
    return np.where(np.char.startswith(kv, "fp8") | (kv == "int8"), 1.0, BF16_BYTES)


def _mean_keys(s: np.ndarray, w: np.ndarray) -> np.ndarray:
    win = np.where(w > 0, np.minimum(w, s), s)
    return (win * (win + 1) / 2 + (s - win) * win) / np.maximum(s, 1)


def _attn_common(cols: Columns) -> tuple[np.ndarray, ...]:
    return (
        _f(cols, "batch_size"),
        _f(cols, "num_heads"),
        _f(cols, "num_key_value_heads"),
        _f(cols, "head_dim"),
        _f(cols, "window_size"),
        _kv_bytes(cols),
    )


def _attn_fp8(cols: Columns) -> np.ndarray:
    return np.char.startswith(np.asarray(cols["attn_dtype"]).astype(str), "fp8")


def _context_attention(cols: Columns) -> Features:
    b, h, kv, d, w, c = _attn_common(cols)
    s = _f(cols, "isl")
    keys = _mean_keys(s, w)
    coords = np.stack([_l2(b), _l2(s), _l2(h), _l2(kv), _l2(d), _l2(w + 1) / 4], 1)
    tile = np.where(row_kernels(cols) == TRTLLM_ATTENTION, FMHA_V2_TILE_Q, FLASH_TILE_Q)
    return WaveFeatures(
        flops=4 * b * s * h * d * keys,
        nbytes=b * s * d * (2 * BF16_BYTES * h + 2 * kv * c),
        work=tile,  # query rows a block holds
        fp8=_attn_fp8(cols),
        tokens=b * s,
        coords=coords,
        ctas=b * h * np.ceil(s / tile),
    )


def _xqa_declines(cols: Columns, seq_heads: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """TensorRT-LLM runs XQA only where its blocks would fill a quarter of the SMs
    (``DecoderXQARunner::mayHavePerfGain``): ``b kv max(1, ctx // 128) 4 >= SMs``; else masked
    MHA. ``ctx`` is the past length, not a sliding window (H100 window-128 rows: held-out p90
    15.5 % with it, 16.0 % with the window). The SM count is the GPU the row runs on
    (:data:`SM_COUNT_COLUMN`, filled by :class:`~.variant.VariantModel`); without it every row
    is taken to run XQA."""
    if SM_COUNT_COLUMN not in cols:
        return np.zeros(len(ctx), bool)
    blocks = seq_heads * np.maximum(1.0, np.floor(ctx / XQA_HISTORY_PER_BLOCK))
    return blocks * XQA_MIN_BLOCK_FACTOR < _f(cols, SM_COUNT_COLUMN)


def _generation_attention(cols: Columns) -> Features:
    b, h, kv, d, w, c = _attn_common(cols)
    ctx = _f(cols, "isl") + _f(cols, "step")
    keys = np.where(w > 0, np.minimum(ctx, w), ctx)
    trt = row_kernels(cols) == TRTLLM_ATTENTION
    group = h / kv
    mmha = trt & ((group > XQA_MAX_GROUP) | _xqa_declines(cols, b * kv, ctx))
    heads = np.where(mmha, np.maximum(kv, MMHA_KV_SHARE * h), kv)  # K/V heads read from HBM
    on_mmha = mmha | (trt & (group == 1))
    path = PATH_COORD * on_mmha
    grid = np.where(on_mmha, h, kv)  # blocks per sequence: per query head on MMHA
    coords = np.stack([_l2(b * grid), _l2(ctx), _l2(h), _l2(kv), _l2(d), _l2(w + 1) / 4, path], 1)
    return Features(
        flops=4 * b * h * d * keys,
        nbytes=b * keys * 2 * heads * d * c + 2 * BF16_BYTES * b * h * d,
        work=b * grid * np.where(on_mmha, MMHA_BLOCK_WORK, 1.0),
        fp8=_attn_fp8(cols),
        tokens=b,
        coords=coords,
    )


def _mla_fp8(cols: Columns) -> np.ndarray:
    return np.char.startswith(np.asarray(cols["mla_dtype"]).astype(str), "fp8")


def _context_mla(cols: Columns) -> Features:
    b, s, h = _f(cols, "batch_size"), _f(cols, "isl"), _f(cols, "num_heads")
    keys = _mean_keys(s, np.zeros_like(s))
    coords = np.stack([_l2(b), _l2(s), _l2(h)], 1)
    return Features(
        flops=2 * b * s * h * keys * (MLA_QK + MLA_V),
        nbytes=BF16_BYTES * b * s * h * (2 * MLA_QK + 2 * MLA_V),
        work=b * h,
        fp8=_mla_fp8(cols),
        tokens=b * s,
        coords=coords,
    )


def _triton_mla_programs(b: np.ndarray, h: np.ndarray, ctx: np.ndarray) -> tuple[np.ndarray, ...]:
    """vLLM's Triton MLA decode: (keys each program walks, in units of the grouped kernel's
    per-key time; resident programs in the grid, as :class:`WaveFeatures` blocks). A split
    without keys (``ctx`` < :data:`TRITON_MLA_SPLITS`) exits at once."""
    keys = ctx / TRITON_MLA_SPLITS
    programs = b * np.ceil(h / TRITON_MLA_BLOCK_H) * np.minimum(ctx, TRITON_MLA_SPLITS)
    return keys + TRITON_MLA_SETUP_KEYS, programs


def _generation_mla(cols: Columns) -> Features:
    b, h = _f(cols, "batch_size"), _f(cols, "num_heads")
    ctx = _f(cols, "isl") + _f(cols, "step")
    kernel = row_kernels(cols)
    triton, trt = kernel == TRITON_MLA, kernel == TRTLLM_MLA  # others: ``b`` work, one block
    reads = np.where(triton, np.ceil(h / TRITON_MLA_BLOCK_H), 1.0)
    tri_work, tri_ctas = _triton_mla_programs(b, h, ctx)
    return WaveFeatures(
        flops=2 * b * h * ctx * (MLA_LATENT + MLA_LATENT - 64),
        nbytes=b * ctx * MLA_LATENT * _kv_bytes(cols) * reads
        + BF16_BYTES * b * h * (2 * MLA_LATENT - 64),
        work=np.where(triton, tri_work, np.where(trt, ctx, b)),
        fp8=_mla_fp8(cols),
        tokens=b,
        coords=np.stack([_l2(b), _l2(ctx), _l2(h), PATH_COORD * (triton & (h == 1))], 1),
        ctas=np.where(triton, tri_ctas, np.where(trt, b * np.ceil(h / TRTLLM_MLA_HEAD_BLOCK), 1)),
    )


# DeepSeek-V3 projection sizes (config.json: hidden_size 7168, q_lora_rank 1536): the
# module tables time the whole MLA block, projections included.
DSV3_HIDDEN, DSV3_Q_LORA, MLA_KV_LORA, MLA_ROPE = 7168, 1536, 512, 64
#: projection weight bytes per element of a ``gemm_type`` (NVFP4 with its block scales,
#: :data:`~.moe_features.WEIGHT_BYTES`)
GEMM_BYTES = {"bfloat16": 2.0, "fp8_block": 1.0, "fp8": 1.0, "nvfp4": WEIGHT_BYTES["nvfp4"]}


def _module(core: Callable[[Columns], Features], absorbed: bool) -> Callable[[Columns], Features]:
    """MLA module = the core kernel + DeepSeek-V3's projections on the same tokens: q_a, q_b,
    kv_a, o and kv_b (prefill) or the absorbed W_UK / W_UV per head (decode)."""
    kv_b = 2 * MLA_KV_LORA * MLA_V if absorbed else MLA_KV_LORA * (MLA_QK - MLA_ROPE + MLA_V)
    per_head = MLA_QK * DSV3_Q_LORA + MLA_V * DSV3_HIDDEN + kv_b

    def feats(cols: Columns) -> Features:
        c = core(cols)
        weights = DSV3_HIDDEN * (DSV3_Q_LORA + MLA_LATENT) + _f(cols, "num_heads") * per_head
        gemm = np.asarray(cols["gemm_type"]).astype(str)
        wb = np.array([GEMM_BYTES.get(g, BF16_BYTES) for g in gemm])
        return replace(  # keeps the core's type (WaveFeatures: its blocks)
            c,
            flops=c.flops + 2 * c.tokens * weights,
            nbytes=c.nbytes + weights * wb + 2 * BF16_BYTES * c.tokens * DSV3_HIDDEN,
            fp8=np.maximum(c.fp8, rate_tier(gemm)),
        )

    return feats
