"""Run NVIDIA's measured kernel-table shapes on this device with moeplan's own kernels.

Three-way comparison: for rows of the shipped tables (``moeplan/data/measured/
kernels/<gpu>/...``, read through :func:`moeplan.kernel_tables.kernels_dir`), measure the same
shape here and keep the table's latency beside ours; moeplan's predictions are added on any
machine afterwards (``bench/gpu_vs_tables.py``), so GPU time is spent on measuring only.

What is compared with what (the kernels are comparable, not identical):

- ``moe`` (SGLang ``sglang_fused_moe_triton``, bf16, balanced): our routed-expert path
  :func:`moeplan.runtime.kernels.grouped_moe` — permutation, row gather, grouped SwiGLU
  (``torch._grouped_mm`` on Hopper), weighted combine. Like the table, the router GEMM is not
  timed. An EP rank of the table (``moe_ep_size > 1``) sees all ``num_tokens`` tokens routed
  over all experts and keeps the pairs of its ``num_experts / ep`` local experts (the others
  are ``-1`` pads its permutation skips); TP splits ``inter_size``.
- ``context_attention`` (FlashAttention-3 in the table) and ``generation_attention``
  (decode, ``ctx = isl + step`` keys, FA3/FlashInfer): PyTorch's
  ``scaled_dot_product_attention`` (FlashAttention-2 backend on CUDA for these head dims),
  causal for prefill, GQA by ``enable_gqa``, contiguous KV (no paging). Rows with a sliding
  window or head_dim > 256 are not sampled (SDPA's flash path has neither).

Rows are sampled per shape family, seeded, so two runs measure the same rows.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from moeplan.profiling import microbench as mb
from moeplan.profiling.timing import median_time, random_inputs
from moeplan.runtime import kernels as K

MOE_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
MAX_KV_BYTES = 4 * 2**30  # decode rows whose contiguous KV would exceed this are skipped
#: (tp, ep) splits sampled per expert shape: the unsplit layer and typical serving splits
MOE_SPLITS = ((1, 1), (1, 8), (2, 4), (8, 1), (1, 32))


def _table(gpu: str, family: str, engine: str, name: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    from moeplan.kernel_tables import kernels_dir

    base = Path(kernels_dir()) / gpu / family / engine
    paths = sorted(base.glob(f"*/{name}.parquet"))
    if not paths:
        return []
    return pq.read_table(paths[-1]).to_pylist()


def moe_rows(gpu: str = "h100_sxm", engine: str = "sglang") -> list[dict[str, Any]]:
    """bf16 balanced Triton fused-MoE rows at :data:`MOE_SPLITS` and :data:`MOE_TOKENS`."""
    rows = [
        r
        for r in _table(gpu, "moe", engine, "moe_perf")
        if r["moe_dtype"] == "bfloat16"
        and r["distribution"] == "balanced"
        and r["kernel_source"].endswith("fused_moe_triton")
        and (r["moe_tp_size"], r["moe_ep_size"]) in MOE_SPLITS
        and r["num_tokens"] in MOE_TOKENS
    ]
    return sorted(rows, key=_moe_key)


def _moe_key(r: dict[str, Any]) -> tuple:
    return (
        r["hidden_size"],
        r["inter_size"],
        r["topk"],
        r["num_experts"],
        r["moe_tp_size"],
        r["moe_ep_size"],
        r["num_tokens"],
    )


def attention_rows(
    op: str, n: int, gpu: str = "h100_sxm", engine: str = "sglang", seed: int = 0
) -> list[dict[str, Any]]:
    """``n`` seeded bf16 rows of ``context_attention`` / ``generation_attention``, spread over
    head shapes (round robin over shape families), no sliding window, head_dim <= 256."""
    fams: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in _table(gpu, "attention", engine, f"{op}_perf"):
        if (r["attn_dtype"], r["kv_cache_dtype"], r["window_size"]) != ("bfloat16", "bfloat16", 0):
            continue
        if r["head_dim"] > 256 or _kv_bytes(r, op) > MAX_KV_BYTES:
            continue
        fams[(r["num_heads"], r["num_key_value_heads"], r["head_dim"])].append(r)
    rng = random.Random(seed)
    for v in fams.values():
        rng.shuffle(v)
    keys = sorted(fams)
    out: list[dict[str, Any]] = []
    i = 0
    while len(out) < n and any(fams[k] for k in keys):
        k = keys[i % len(keys)]
        if fams[k]:
            out.append(fams[k].pop())
        i += 1
    return out


def _kv_bytes(r: dict[str, Any], op: str) -> float:
    ctx = r["isl"] + (r["step"] if op == "generation_attention" else 0)
    return 2.0 * 2 * r["batch_size"] * ctx * r["num_key_value_heads"] * r["head_dim"]


def _routing(
    tokens: int, k: int, experts: int, local: int, device: torch.device, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Balanced routing over all ``experts``; ids outside ``[0, local)`` become ``-1``."""
    ids, wt = mb._routing(tokens, k, experts, gen, device)
    return torch.where(ids < local, ids, torch.full_like(ids, -1)), wt


def _moe_call(
    x: torch.Tensor, ids: torch.Tensor, wt: torch.Tensor, *, w: list[torch.Tensor]
) -> torch.Tensor:
    return K.grouped_moe(x, ids, wt, *w)


