"""Features of the sparse-attention modules: DSA, DeepSeek-V4 CSA / HCA and MiniMax MSA.

NVIDIA's module tables time a whole attention block on one GPU (``num_heads`` of its heads,
projections included) for ``batch_size`` sequences of ``isl`` new tokens after a prefix of
``step`` cached tokens. Per query the attention core reads only its selected keys:

- **DSA** (DeepSeek-V3.2, GLM-5): the lightning indexer scores *every* cached key
  (``index_n_heads x index_head_dim`` in fp8: FLOPs ``2 ih id keys`` a query) and MLA attends
  the ``index_topk`` best (absorbed latent 576 + 512 a key and head); SGLang's dense-MHA
  prefill kernel (``*_dense_mha_*``) attends every key with the non-absorbed heads instead,
  after decompressing every cached key's latent to per-head K / V;
- **CSA** (DeepSeek-V4, ``compress_ratio`` 4): keys are compressed 4:1; the indexer scores the
  compressed keys and the core attends ``index_topk`` of them plus a sliding window of raw
  keys; **HCA** (ratio 128) attends every compressed key plus the window, no indexer;
- **MSA** (MiniMax-M3): GQA whose index heads score every key and keep ``topk_blocks`` blocks
  of ``block`` keys plus the local block.

Mean keys a query sees with a prefix ``p`` and ``s`` new tokens: ``p + (s + 1) / 2``; capped by
``k`` selected keys the mean is :func:`mean_capped` (exact, per query). Bytes: the projection
weights (``gemm_type`` bytes), the K/V cache once per sequence (the cache dtype) and the
activations in and out; work: one setup per sequence. Cache bytes: the index keys of every
cached key, and the keys the core attends — each query gathers its own selection (capped by
the cache itself); a dense kernel reads the whole cache. The projection weights per GPU are
``shared + h per_head`` from each model's ``config.json`` (:data:`DSA_DIMS`, :data:`DSV4_FLASH`,
:data:`MINIMAX_M3`). Coordinates (log2): batch, new tokens, prefix + 1, heads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from moeplan.cost.kerneldb.attention_features import GEMM_BYTES, _kv_bytes
from moeplan.cost.kerneldb.base import BF16_BYTES, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2
from moeplan.cost.kerneldb.feature_base import PATH_COORD, WaveFeatures, row_kernels

#: architecture -> (hidden, q_lora, kv_lora, rope, nope, v, index heads, index dim, top-k):
#: DeepSeek-V3.2 and GLM-5 ``config.json`` (hidden_size, q_lora_rank, kv_lora_rank,
#: qk_rope_head_dim, qk_nope_head_dim, v_head_dim, index_n_heads, index_head_dim, index_topk)
DSA_DIMS = {
    "DeepseekV32ForCausalLM": (7168, 1536, 512, 64, 128, 128, 64, 128, 2048),
    "GlmMoeDsaForCausalLM": (6144, 2048, 512, 64, 192, 256, 32, 128, 2048),
}
#: DeepSeek-V4-Flash ``config.json``: hidden_size 4096, head_dim 512, q_lora_rank 1024,
#: o_lora_rank 1024, o_groups 8, index_n_heads 64, index_head_dim 128, index_topk 512,
#: sliding_window 128 (the CSA / HCA tables are filtered to this model)
DSV4_FLASH = {
    "hidden": 4096,
    "head_dim": 512,
    "q_lora": 1024,
    "o_lora": 1024,
    "o_groups": 8,
    "index_heads": 64,
    "index_dim": 128,
    "topk": 512,
    "window": 128,
}
#: MiniMax-M3 ``config.json``: hidden_size 6144, 64 heads / 4 KV heads of head_dim 128;
#: sparse_attention_config: sparse_num_index_heads 4, sparse_index_dim 128,
#: sparse_topk_blocks 16, sparse_block_size 128, sparse_local_block 1
MINIMAX_M3 = {
    "hidden": 6144,
    "heads": 64,
    "kv_heads": 4,
    "head_dim": 128,
    "index_heads": 4,
    "index_dim": 128,
    "topk_blocks": 16,
    "block": 128,
    "local_blocks": 1,
}
MLA_LATENT, MLA_V_LATENT = 576, 512
#: FlashMLA's sparse prefill kernel (``flash_mla_sparse_fwd``) runs query heads in tiles of 64,
#: fewer heads padded: DSA prefill rows held out, p90 49 -> 41 % (SGLang), 54 -> 32 % (vLLM);
#: the decode rows fit better unpadded (SGLang p90 32 % vs 36 %), so only prefill pads; the
#: DeepSeek-V4 prefill rows alike (CSA p90 20 -> 15 % SGLang, 43 -> 33 % vLLM)
FLASHMLA_HEADS = 64  # absorbed MLA: key latent 512 + rope 64, value latent 512


def mean_capped(k: np.ndarray | float, p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Mean over the ``s`` new queries (prefix ``p``) of ``min(k, keys of that query)``: query
    ``i`` (1-based) sees ``p + i`` keys."""
    k = np.broadcast_to(np.asarray(k, float), np.shape(p))
    below = np.clip(k - p, 0, s)  # queries that see fewer than k keys
    total = below * p + below * (below + 1) / 2 + (s - below) * k
    return total / np.maximum(s, 1)


