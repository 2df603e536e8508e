"""Variable-k permutation (SMIDT's dynamic top-k), row gather and weighted combine.

Drop-in replacements for the reference in :mod:`moeplan.runtime.layers.permute` (same
:class:`Permutation`, same row order: stable by expert), built on
:func:`~moeplan.runtime.kernels.positions.stable_positions`. The reference uses them on CUDA
when Triton is present; tests compare them with the reference on CPU.

- :func:`permute`: one counting-sort pass instead of ``nonzero`` + ``argsort`` + scatter; the
  padded slots (``-1``, tokens with fewer experts) are dropped by writing them to a spare row.
- :func:`gather_rows`: ``x[token_index]`` (Triton row copy on CUDA).
- :func:`combine`: on CUDA a Triton *gather* over each token's ``k`` rows via
  ``inverse [T, K]`` (deterministic, no atomics); elsewhere the reference's ``index_add_``
  scatter. Both accumulate in fp32 (the reference accumulates in the activation dtype), so bf16
  is at least as accurate (tests allow 1e-2 relative).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moeplan.runtime.kernels._backend import triton_enabled
from moeplan.runtime.kernels.positions import stable_positions


@dataclass(frozen=True, kw_only=True, slots=True)
class Permutation:
    """Rows sorted by expert.

    ``token_index [N]``: source token of row n; ``expert [N]``: its expert (non-decreasing);
    ``weight [N]``: its routing weight; ``counts [E]``: rows per expert; ``inverse [T, K]``:
    row of slot (t, k), ``-1`` for unused slots; ``num_tokens``: T.
    """

    token_index: torch.Tensor
    expert: torch.Tensor
    weight: torch.Tensor
    counts: torch.Tensor
    inverse: torch.Tensor
    num_tokens: int

    @property
    def num_rows(self) -> int:
        return int(self.token_index.numel())


def _scatter_rows(pos: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    """``out[pos[i]] = values[i]`` for ``pos[i] >= 0``; ``out`` has ``n`` rows."""
    buf = values.new_empty(n + 1)
    buf[torch.where(pos >= 0, pos, n)] = values
    return buf[:n]


def permute(ids: torch.Tensor, weights: torch.Tensor, num_experts: int) -> Permutation:
    """Sort the valid slots of ``ids [T, K]`` (``-1`` = unused) by expert, stably."""
    num_tokens, k = ids.shape
    pos, counts = stable_positions(ids.reshape(-1), num_experts)
    n = int(counts.sum())
    slots = torch.arange(num_tokens * k, device=ids.device)
    return Permutation(
        token_index=_scatter_rows(pos, torch.div(slots, max(k, 1), rounding_mode="floor"), n),
        expert=torch.repeat_interleave(
            torch.arange(num_experts, device=ids.device), counts, output_size=n
        ),
        weight=_scatter_rows(pos, weights.reshape(-1), n),
        counts=counts,
        inverse=pos.view(num_tokens, k),
        num_tokens=num_tokens,
    )


def gather_rows(x: torch.Tensor, perm: Permutation) -> torch.Tensor:
    """Permuted activations ``[N, H]`` from tokens ``x [T, H]``."""
    if triton_enabled(x):
        from moeplan.runtime.kernels._triton import gather_rows_triton

        return gather_rows_triton(x, perm.token_index)
    return x.index_select(0, perm.token_index)


def slot_weights(perm: Permutation, *, weighted: bool = True) -> torch.Tensor:
    """Weight of each slot ``[T, K]`` (fp32): the row's routing weight, 0 for unused slots."""
    ok = perm.inverse >= 0
    if not weighted:
        return ok.float()
    rows = perm.weight.float()[perm.inverse.clamp(min=0)] if perm.num_rows else ok.float()
    return torch.where(ok, rows, 0.0)


def combine(y: torch.Tensor, perm: Permutation, *, weighted: bool = True) -> torch.Tensor:
    """``out[t] = sum over t's rows of weight * y[row]`` (inverse of :func:`gather_rows`)."""
    if triton_enabled(y):
        from moeplan.runtime.kernels._triton import combine_triton

        return combine_triton(y, perm.inverse, slot_weights(perm, weighted=weighted))
    rows = y.float() * perm.weight.float()[:, None] if weighted else y.float()
    out = torch.zeros(perm.num_tokens, y.shape[1], dtype=torch.float32, device=y.device)
    return out.index_add_(0, perm.token_index, rows).to(y.dtype)
