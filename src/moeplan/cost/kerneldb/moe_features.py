"""Fused-MoE features (op ``moe``; the family overview is :mod:`.families`).

SwiGLU on the busiest EP rank (:mod:`.load`):
FLOPs ``6 P H I/tp``, bytes ``hit 3 H (I/tp) w + 4 N H``, work ``N k H`` — every EP rank
writes and combines all ``N k`` routed hidden vectors (with an expert map, Triton's fused MoE
writes zeros for the other ranks' pairs and ``moe_sum`` reads the whole ``N x k x H``
cache); a cost per routed pair regardless of ``H`` fitted worse (held-out p90 up to 2.5
points, docs/benchmarks/kerneldb-moe.md) — ``P`` pairs on the rank, ``hit`` distinct
local experts, ``w`` weight bytes per element (bf16 2, fp8 1, int4 / mxfp4 0.5, nvfp4 0.5625
with its block scales); the FLOPs run at the rate of the dtype (:func:`rate_tier`: NVFP4 on
FP4 tensor cores, FP8 and MXFP4 x MXFP8 at the fp8 rate), each dtype a variant of its own.
``distribution = "explicit"`` takes ``P`` and ``hit`` from the row (a routing trace's
per-expert counts); it sits at the balanced rows' load coordinate, so the residual
field corrects it like a balanced shape with that much work (departure: no table row has a
measured trace load). Power-law rows take the load of the generator their table was
collected with (:data:`LEGACY_LOAD_KERNELS`, :mod:`.load`). Field coordinate: ``I / tp`` not
a multiple of :data:`VECTOR_ELEMS` (Triton specialises integer arguments divisible by 16;
GEMM2's operand rows are ``I / tp`` long: such layers run 1.2-1.8x slower than the aligned
fit in every Triton table, and are corrected by each other).
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb.base import BF16_BYTES, FP4_TIER, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2
from moeplan.cost.kerneldb.feature_base import PATH_COORD, row_kernels
from moeplan.cost.kerneldb.load import busiest_rank_many
from moeplan.errors import MoeplanError

#: weight bytes per element of a ``moe_dtype`` (``w`` above; unknown dtypes count as bf16)
WEIGHT_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0 + 4 / (128 * 128),  # + one fp32 scale per 128x128 block (DeepSeek-V3)
    "int8": 1.0,
    "int8_wo": 1.0,
    "int4_wo": 0.5,
    "w4a16_mxfp4": 0.5,
    "mxfp4": 0.5,
    "int4": 0.5,
    # NVFP4: E2M1 values + one FP8 (E4M3) scale per 16 elements (NVIDIA, "Introducing NVFP4
    # for efficient and accurate low-precision inference"; TensorRT-LLM / FlashInfer
    # ``sf_vec_size = 16``); the per-tensor fp32 scale is negligible
    "nvfp4": 0.5 + 1 / 16,
    # MXFP4 weights, MXFP8 activations: E2M1 values + one E8M0 scale per 32 elements (OCP
    # Microscaling Formats v1.0, block size 32)
    "w4a8_mxfp4_mxfp8": 0.5 + 1 / 32,
}
#: ``moe_dtype`` values whose GEMMs run at the fp8 rate (MXFP4 x MXFP8: Blackwell's mixed
#: FP4 x FP8 tensor-core MMA runs at the FP8 rate, CUTLASS ``tcgen05`` f8f6f4 kinds)
FP8_COMPUTE = {"fp8", "fp8_block", "w4a8_mxfp4_mxfp8"}
#: dtypes whose GEMMs run on FP4 tensor cores (both operands FP4: NVFP4 weights and
#: activations); a GPU without them (:attr:`~.device.Device.flops_fp4`) reads its fp8 peak
FP4_COMPUTE = {"nvfp4"}


def rate_tier(dtype: np.ndarray) -> np.ndarray:
    """Each row's tensor rate tier (:attr:`~.base.Features.fp8`) from its GEMM dtype."""
    d = np.asarray(dtype).astype(str)
    return np.where(np.isin(d, list(FP4_COMPUTE)), FP4_TIER, np.isin(d, list(FP8_COMPUTE)))


