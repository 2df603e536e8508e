"""Features of the recurrent mixers: Gated DeltaNet, Kimi delta attention and Mamba-2's conv.

NVIDIA's tables time each layer as two kernels (``kernel_source``), priced separately and
added by the caller (:mod:`moeplan.cost.mixers`):

- the short causal convolution over the q/k/v channels (``causal_conv1d_fn`` in prefill,
  ``causal_conv1d_update`` in decode): ``C`` channels (GDN / KDA: ``2 nk dk + nv dv``, the
  keys' ``nk dk`` alone in TensorRT-LLM's table, :func:`conv_channels`; Mamba-2:
  ``nheads head_dim + 2 n_groups d_state``), bytes ``2 C`` in and ``2 C`` out a token (bf16)
  plus, in decode, the conv state ``(d_conv - 1) C`` bf16 read and written per sequence;
  work: one block per sequence;
- the delta rule over the heads' ``dk x dv`` state. Prefill (chunked, chunks of
  :data:`CHUNK` tokens, fla's ``chunk_gated_delta_rule`` / ``chunk_kda``): FLOPs per token and
  value head ``4 dk dv`` (state read-out and update) + ``2 CHUNK (2 dk + dv)`` (intra-chunk
  ``K K^T``, ``A V``, ``Q K^T``), bytes: q/k/v/o in bf16 plus one fp32 state per chunk and value
  head written; decode (fused recurrent update): the fp32 state of every value head read and
  written. Work: one block per (sequence, value head) — the grid of fla's kernels.

The convolution and the decode update are elementwise / matrix-vector work on CUDA cores:
their FLOPs are not charged at the tensor-core peak (on an H20, 6.7x below the H100's in bf16
tensor math but ~0.6x in CUDA-core math, that would price the update 4-5x too slow against
InferSim's H20 rows); their time is bytes and the per-(sequence, head) work.

CONV_SETUP: besides its bytes, a convolution pays a cost per sequence *and channel* (its
conv state set up per sequence): TensorRT-LLM's rows at one new token grow ~1.1 ns per
sequence and channel — GDN 2.2 us a sequence at 2,048 channels, Mamba-2 11.5 us at 10,240 and
1.8 us at 1,536 — so the work term is sequences x channels (held out: Mamba-2 prefill p90
345 -> 13 %).

Mamba-2's state-space scan has no table (NVIDIA's Mamba-2 table holds only its convolution);
:mod:`moeplan.cost.mixers` prices it by the datasheet roofline and says so.
Coordinates (log2): batch, sequence length (prefill), key heads, value heads.
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb.base import BF16_BYTES, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2
from moeplan.cost.kerneldb.feature_base import PATH_COORD, WaveFeatures, row_kernels

#: fla's chunk length of the chunked delta rule (fla ``chunk_gated_delta_rule``: BT = 64)
CHUNK = 64.0
FP32_BYTES = 4.0  # the recurrent state is kept in fp32 (Qwen3.5 config ``mamba_ssm_dtype``)


def is_conv(kernel: np.ndarray) -> np.ndarray:
    """Rows timed on a causal-convolution kernel (the rest run the delta rule)."""
    return np.char.find(np.asarray(kernel).astype(str), "conv1d") >= 0


def _delta_dims(cols: Columns) -> tuple[np.ndarray, ...]:
    return (
        _f(cols, "num_k_heads"),
        _f(cols, "head_k_dim"),
        _f(cols, "num_v_heads"),
        _f(cols, "head_v_dim"),
    )


def _conv_bytes(
    b: np.ndarray, s: np.ndarray, channels: np.ndarray, d_conv: np.ndarray, decode: bool
) -> np.ndarray:
    nbytes = 2 * BF16_BYTES * channels * b * s
    if decode:
        nbytes = nbytes + 2 * BF16_BYTES * (d_conv - 1) * channels * b
    return nbytes


#: the collector whose GDN rows convolve the key channels only (TensorRT-LLM's
#: ``collect_gdn.py``: ``conv_channels = num_k_heads * head_k_dim``, "q/v bypass conv") and
#: keep the recurrent state in bf16 (``gdn_state`` dtype bf16, as its serving decode kernel)
KEYS_ONLY_CONV = "TRTLLM"


def _keys_only(cols: Columns) -> np.ndarray:
    n = len(next(iter(cols.values())))
    return np.asarray(cols.get("framework", np.full(n, ""))).astype(str) == KEYS_ONLY_CONV


def conv_channels(cols: Columns) -> np.ndarray:
    """Channels a GDN / KDA table's convolution rows convolve: the layer's q, k and v
    (``2 nk dk + nv dv``, the serving kernels') — the key channels alone in the tables of
    :data:`KEYS_ONLY_CONV` (their rows take the same time at 16 and 64 value heads)."""
    nk, dk, nv, dv = _delta_dims(cols)
    return np.where(_keys_only(cols), nk * dk, 2 * nk * dk + nv * dv)


def _delta(decode: bool):
    """Features of the GDN / KDA tables (``decode``: one new token per sequence)."""

    def feats(cols: Columns) -> Features:
        b = _f(cols, "batch_size")
        s = np.ones_like(b) if decode else _f(cols, "seq_len")
        nk, dk, nv, dv = _delta_dims(cols)
        conv = is_conv(row_kernels(cols))
        channels = conv_channels(cols)
        cb = _conv_bytes(b, s, channels, _f(cols, "d_conv"), decode)
        t = b * s
        state = nv * dk * dv * np.where(_keys_only(cols), BF16_BYTES, FP32_BYTES)
        if decode:
            rf = np.zeros_like(b)  # CUDA cores
            rb = 2 * b * state + BF16_BYTES * t * (2 * nk * dk + 2 * nv * dv)
        else:
            rf = t * nv * (4 * dk * dv + 2 * CHUNK * (2 * dk + dv))
            rb = BF16_BYTES * t * (2 * nk * dk + 2 * nv * dv) + np.ceil(s / CHUNK) * b * state
        coords = [_l2(b), _l2(nk), _l2(nv), PATH_COORD * conv]
        if not decode:
            coords.insert(1, _l2(s))
        # the convolution and the decode update run on CUDA cores, not tensor cores: their
        # arithmetic is not charged at the tensor peak (module docstring)
        cuda_cores = conv | decode
        # the delta rule: one block per (sequence, value head) walks its chunks in order
        # (decode: one step), paid once per wave of blocks over the SMs; the conv: a cost
        # per sequence and channel (CONV_SETUP), in one wave
        return WaveFeatures(
            flops=np.where(cuda_cores, 0.0, rf),
            nbytes=np.where(conv, cb, rb),
            work=np.where(conv, b * channels, np.ceil(s / CHUNK)),
            fp8=np.zeros(len(b), bool),
            tokens=t,
            coords=np.stack(coords, 1),
            ctas=np.where(conv, 1.0, b * nv),
        )

    return feats


def _mamba2_conv(decode: bool):
    """Features of Mamba-2's causal convolution (the only kernel of NVIDIA's Mamba-2 table)."""

    def feats(cols: Columns) -> Features:
        b = _f(cols, "batch_size")
        s = np.ones_like(b) if decode else _f(cols, "seq_len")
        channels = _f(cols, "nheads") * _f(cols, "head_dim") + 2 * _f(cols, "n_groups") * _f(
            cols, "d_state"
        )
        nbytes = _conv_bytes(b, s, channels, _f(cols, "d_conv"), decode)
        coords = [_l2(b), _l2(channels)]  # CONV_SETUP: work per sequence and channel
        if not decode:
            coords.insert(1, _l2(s))
        return Features(
            flops=np.zeros(len(b)),  # CUDA cores (module docstring)
            nbytes=nbytes,
            work=b * channels,
            fp8=np.zeros(len(b), bool),
            tokens=b * s,
            coords=np.stack(coords, 1),
        )

    return feats


def mhc_features(cols: Columns) -> Features:
    """DeepSeek-V4's manifold-constrained hyper-connections (``pre``: mix the ``hc_mult``
    residual streams into one layer input — a ``hc_mult H -> hc_mult (2 + hc_mult)`` projection
    and ``sinkhorn_iters`` Sinkhorn steps on a ``hc_mult x hc_mult`` matrix per token; ``post``:
    write the layer output back into the streams). Bytes: the streams read (``pre``) or read
    and written (``post``) in bf16, per site. Work: the engines launch one thread block per
    token (SGLang / vLLM ``mhc_pre_big_fuse_tilelang``: ``T.Kernel(num_tokens, threads=96)``;
    the post kernel's ``grid = (num_tokens,)``), each walking that token's ``hc_mult x H``
    stream values serially — so a block's work is ``hc_mult H`` per site, paid once per wave
    of tokens over the SMs (:class:`WaveFeatures`): below one wave the time grows with the
    hidden size, not the token count (H100 rows: 6.0 us at H 4096, 8.2 us at 7168, flat to
    128 tokens)."""
    t, h, m = _f(cols, "num_tokens"), _f(cols, "hidden_size"), _f(cols, "hc_mult")
    sites = _f(cols, "num_sites")
    post = np.asarray(cols["mhc_op"]).astype(str) == "post"
    pre_flops = 2 * t * m * h * m * (2 + m) + t * _f(cols, "sinkhorn_iters") * 4 * m * m
    post_flops = 2 * t * m * h * (1 + m)
    pre_bytes = BF16_BYTES * t * h * (m + 1)
    post_bytes = BF16_BYTES * t * h * (2 * m + 1)
    return WaveFeatures(
        flops=sites * np.where(post, post_flops, pre_flops),
        nbytes=sites * np.where(post, post_bytes, pre_bytes),
        work=sites * m * h,
        ctas=t,
        fp8=np.zeros(len(t), bool),
        tokens=t,
        coords=np.stack([_l2(t), _l2(h)], 1),
    )
