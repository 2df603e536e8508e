"""Operation families: which columns name a shape, and the work each row does.

For each family the analytic model (:mod:`.fit`) needs, per row, the FLOPs, the bytes moved
(HBM for kernels, the intra-node link for communication), a per-row *work* count charged at a
fixed cost each (tokens routed and permuted on every EP rank; sequences an attention kernel
sets up), and smooth coordinates (log2 of the shape) in which neighbouring measurements are
compared. This module holds the :class:`Family` record and the :data:`KERNEL_FAMILIES` registry; the
feature functions and their formulas, constants and evidence live with their ops:

- ``moe`` (fused MoE on the busiest EP rank): :mod:`.moe_features`; TRT-LLM's wide-EP MoE
  on the rank's weight slots (``trtllm_wideep_moe``): :mod:`.wideep_features`;
- ``context_attention``, ``generation_attention``, ``context_mla``, ``generation_mla`` and
  ``{context,generation}_mla_module``: :mod:`.attention_features`;
- ``allreduce`` (engine custom all-reduce, ``m`` bf16 elements on ``n`` GPUs):
  link bytes ``2 (n-1)/n 2 m``;
- ``deepep_{normal,ll}_{dispatch,combine}`` (8 ranks in one node): normal kernels send each
  token once per *destination rank* (expected distinct ranks among its top-k experts),
  low-latency kernels once per *expert*; dispatch in fp8 (1 byte/element), combine in bf16
  (both in :mod:`.comm`).

- the newer layer kinds (Gated DeltaNet, KDA, Mamba-2's convolution, DSA / CSA / HCA / MSA
  attention modules, mHC): :mod:`.layer_families` (features in :mod:`.linear_features` and
  :mod:`.sparse_features`), merged into :data:`KERNEL_FAMILIES`.

The :class:`Family` record is :mod:`.family`. What the feature modules share
(:class:`WaveFeatures`, the kernel-path coordinate step, the SM-count column) is
:mod:`.feature_base`. Their constants and the functions other code
imports are re-exported here, so ``from moeplan.cost.kerneldb.families import ...`` keeps
working.
"""

from __future__ import annotations

import dataclasses

from moeplan.cost.kerneldb.attention_features import (  # noqa: F401
    DSV3_HIDDEN,
    DSV3_Q_LORA,
    FLASH_TILE_Q,
    FMHA_V2_TILE_Q,
    GEMM_BYTES,
    MLA_KV_LORA,
    MLA_LATENT,
    MLA_QK,
    MLA_ROPE,
    MLA_V,
    MMHA_BLOCK_WORK,
    MMHA_KV_SHARE,
    TRITON_MLA,
    TRITON_MLA_BLOCK_H,
    TRITON_MLA_SETUP_KEYS,
    TRITON_MLA_SPLITS,
    TRTLLM_ATTENTION,
    TRTLLM_MLA,
    TRTLLM_MLA_HEAD_BLOCK,
    XQA_HISTORY_PER_BLOCK,
    XQA_MAX_GROUP,
    XQA_MIN_BLOCK_FACTOR,
    _context_attention,
    _context_mla,
    _generation_attention,
    _generation_mla,
    _module,
    _xqa_declines,
)
from moeplan.cost.kerneldb.base import BF16_BYTES, Columns, Features  # noqa: F401
from moeplan.cost.kerneldb.comm import DEEPEP_RANKS, _allreduce, _deepep, dest_ranks  # noqa: F401
from moeplan.cost.kerneldb.family import Family
from moeplan.cost.kerneldb.feature_base import PATH_COORD, SM_COUNT_COLUMN, WaveFeatures  # noqa: F401
from moeplan.cost.kerneldb.layer_families import LAYER_FAMILIES
from moeplan.cost.kerneldb.moe_features import (  # noqa: F401
    EXPLICIT,
    FP8_COMPUTE,
    LEGACY_LOAD_KERNELS,
    MOE_LIBRARIES,
    MOE_LIBRARY_PREFIXES,
    TACTIC_TOKEN_WEIGHT,
    VECTOR_ELEMS,
    WEIGHT_BYTES,
    WORK_HIDDEN,
    _moe,
    moe_kernel_class,
)
from moeplan.cost.kerneldb.wideep_features import _trtllm_wideep

DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}