#: ``distribution`` of a row whose busiest-rank load is given (``rank_pairs``, ``rank_hit``:
#: per-expert counts from a routing trace, optionally after EPLB, see :func:`.load.eplb_busiest`)
EXPLICIT = "explicit"
#: fused-MoE kernels whose tables were collected with aiconfigurator's earlier power-law
#: generator (:func:`.load._legacy_fix`): vLLM 0.14 and TRT-LLM 1.0 on A100 (their 1-token
#: power-law rows keep every routed pair on one rank up to E / ep = k; A100 SGLang 0.5.10 and
#: every H100 table fall with EP as the balanced rows do)
LEGACY_LOAD_KERNELS = ("vllm_fused_moe", "moe_torch_flow")
#: kernel library of a fused-MoE ``kernel_source`` (TRT-LLM's torch-flow MoE is its CUTLASS
#: grouped GEMM: 1.3 names it ``moe_torch_flow_cutlass``, 1.0 ``moe_torch_flow``; vLLM 0.14's
#: ``vllm_fused_moe`` is the Triton fused MoE that 0.24 names ``..._triton_tritonexperts``)
MOE_LIBRARIES = ("marlin", "triton", "cutlass")
MOE_LIBRARY_PREFIXES = {"vllm_fused_moe": "triton", "moe_torch_flow": "cutlass"}


def moe_kernel_class(kernel: str) -> str:
    """``library[/nongated]`` of a fused-MoE kernel: like-for-like kernels share it."""
    lib = next((name for name in MOE_LIBRARIES if name in kernel), "")
    lib = lib or next((v for p, v in MOE_LIBRARY_PREFIXES.items() if kernel.startswith(p)), kernel)
    return lib + ("/nongated" if "nongated" in kernel else "")


#: hidden elements per unit of MoE routing work (scale only: keeps the per-work cost near the
#: fit's starting guess)
WORK_HIDDEN = 4096
VECTOR_ELEMS = 16  # Triton specialises arguments divisible by 16 (vectorised loads)
#: residual-field distance weight of the token axis for kernels that pick a tactic per shape
#: (``Family.tactic_kernels``, fit.py docstring): neighbours are then other shapes
TACTIC_TOKEN_WEIGHT = 3.0


def _moe(cols: Columns) -> Features:
    n, h = _f(cols, "num_tokens"), _f(cols, "hidden_size")
    inter = _f(cols, "inter_size") / _f(cols, "moe_tp_size")
    e, k, ep = _f(cols, "num_experts"), _f(cols, "topk"), _f(cols, "moe_ep_size")
    dist = np.asarray(cols["distribution"]).astype(str)
    pairs, hit = np.empty(len(n)), np.empty(len(n))
    explicit = dist == EXPLICIT
    if explicit.any() and not {"rank_pairs", "rank_hit"} <= set(cols):
        raise MoeplanError(
            f"distribution ({EXPLICIT!r}) needs rank_pairs and rank_hit "
            "(per-expert counts, see moeplan cost --expert-counts)"
        )
    if (~explicit).any():
        legacy = np.isin(row_kernels(cols), LEGACY_LOAD_KERNELS)[~explicit]
        pairs[~explicit], hit[~explicit] = busiest_rank_many(
            n[~explicit], e[~explicit], k[~explicit], ep[~explicit], dist[~explicit], legacy
        )
    if explicit.any():
        pairs[explicit] = np.asarray(cols["rank_pairs"], float)[explicit]
        hit[explicit] = np.asarray(cols["rank_hit"], float)[explicit]
    dtype = np.asarray(cols["moe_dtype"]).astype(str)
    wbytes = np.array([WEIGHT_BYTES.get(d, BF16_BYTES) for d in dtype])
    code = np.array(
        [
            0.0
            if d in ("balanced", "uniform", "random", EXPLICIT)
            else 3.0 - 4.0 * (float(d.rsplit("_", 1)[-1]) - 1.0)
            for d in dist
        ]
    )
    unaligned = PATH_COORD * (np.mod(inter, VECTOR_ELEMS) != 0)
    coords = np.stack(
        [_l2(n), _l2(h), _l2(inter), _l2(e / ep), _l2(k), _l2(ep), code, unaligned], 1
    )
    return Features(
        flops=6.0 * pairs * h * inter,
        nbytes=hit * 3 * h * inter * wbytes + 2 * BF16_BYTES * n * h,
        work=n * k * h / WORK_HIDDEN,
        fp8=rate_tier(dtype),
        tokens=n,
        coords=coords,
    )
