"""Operation families of the newer layer kinds, and the measured tables they are read from.

- ``{context,generation}_gdn``: Gated DeltaNet (Qwen3.5, Qwen3-Next) — NVIDIA's
  ``linear_attention/<engine>/gdn_perf`` for SGLang, vLLM and TensorRT-LLM;
- ``{context,generation}_kda``: Kimi delta attention — ``kda/sglang/kda_perf``;
- ``{context,generation}_mamba2_conv``: Mamba-2's causal convolution —
  ``linear_attention/trtllm/mamba2_perf`` (the table's only kernel);
- ``{context,generation}_dsa_module``: DeepSeek-V3.2 / GLM-5 sparse attention blocks —
  ``sparse_attention/{sglang,vllm}/dsa_*_module_perf`` (the layers that run their own indexer;
  GLM-5's index-sharing ``*_skip_indexer`` rows are left out);
- ``{context,generation}_{csa,hca}_module``: DeepSeek-V4 compressed sparse / heavily
  compressed attention blocks — ``sparse_attention/*/dsv4_{csa,hca}_*_module_perf``, the
  DeepSeek-V4-Flash rows (the model whose dimensions :mod:`.sparse_features` holds);
- ``{context,generation}_msa_module``: MiniMax-M3 sparse attention — ``msa/sglang``;
- ``dsa_sparse_attn``: the sparse MLA kernel alone (FlashMLA ``flash_mla_sparse_fwd``, GLM-5's
  kernel-level ``sparse_attention/sglang/glm5_dsa_attn_module_perf``: one head count, so no
  shape to hold out; its error is the leave-one-GPU-out one on InferSim's H800 rows);
- ``mhc``: DeepSeek-V4's hyper-connection ``pre`` / ``post`` kernels — ``mhc/{sglang,vllm}``.

Features: :mod:`.linear_features` (recurrent mixers, mHC) and :mod:`.sparse_features`. The
GDN / KDA / Mamba-2 tables time a layer as two kernels (convolution, delta rule): each is a
variant (``kernel_source``) of the same op, and the layer's price is their sum
(:mod:`moeplan.cost.mixers`).
"""

from __future__ import annotations

from moeplan.cost.kerneldb.family import Family
from moeplan.cost.kerneldb.linear_features import _delta, _mamba2_conv, mhc_features
from moeplan.cost.kerneldb.sparse_features import HEADS_COORD, SPARSE_FEATURES, _sparse_attn