def measure_moe(
    rows: Iterable[dict[str, Any]], *, device: torch.device, gen: torch.Generator, repeats: int = 10
) -> list[dict[str, Any]]:
    """Our grouped MoE at each row's local shape; weights drawn once per shape."""
    by_shape: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_shape[_moe_key(r)[:-1]].append(r)
    out = []
    dtype = mb.bench_dtype(device)
    for (h, inter, k, e, tp, ep), rs in by_shape.items():
        local, i = e // ep, math.ceil(inter / tp)
        w = mb._expert_weights(local, h, i, dtype, device, gen)
        for r in rs:
            t = r["num_tokens"]
            inputs = [
                (x, *_routing(t, k, e, local, device, gen))
                for (x,) in random_inputs([(t, h)], dtype=dtype, device=device, gen=gen)
            ]
            out.append(_timed_row(r, partial(_moe_call, w=w), inputs, device, repeats))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _timed_row(
    r: dict[str, Any], fn: Any, inputs: list, device: torch.device, repeats: int
) -> dict[str, Any]:
    """``r`` with ``fn``'s median time over ``inputs`` (``ours_ms``) and, on CUDA, its
    CUDA-graph replay time (``ours_graph_ms``: kernel time, as the tables are)."""
    row = {**r, "ours_ms": median_time(fn, inputs, device=device, repeats=repeats) * 1e3}
    if device.type == "cuda":
        g = median_time(fn, inputs, device=device, repeats=repeats, graph=True)
        row["ours_graph_ms"] = g * 1e3
    return row


def measure_attention(
    rows: Iterable[dict[str, Any]],
    op: str,
    *,
    device: torch.device,
    gen: torch.Generator,
    repeats: int = 10,
) -> list[dict[str, Any]]:
    """SDPA at each row's shape (decode: one query over ``isl + step`` keys)."""
    dtype = mb.bench_dtype(device)
    out = []
    for r in rows:
        b, hq, hk, d = r["batch_size"], r["num_heads"], r["num_key_value_heads"], r["head_dim"]
        decode = op == "generation_attention"
        q_len = 1 if decode else r["isl"]
        ctx = r["isl"] + r["step"] if decode else r["isl"]
        shapes = [(b, hq, q_len, d), (b, hk, ctx, d), (b, hk, ctx, d)]
        inputs = random_inputs(shapes, dtype=dtype, device=device, gen=gen)

        fn = partial(F.scaled_dot_product_attention, is_causal=not decode, enable_gqa=hq != hk)
        out.append(_timed_row(r, fn, inputs, device, repeats))
        del inputs
    return out


def small_rows(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Table-format rows at CPU-sized shapes (tests, ``calibrate --device cpu``): the same
    columns as NVIDIA's rows, a few shape families, several token counts each."""
    moe = [
        {
            "num_tokens": t,
            "hidden_size": h,
            "inter_size": i,
            "topk": k,
            "num_experts": e,
            "moe_tp_size": 1,
            "moe_ep_size": ep,
        }
        for h, i, k, e, ep in (
            (64, 32, 2, 8, 1),
            (96, 48, 4, 16, 2),
            (128, 64, 2, 8, 2),
            (128, 32, 1, 4, 1),
        )
        for t in (1, 8, 64, 256)
    ]
    heads = ((2, 1, 32), (4, 2, 32), (4, 4, 16), (2, 2, 64), (8, 2, 16))
    ctx = [
        {
            "batch_size": b,
            "isl": s,
            "num_heads": hq,
            "num_key_value_heads": hk,
            "head_dim": d,
            "step": 0,
        }
        for hq, hk, d in heads
        for b, s in ((1, 32), (2, 64), (1, 128))
    ]
    gen = [
        {
            "batch_size": b,
            "isl": 1,
            "num_heads": hq,
            "num_key_value_heads": hk,
            "head_dim": d,
            "step": c - 1,
        }
        for hq, hk, d in heads
        for b, c in ((1, 64), (4, 256), (8, 128))
    ]
    return {"moe": moe, "context_attention": ctx, "generation_attention": gen}


def measure_rows(
    rows: dict[str, list[dict[str, Any]]],
    *,
    device: torch.device,
    gen: torch.Generator,
    repeats: int = 10,
) -> dict[str, list[dict[str, Any]]]:
    """Measure every op's rows (MoE grouped by shape) and add ``ours_s``: the CUDA-graph
    replay time on CUDA (kernel time, as the tables are), the eager time elsewhere."""
    out = {"moe": measure_moe(rows.get("moe", []), device=device, gen=gen, repeats=repeats)}
    for op in ("context_attention", "generation_attention"):
        out[op] = measure_attention(rows.get(op, []), op, device=device, gen=gen, repeats=repeats)
    for rs in out.values():
        for r in rs:
            r["ours_s"] = r.get("ours_graph_ms", r["ours_ms"]) * 1e-3
    return out


def table_rows(n_attention: int = 120) -> dict[str, list[dict[str, Any]]]:
    """NVIDIA's H100 SGLang row shapes measured by ``calibrate --device cuda``."""
    return {
        "moe": moe_rows(),
        **{
            op: attention_rows(op, n_attention)
            for op in ("context_attention", "generation_attention")
        },
    }