#: index of the heads coordinate in the module families' ``coords`` (batch, new tokens,
#: prefix + 1, heads[, path])
HEADS_COORD = 3


def _axes(cols: Columns) -> tuple[np.ndarray, ...]:
    b, s, p = _f(cols, "batch_size"), _f(cols, "isl"), _f(cols, "step")
    return b, s, p, _f(cols, "num_heads"), p + (s + 1) / 2


def _weight_bytes(cols: Columns) -> np.ndarray:
    gemm = np.asarray(cols["gemm_type"]).astype(str)
    return np.array([GEMM_BYTES.get(g, BF16_BYTES) for g in gemm])


def _assemble(
    cols: Columns,
    core_flops: np.ndarray,
    cache_bytes: np.ndarray,
    weights: np.ndarray,
    hidden: np.ndarray | float,
    path: np.ndarray | None = None,
) -> Features:
    b, s, p, h, _ = _axes(cols)
    t = b * s
    coords = [_l2(b), _l2(s), _l2(p + 1), _l2(h)]
    if path is not None:
        coords.append(PATH_COORD * path)
    return Features(
        flops=core_flops + 2 * t * weights,
        nbytes=cache_bytes + weights * _weight_bytes(cols) + 2 * BF16_BYTES * t * hidden,
        work=b,
        fp8=np.zeros(len(b), bool),
        tokens=t,
        coords=np.stack(coords, 1),
    )


def _dsa(cols: Columns) -> Features:
    arch = np.asarray(cols["architecture"]).astype(str)
    dims = np.array([DSA_DIMS.get(a, DSA_DIMS["DeepseekV32ForCausalLM"]) for a in arch], float)
    hid, ql, kvl, rope, nope, v, ih, idim, topk = dims.T
    b, s, p, h, keys = _axes(cols)
    t = b * s
    dense = np.char.find(row_kernels(cols), "dense") >= 0
    sparse = mean_capped(topk, p, s)
    ctx = p + s
    padded = np.ceil(h / FLASHMLA_HEADS) * FLASHMLA_HEADS  # sparse kernels' head tiles
    core = np.where(
        dense,  # + the prefix's latent decompressed to per-head K / V (kv_b on every key)
        2 * t * h * keys * (nope + rope + v) + 2 * b * ctx * kvl * h * (nope + v),
        2 * t * np.where(s > 1, padded, h) * sparse * (MLA_LATENT + MLA_V_LATENT),
    )
    index = 2 * t * ih * idim * keys
    latent = MLA_LATENT * _kv_bytes(cols)  # a key's latent; the sparse kernels gather top-k
    cache = b * ctx * idim + np.where(dense, b * ctx, np.minimum(t * sparse, b * ctx)) * latent
    shared = hid * (ql + kvl + rope) + hid * idim + hid * ih + ql * ih * idim
    per_head = ql * (nope + rope) + kvl * (nope + v) + v * hid
    return _assemble(cols, core + index, cache, shared + h * per_head, hid, dense)


def _dsv4(cols: Columns) -> Features:
    d = DSV4_FLASH
    ratio = _f(cols, "compress_ratio")
    b, s, p, h, keys = _axes(cols)
    t = b * s
    csa = ratio < 16  # CSA (ratio 4) has the indexer, HCA (ratio 128) attends every block
    compressed = keys / ratio
    window = mean_capped(d["window"], p, s)
    attended = np.where(csa, np.minimum(compressed, d["topk"]), compressed) + window
    hd = d["head_dim"]
    heads = np.where(s > 1, np.ceil(h / FLASHMLA_HEADS) * FLASHMLA_HEADS, h)
    core = 2 * t * heads * attended * (2 * hd)
    index = np.where(csa, 2 * t * d["index_heads"] * d["index_dim"] * compressed, 0.0)
    entry = hd * _kv_bytes(cols)  # one compressed / window entry
    stored = b * ((p + s) / ratio + d["window"])
    cache = np.minimum(t * attended, stored) * entry + np.where(
        csa, b * (p + s) / ratio * d["index_dim"], 0.0
    )
    hid = d["hidden"]
    compressor = hid * 2 * hd * np.where(csa, 2.0, 1.0)  # CSA's overlapping windows: 2x
    indexer = np.where(
        csa, d["q_lora"] * d["index_heads"] * d["index_dim"] + hid * d["index_heads"], 0.0
    )
    shared = hid * (d["q_lora"] + hd) + compressor + indexer + d["o_groups"] * d["o_lora"] * hid
    per_head = d["q_lora"] * hd + hd * d["o_lora"]
    return _assemble(cols, core + index, cache, shared + h * per_head, hid)