_ATTN_VARIANT = ("kernel_source", "attn_dtype", "kv_cache_dtype")
_ATTN_SHAPE = ("num_heads", "num_key_value_heads", "head_dim", "window_size")
_ATTN_DEFAULTS = {
    "attn_dtype": "bfloat16",
    "kv_cache_dtype": "bfloat16",
    "window_size": 0,
    "step": 0,
}
_MLA_VARIANT = ("kernel_source", "mla_dtype", "kv_cache_dtype")
_MLA_DEFAULTS = {"mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "step": 0}
_DEEPEP_SHAPE = ("hidden_size", "num_topk", "num_experts")

_MOE_SHAPE = (
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "distribution",
)
_MOE_DEFAULTS = {"moe_tp_size": 1, "moe_ep_size": 1}
_MLA_PHASES = (  # (phase, core features, x columns) of the MLA module families
    ("context", _context_mla, ("batch_size", "isl")),
    ("generation", _generation_mla, ("batch_size", "isl", "step")),
)


def _moe_family(op: str, **defaults: object) -> Family:
    """A family with the fused-MoE columns and features (``defaults`` fill the columns its
    table does not have, e.g. the MLP module's one expert of top-1)."""
    return Family(
        op=op,
        variant_cols=("kernel_source", "moe_dtype"),
        shape_cols=_MOE_SHAPE,
        x_cols=("num_tokens",),
        defaults={**_MOE_DEFAULTS, **defaults},
        features=_moe,
    )


def _mla_modules(prefix: str, gemm_type: str) -> tuple[Family, ...]:
    """The context and generation MLA module families (projections in ``gemm_type``)."""
    return tuple(
        Family(
            op=f"{prefix}{phase}_mla{'_module' if not prefix else ''}",
            variant_cols=(*_MLA_VARIANT, "gemm_type"),
            shape_cols=("num_heads",),
            x_cols=x_cols,
            defaults={**_MLA_DEFAULTS, "gemm_type": gemm_type},
            features=_module(core, absorbed=phase == "generation"),
        )
        for phase, core, x_cols in _MLA_PHASES
    )


KERNEL_FAMILIES: dict[str, Family] = {
    f.op: f
    for f in (
        dataclasses.replace(
            _moe_family("moe", moe_dtype="bfloat16", distribution="balanced"),
            tactic_kernels=("moe_torch_flow",),  # TRT-LLM's MoE, autotuned per shape
        ),
        # SGLang's DeepEP MoE (DeepGEMM grouped GEMM on the rank's local experts, emulated
        # on one GPU; dispatch / combine are the deepep_* families): same columns as ``moe``,
        # num_tokens = every token entering the EP group, latency of the busiest-loaded rank
        # 0 (wideep_{context,generation}_moe_perf, SGLang 0.5.10). Context = contiguous
        # grouped GEMM after DeepEP normal; generation = masked grouped GEMM after DeepEP LL.
        *(
            _moe_family(f"wideep_{phase}_moe", moe_dtype="fp8_block", distribution="uniform")
            for phase in ("context", "generation")
        ),
        # SGLang's DeepSeek-V3 MLP module in a wide-EP deployment (0.5.6.post2
        # wideep_{context,generation}_mlp_perf: hidden 7168, intermediate 2048, fp8_block —
        # the shared expert's shape): a gated MLP is one expert holding every token, so the
        # MoE features with top-1 of one expert on one rank
        *(
            _moe_family(
                f"wideep_{phase}_mlp",
                moe_dtype="fp8_block",
                topk=1,
                num_experts=1,
                distribution="balanced",
            )
            for phase in ("context", "generation")
        ),
        Family(
            op="context_attention",
            variant_cols=_ATTN_VARIANT,
            shape_cols=_ATTN_SHAPE,
            x_cols=("batch_size", "isl"),
            defaults=_ATTN_DEFAULTS,
            features=_context_attention,
            wave_latency_transfers=True,  # a prefill block's latency: same on A100 and H100
        ),
        Family(
            op="generation_attention",
            variant_cols=_ATTN_VARIANT,
            shape_cols=_ATTN_SHAPE,
            x_cols=("batch_size", "isl", "step"),
            defaults=_ATTN_DEFAULTS,
            features=_generation_attention,
        ),
        Family(
            op="context_mla",
            variant_cols=_MLA_VARIANT,
            shape_cols=("num_heads",),
            x_cols=("batch_size", "isl"),
            defaults=_MLA_DEFAULTS,
            features=_context_mla,
            robust_field=True,
        ),
        Family(
            op="generation_mla",
            variant_cols=_MLA_VARIANT,
            shape_cols=("num_heads",),
            x_cols=("batch_size", "isl", "step"),
            defaults=_MLA_DEFAULTS,
            features=_generation_mla,
            robust_field=True,
            # A100 vLLM 0.14: ~300 us whatever the shape, and max(floor, kernel) beyond it
            host_floor_kernels=(TRITON_MLA,),
        ),
        *_mla_modules("", "bfloat16"),
        # SGLang's MLA block of a wide-EP deployment (attention DP: all heads on the rank,
        # projections in fp8_block, fp8 KV cache; wideep_{context,generation}_mla_perf 0.5.10)
        *_mla_modules("wideep_", "fp8_block"),
        Family(
            op="allreduce",
            variant_cols=("kernel_source",),
            shape_cols=("num_gpus",),
            x_cols=("message_size",),
            defaults={},
            features=_allreduce,
            link=True,
        ),
        *(
            Family(
                op=f"deepep_{kind}_{direction}",
                variant_cols=("sms",) if kind == "normal" else (),
                shape_cols=_DEEPEP_SHAPE,
                x_cols=("num_token",),
                defaults={},
                # normal kernels: per destination rank; dispatch in fp8, combine in bf16
                features=_deepep(kind == "normal", 1.0 if direction == "dispatch" else BF16_BYTES),
                link=True,
            )
            for kind in ("normal", "ll")
            for direction in ("dispatch", "combine")
        ),
    )
}
KERNEL_FAMILIES.update(LAYER_FAMILIES)  # the newer layer kinds (:mod:`.layer_families`)
# TRT-LLM's wide-EP MoE (CUTLASS on the rank's weight slots, moe/trtllm/1.3.0rc10
# wideep_moe_perf): the fused-MoE columns plus num_slots (:mod:`.wideep_features`)
KERNEL_FAMILIES["trtllm_wideep_moe"] = Family(
    op="trtllm_wideep_moe",
    variant_cols=("kernel_source", "moe_dtype"),
    shape_cols=(*_MOE_SHAPE, "num_slots"),
    x_cols=("num_tokens",),
    defaults=dict(_MOE_DEFAULTS),
    features=_trtllm_wideep,
)

OPS = tuple(KERNEL_FAMILIES)