_DELTA_SHAPE = ("num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "d_conv")
_MAMBA_SHAPE = ("nheads", "head_dim", "n_groups", "d_state", "d_conv")
_MODULE_VARIANT = ("kernel_source", "kv_cache_dtype", "gemm_type")
_MODULE_X = ("batch_size", "isl", "step")
_MODULE_DEFAULTS = {"kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16", "step": 0}
_PHASES = (("context", False), ("generation", True))


#: the recurrent tables' variant columns: the kernel, and the collector (``framework``) —
#: TensorRT-LLM's GDN convolution rows convolve other channels (linear_features.conv_channels)
_LINEAR_VARIANT = ("kernel_source", "framework")


def _linear() -> list[Family]:
    out = []
    for phase, decode in _PHASES:
        x = ("batch_size",) if decode else ("batch_size", "seq_len")
        # coordinates: batch[, seq_len], key heads, value heads, path (GDN / KDA); batch[,
        # seq_len], channels (Mamba-2). Each table holds 4-10 head counts / 5 Mamba-2 shapes:
        # the end ones carry their neighbour's residual (fit.ResidualField)
        heads, channels = len(x) + 1, len(x)
        for kind in ("gdn", "kda"):
            out.append(
                Family(
                    op=f"{phase}_{kind}",
                    variant_cols=_LINEAR_VARIANT,
                    shape_cols=_DELTA_SHAPE,
                    x_cols=x,
                    defaults={},
                    features=_delta(decode),
                    # a block's walk over its chunks is a latency: it moves to another GPU
                    # unscaled and the GPU's SMs set the waves (InferSim's H20 rows)
                    wave_latency_transfers=True,
                    carry_axes=(heads,),
                )
            )
        out.append(
            Family(
                op=f"{phase}_mamba2_conv",
                variant_cols=_LINEAR_VARIANT,
                shape_cols=_MAMBA_SHAPE,
                x_cols=x,
                defaults={},
                features=_mamba2_conv(decode),
                carry_axes=(channels,),
            )
        )
    return out


def _sparse() -> list[Family]:
    out = []
    for phase, _ in _PHASES:
        for kind, features in SPARSE_FEATURES.items():
            variant = (*_MODULE_VARIANT, "architecture") if kind == "dsa" else _MODULE_VARIANT
            shape: tuple[str, ...] = ("num_heads",)
            defaults: dict[str, object] = dict(_MODULE_DEFAULTS)
            if kind in ("csa", "hca"):
                shape = ("num_heads", "compress_ratio")
                # DeepSeek-V4-Flash config.json compress_ratios: 4 (CSA layers), 128 (HCA)
                defaults["compress_ratio"] = 4 if kind == "csa" else 128
            if kind == "dsa":
                defaults["architecture"] = "DeepseekV32ForCausalLM"
            out.append(
                Family(
                    op=f"{phase}_{kind}_module",
                    variant_cols=variant,
                    shape_cols=shape,
                    x_cols=_MODULE_X,
                    defaults=defaults,
                    features=features,
                    robust_field=True,
                    # 4-8 head counts per table: the smallest and largest carry their
                    # neighbour's residual (held out, p90 41 -> 21 % SGLang DSA prefill)
                    carry_axes=(HEADS_COORD,),
                )
            )
    return out


LAYER_FAMILIES: dict[str, Family] = {
    f.op: f
    for f in (
        *_linear(),
        *_sparse(),
        Family(
            op="dsa_sparse_attn",
            variant_cols=("kernel_source", "kv_cache_dtype"),
            shape_cols=("num_heads",),
            x_cols=_MODULE_X,
            defaults={"kv_cache_dtype": "bfloat16", "step": 0},
            features=_sparse_attn,
        ),
        Family(
            op="mhc",
            variant_cols=("kernel_source", "mhc_op"),
            shape_cols=("hidden_size", "hc_mult", "num_sites", "sinkhorn_iters"),
            x_cols=("num_tokens",),
            defaults={},
            features=mhc_features,
        ),
    )
}

_LAT = ("latency",)
_MS = 1e-3  # the tables' ``latency`` is in milliseconds
_DSV4_FLASH = {"model": "sgl-project/DeepSeek-V4-Flash-FP8"}

#: parquet file -> [(op, {our column: table column}, latency column(s), scale to seconds)],
#: merged into :data:`moeplan.kernel_tables.FILES`
LAYER_FILES: dict[str, list[tuple[str, dict[str, str], tuple[str, ...], float]]] = {
    "gdn_perf.parquet": [(f"{p}_gdn", {}, _LAT, _MS) for p, _ in _PHASES],
    "kda_perf.parquet": [(f"{p}_kda", {}, _LAT, _MS) for p, _ in _PHASES],
    "mamba2_perf.parquet": [(f"{p}_mamba2_conv", {}, _LAT, _MS) for p, _ in _PHASES],
    "mhc_module_perf.parquet": [("mhc", {"mhc_op": "op_name"}, _LAT, _MS)],
    "glm5_dsa_attn_module_perf.parquet": [("dsa_sparse_attn", {}, _LAT, _MS)],
    **{
        f"{prefix}_{p}_module_perf.parquet": [(f"{p}_{kind}_module", {}, _LAT, _MS)]
        for p, _ in _PHASES
        for prefix, kind in (
            ("dsa", "dsa"),
            ("dsv4_csa", "csa"),
            ("dsv4_hca", "hca"),
            ("msa", "msa"),
        )
    },
}

#: (file, op) -> {table column: value} a row must have to belong to the op
ROW_FILTERS: dict[tuple[str, str], dict[str, str]] = {
    **{(f"{k}_perf.parquet", f"{p}_{k}"): {"phase": p} for k in ("gdn", "kda") for p, _ in _PHASES},
    **{("mamba2_perf.parquet", f"{p}_mamba2_conv"): {"phase": p} for p, _ in _PHASES},
    **{
        (f"dsa_{p}_module_perf.parquet", f"{p}_dsa_module"): {"op_name": f"dsa_{p}_module"}
        for p, _ in _PHASES
    },
    **{
        (f"dsv4_{k}_{p}_module_perf.parquet", f"{p}_{k}_module"): _DSV4_FLASH
        for k in ("csa", "hca")
        for p, _ in _PHASES
    },
}
