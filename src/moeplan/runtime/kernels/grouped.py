"""Grouped SwiGLU experts over expert-sorted rows, and the whole routed-expert path.

:func:`grouped_swiglu` computes ``(silu(x Wg_e) * x Wu_e) Wd_e`` for rows sorted by expert
``e`` (``counts [E]`` rows each) with one GEMM launch per projection, never a Python loop over
experts:

- CUDA, bf16, ``torch._grouped_mm`` present (Hopper+): the ragged grouped GEMM with
  ``offs = cumsum(counts)`` — no padding.
- otherwise: rows packed into a ``[E, cap, H]`` buffer and ``torch.bmm`` (``method="bmm"``),
  which pays for padding when the load is skewed;
- ``method="segment"``: one ``mm`` per non-empty expert (a Python loop; cheaper on CPU when
  the load is very skewed).

:func:`grouped_moe` chains :func:`~moeplan.runtime.kernels.permute.permute`, ``gather_rows``,
:func:`grouped_swiglu` and ``combine`` — the routed-expert part of an MoE layer for any k per
token (``ids [T, K]`` with ``-1`` pads). Reference: :mod:`moeplan.runtime.layers.moe`.

On CUDA with Triton and the ragged GEMM (:func:`_fused_ragged_moe`) it runs without a host
synchronisation: rows are laid out for all ``T*K`` slots (the valid ones first, sorted by
expert; the grouped GEMM stops at ``offs[-1]``, so the tail is never computed or read), the
permutation's ``token_index``/``expert``/``weight`` arrays are not built (the combine reads
each slot's weight where the router left it). The H100 profile of the eager path showed the
index build's host sync and ~30 small launches costing 0.8 ms per layer whatever the batch —
22x SGLang's fused kernel at one token. Without the sync the layer is capturable in a CUDA
graph (what engines do for decode batches); ``bench/gpu_session.py`` times both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from moeplan.runtime.kernels.permute import combine, gather_rows, permute

Weights = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor
]  # w_gate, w_up [E, H, I]; w_down [E, I, H]


def swiglu(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """Dense SwiGLU MLP ``(silu(x Wg) * x Wu) Wd``."""
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def _ragged_ok(x: torch.Tensor, w: torch.Tensor) -> bool:
    return (
        x.is_cuda
        and x.dtype == torch.bfloat16
        and w.dtype == torch.bfloat16
        and hasattr(torch, "_grouped_mm")
    )


def _ragged(x: torch.Tensor, counts: torch.Tensor, w: Weights) -> torch.Tensor:
    mm = torch._grouped_mm  # type: ignore[attr-defined]
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = F.silu(mm(x, w[0], offs=offs)) * mm(x, w[1], offs=offs)
    return mm(h, w[2], offs=offs)


def _padded(x: torch.Tensor, counts: torch.Tensor, w: Weights) -> torch.Tensor:
    num_experts = counts.numel()
    expert = torch.repeat_interleave(
        torch.arange(num_experts, device=x.device), counts, output_size=x.shape[0]
    )
    pos = torch.arange(x.shape[0], device=x.device) - (torch.cumsum(counts, 0) - counts)[expert]
    padded = x.new_zeros(num_experts, int(counts.max()), x.shape[1])
    padded[expert, pos] = x
    h = F.silu(torch.bmm(padded, w[0])) * torch.bmm(padded, w[1])  # [E, cap, I]
    return torch.bmm(h, w[2])[expert, pos]  # [N, H]


def _segment(x: torch.Tensor, counts: torch.Tensor, w: Weights) -> torch.Tensor:
    out = x.new_empty(x.shape[0], w[2].shape[2])
    start = 0
    for e, c in enumerate(counts.tolist()):
        if c:
            out[start : start + c] = swiglu(x[start : start + c], w[0][e], w[1][e], w[2][e])
            start += c
    return out


def grouped_swiglu(
    x: torch.Tensor,
    counts: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    *,
    method: str = "bmm",
) -> torch.Tensor:
    """SwiGLU of rows ``x [N, H]`` sorted by expert (``counts [E]`` rows each); weights
    ``[E, H, I]``, ``[E, I, H]``. ``method``: ``bmm`` (ragged on CUDA bf16) or ``segment``."""
    if x.shape[0] == 0:
        return x.new_zeros(0, w_down.shape[2])
    w = (w_gate, w_up, w_down)
    if method == "segment":
        return _segment(x, counts, w)
    if _ragged_ok(x, w_gate):
        return _ragged(x, counts, w)
    return _padded(x, counts, w)


def permuted_rows(
    x: torch.Tensor, ids: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sync-free variable-k permutation on CUDA: ``(rows [T*K, H], pos [T, K], counts [E])``.

    ``rows[:counts.sum()]`` are the valid slots' activations sorted by expert (stable), the
    tail repeats token 0 (never read); ``pos`` is each slot's row (``-1`` for pads)."""
    from moeplan.runtime.kernels._triton import gather_rows_triton
    from moeplan.runtime.kernels.positions import stable_positions

    num_tokens, k = ids.shape
    n = num_tokens * k
    pos, counts = stable_positions(ids.reshape(-1), num_experts)
    token = torch.arange(n, device=x.device) // max(k, 1)
    index = torch.zeros(n + 1, dtype=torch.long, device=x.device)
    index[torch.where(pos >= 0, pos, n)] = token
    return gather_rows_triton(x, index[:n]), pos.view(num_tokens, k), counts


def _fused_ragged_moe(
    x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, w: Weights
) -> torch.Tensor:
    """Sync-free routed experts (CUDA, Triton, bf16 ragged GEMM); see the module docstring."""
    from moeplan.runtime.kernels._triton import combine_triton

    rows, pos, counts = permuted_rows(x, ids, w[0].shape[0])
    y = _ragged(rows, counts, w)
    return combine_triton(y, pos, torch.where(pos >= 0, weights.float(), 0.0))


def grouped_moe(
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
) -> torch.Tensor:
    """Routed experts of one MoE layer: ``x [T, H]``, ``ids/weights [T, K]`` -> ``[T, H]``."""
    from moeplan.runtime.kernels._backend import triton_enabled

    if ids.numel() and triton_enabled(x) and _ragged_ok(x, w_gate):
        return _fused_ragged_moe(x, ids, weights, (w_gate, w_up, w_down))
    perm = permute(ids, weights, w_gate.shape[0])
    rows = gather_rows(x, perm)
    return combine(grouped_swiglu(rows, perm.counts, w_gate, w_up, w_down), perm)


def loop_moe(
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
) -> torch.Tensor:
    """Baseline: one Python iteration per expert (mask, gather, SwiGLU, weighted index_add)."""
    out = torch.zeros_like(x)
    for e in range(w_gate.shape[0]):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel():
            y = swiglu(x[tok], w_gate[e], w_up[e], w_down[e])
            out.index_add_(0, tok, y * weights[tok, slot, None].to(y.dtype))
    return out
