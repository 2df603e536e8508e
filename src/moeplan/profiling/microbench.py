"""Micro-benchmarks: one function per operation, each returning a median time in seconds.

Every function takes the device, a seeded generator and ``repeats``; inputs come from
:func:`~moeplan.profiling.timing.random_inputs` (fresh, rotated). bf16 on CUDA, fp32 on CPU
(CPU bf16 GEMMs are emulated and would calibrate nothing real).

Ceilings — what the kernels are judged against (docs/GPU.md):

- :func:`copy_bandwidth`: device-to-device copy of a large buffer, bytes read + written per
  second;
- :func:`gemm_ceiling`: FLOP/s of a large square GEMM.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from moeplan.profiling.shapes import AttnShape
from moeplan.profiling.timing import median_time, randn, random_inputs
from moeplan.runtime import kernels as K
from moeplan.runtime.kernels import loop_moe


def bench_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def bench_gemm(
    m: int,
    n: int,
    k: int,
    *,
    device: torch.device,
    gen: torch.Generator,
    repeats: int = 10,
    graph: bool | None = None,
) -> float:
    """``[m, k] x [k, n]``; on CUDA as CUDA-graph replays by default (kernel time, as engines
    run decode steps and as the own-kernel rows are timed: eager timing adds the host's
    launch latency, ~10-20 us, which a fitted roofline then reads as every GEMM's floor)."""
    inputs = random_inputs([(m, k), (k, n)], dtype=bench_dtype(device), device=device, gen=gen)
    g = device.type == "cuda" if graph is None else graph
    return median_time(torch.mm, inputs, device=device, repeats=repeats, graph=g)


def bench_attention(
    s: AttnShape, *, device: torch.device, gen: torch.Generator, repeats: int = 10
) -> float:
    """``scaled_dot_product_attention`` (causal for prefill) with GQA/MLA head dims."""
    shapes = [
        (s.num_seqs, s.heads, s.q_len, s.qk_dim),
        (s.num_seqs, s.kv_heads, s.ctx_len, s.qk_dim),
        (s.num_seqs, s.kv_heads, s.ctx_len, s.v_dim),
    ]
    inputs = random_inputs(shapes, dtype=bench_dtype(device), device=device, gen=gen)
    causal, gqa = s.q_len > 1, s.kv_heads != s.heads

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    if device.type != "cuda":
        return median_time(fn, inputs, device=device, repeats=repeats)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # the fused kernels only: the math fallback materialises [seqs, heads, q, ctx] scores
    # (128 GiB at some presets' prefill shapes) and is not what an engine runs
    fused = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    with sdpa_kernel(fused):
        return median_time(fn, inputs, device=device, repeats=repeats)


def _routing(
    tokens: int, k: int, experts: int, gen: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Balanced-in-expectation routing: ``k`` distinct random experts per token."""
    ids = torch.rand(tokens, experts, generator=gen).argsort(dim=1)[:, :k]
    return ids.to(device), torch.rand(tokens, k, generator=gen).to(device)


def _expert_weights(
    experts: int, h: int, i: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> list[torch.Tensor]:
    return [
        randn(*s, dtype=dtype, device=device, gen=gen, scale=s[-2] ** -0.5)
        for s in ((experts, h, i), (experts, h, i), (experts, i, h))
    ]


def bench_expert_ffn(
    tokens_per_expert: int,
    num_experts: int,
    h: int,
    i: int,
    *,
    device: torch.device,
    gen: torch.Generator,
    repeats: int = 10,
) -> float:
    """Grouped SwiGLU of ``num_experts`` experts with ``tokens_per_expert`` sorted rows each."""
    dtype = bench_dtype(device)
    w = _expert_weights(num_experts, h, i, dtype, device, gen)
    counts = torch.full((num_experts,), tokens_per_expert, dtype=torch.long, device=device)
    inputs = random_inputs(
        [(tokens_per_expert * num_experts, h)], dtype=dtype, device=device, gen=gen
    )
    return median_time(
        lambda x: K.grouped_swiglu(x, counts, *w), inputs, device=device, repeats=repeats
    )


def bench_moe(
    tokens: int,
    k: int,
    num_experts: int,
    h: int,
    i: int,
    *,
    device: torch.device,
    gen: torch.Generator,
    repeats: int = 5,
    loop: bool = False,
    graph: bool = False,
) -> float:
    """Routed experts of one layer (permute, gather, grouped SwiGLU, combine) or the loop;
    ``graph``: replays of a captured CUDA graph (see :func:`median_time`)."""
    dtype = bench_dtype(device)
    w = _expert_weights(num_experts, h, i, dtype, device, gen)
    inputs = [
        (x, *_routing(tokens, k, num_experts, gen, device))
        for (x,) in random_inputs([(tokens, h)], dtype=dtype, device=device, gen=gen)
    ]
    fn = loop_moe if loop else K.grouped_moe
    return median_time(
        lambda x, ids, wt: fn(x, ids, wt, *w),
        inputs,
        device=device,
        repeats=repeats,
        graph=graph,
    )


def bench_permutation(
    tokens: int,
    k: int,
    num_experts: int,
    h: int,
    *,
    device: torch.device,
    gen: torch.Generator,
    repeats: int = 10,
    reference: bool = False,
) -> float:
    """Index build + row gather of ``tokens x k`` token-expert pairs of width ``h``."""
    from moeplan.runtime.layers import permute as ref

    mod = ref if reference else K
    inputs = [
        (x, *_routing(tokens, k, num_experts, gen, device))
        for (x,) in random_inputs([(tokens, h)], dtype=bench_dtype(device), device=device, gen=gen)
    ]

    def fn(x: torch.Tensor, ids: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
        return mod.gather_rows(x, mod.permute(ids, wt, num_experts))

    return median_time(fn, inputs, device=device, repeats=repeats)


def copy_bandwidth(
    nbytes: int, *, device: torch.device, gen: torch.Generator, repeats: int = 10
) -> float:
    """Device-to-device copy ceiling in bytes/s (read + write counted)."""
    n = max(1, nbytes // 4)
    inputs = [
        (a, torch.empty_like(a))
        for (a,) in random_inputs([(n,)], dtype=torch.float32, device=device, gen=gen, copies=2)
    ]
    t = median_time(lambda a, b: b.copy_(a), inputs, device=device, repeats=repeats)
    return 2.0 * n * 4 / t


def gemm_ceiling(
    size: int, *, device: torch.device, gen: torch.Generator, repeats: int = 10
) -> float:
    """FLOP/s of a ``size``-cubed GEMM (bf16 on CUDA, fp32 on CPU)."""
    return 2.0 * size**3 / bench_gemm(size, size, size, device=device, gen=gen, repeats=repeats)