def _msa(cols: Columns) -> Features:
    """MiniMax-M3's block-sparse attention block on one GPU. Three departures from the other
    modules, each read off NVIDIA's SGLang rows:

    - the core runs each KV head's query heads as one tile (64 heads over 4 KV heads: groups
      of 16), so a GPU holding fewer query heads than a group pays for the group
      (``b`` 1, 4096 new tokens, no prefix: 1.02 / 1.13 / 2.04 / 3.88 ms at 8 / 16 / 32 / 64
      heads — with the KV heads 1 / 1 / 2 / 4, not the query heads);
    - the index heads go with the KV heads (``sparse_num_index_heads`` = ``num_key_value_heads``
      = 4), so a GPU scores with as many index heads as it holds KV heads;
    - the block selection walks every cached key of a sequence serially (one block per
      sequence): at 1M cached keys 21-22 ms whatever the new tokens (1 / 16 / 128) and the
      batch up to 32 sequences — a per-key cost paid once per wave of sequences over the SMs
      (:class:`WaveFeatures`, ``work`` = keys, ``ctas`` = sequences)."""
    d = MINIMAX_M3
    b, s, p, h, keys = _axes(cols)
    t = b * s
    hd, hid = d["head_dim"], d["hidden"]
    group = d["heads"] / d["kv_heads"]
    kv = np.maximum(1.0, np.ceil(h / group))  # KV heads on this GPU
    selected = (d["topk_blocks"] + d["local_blocks"]) * d["block"]
    core = 2 * t * kv * group * mean_capped(selected, p, s) * 2 * hd
    index = 2 * t * kv * d["index_heads"] / d["kv_heads"] * d["index_dim"] * keys
    kv_entry = 2 * kv * hd * _kv_bytes(cols)  # K and V of a key on this GPU
    gathered = np.minimum(t * mean_capped(selected, p, s), b * (p + s)) * kv_entry
    # the index scores read every cached key's K (sglang's MiniMax kernels score blocks from
    # the cache itself: decode rows at 131k keys run at the K bytes of every key)
    cache = gathered + b * (p + s) * kv * hd * _kv_bytes(cols)
    shared = hid * d["index_dim"] * (d["index_heads"] + 1)
    weights = shared + h * 2 * hd * hid + kv * 2 * hd * hid
    f = _assemble(cols, core + index, cache, weights, hid)
    return WaveFeatures(flops=f.flops, nbytes=f.nbytes, work=p + s, ctas=b, fp8=f.fp8,
                        tokens=f.tokens, coords=f.coords)  # fmt: skip


def _sparse_attn(cols: Columns) -> Features:
    """The sparse MLA kernel alone (FlashMLA ``flash_mla_sparse_fwd``; GLM-5's kernel-level
    table): every query attends its ``index_topk`` = 2048 selected latents (GLM-5 and
    DeepSeek-V3.2 config.json), FLOPs ``2 h (576 + 512)`` a selected key, bytes: the gathered
    latents (capped by the cache) and the queries / outputs in bf16."""
    b, s, p, h, _ = _axes(cols)
    t = b * s
    sel = mean_capped(DSA_DIMS["GlmMoeDsaForCausalLM"][-1], p, s)
    cache = np.minimum(t * sel, b * (p + s)) * MLA_LATENT * _kv_bytes(cols)
    return Features(
        flops=2 * t * h * sel * (MLA_LATENT + MLA_V_LATENT),
        nbytes=cache + BF16_BYTES * t * h * (MLA_LATENT + MLA_V_LATENT),
        work=b,
        fp8=np.zeros(len(b), bool),
        tokens=t,
        coords=np.stack([_l2(b), _l2(s), _l2(p + 1), _l2(h)], 1),
    )


SPARSE_FEATURES: dict[str, Callable[[Columns], Features]] = {
    "dsa": _dsa,
    "csa": _dsv4,
    "hca": _dsv4,
    "msa": _msa,
}
