"""Kernel benchmark: grouped MoE and permutation (moeplan.runtime.kernels) vs loop / runtime reference.

On CPU this measures the torch fallbacks; on a CUDA machine with Triton the same rows measure
the Triton kernels (bf16). Ratios are speedups (reference time / kernel time), same run.
Targets (docs/GPU.md) apply on H100/H200 only.
"""

from __future__ import annotations

import torch

from moeplan.profiling import microbench as mb


def run() -> list[dict]:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    gpu = dev.type == "cuda"
    tokens, h, i, e, k = (16384, 4096, 1536, 128, 8) if gpu else (2048, 256, 128, 32, 4)
    rows = []
    grouped = mb.bench_moe(tokens, k, e, h, i, device=dev, gen=gen)
    loop = mb.bench_moe(tokens, k, e, h, i, device=dev, gen=gen, loop=True)
    rows.append(
        {
            "name": f"grouped MoE {tokens} tok, E={e}, k={k}, H={h}, I={i} ({dev.type})",
            "value": grouped * 1e3,
            "unit": "ms",
            "reference": loop * 1e3,
            "ratio": loop / grouped,
            "target": ">= 5x loop at >= 16k tokens (GPU)",
            "note": "reference = per-expert Python loop; ratio = speedup",
        }
    )
    pairs_tokens = 65536 // k if gpu else 16384 // k
    perm = mb.bench_permutation(pairs_tokens, k, e, h, device=dev, gen=gen)
    ref = mb.bench_permutation(pairs_tokens, k, e, h, device=dev, gen=gen, reference=True)
    rows.append(
        {
            "name": f"permute+gather {pairs_tokens * k} pairs, H={h} ({dev.type})",
            "value": perm * 1e3,
            "unit": "ms",
            "reference": ref * 1e3,
            "ratio": ref / perm,
            "target": ">= 50% of copy bandwidth at >= 64k pairs (GPU)",
            "note": "reference = moeplan.runtime.layers.permute; ratio = speedup",
        }
    )
    nbytes = pairs_tokens * k * h * mb.bench_dtype(dev).itemsize
    copy = mb.copy_bandwidth(max(nbytes, 1 << 20), device=dev, gen=gen)
    rows.append(
        {
            "name": "permute+gather bandwidth vs copy ceiling",
            "value": 2 * nbytes / perm / 1e9,
            "unit": "GB/s",
            "reference": copy / 1e9,
            "ratio": 2 * nbytes / perm / copy,
            "target": ">= 0.5 (GPU)",
            "note": "bytes read+written by the gather / copy_ bandwidth",
        }
    )
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
