"""Stable counting-sort positions: the index build under both MoE permutations.

``stable_positions(keys, num_bins)`` gives, for each element with ``0 <= key < num_bins``, its
row in the stable sort of ``keys`` (pads ``key < 0`` get ``-1`` and sort nowhere), plus the
per-bin counts. Sorting token-expert slots by expert (SMIDT's variable-k permutation) and
tokens by destination device (Sem-MoE §4.3, Alg. 3 "argsort, group, pad") are both this.

Backends (same result, bit for bit):

- Triton (CUDA): two passes over blocks of ``BLOCK`` keys. Pass 1 writes a per-block
  histogram; a ``cumsum`` over blocks and bins gives each (block, bin) its first row; pass 2
  ranks every key inside its block with a one-hot prefix sum. No atomics, so the result is
  deterministic and stable — unlike the atomic ``moe_align`` kernels, which are not stable.
- torch: one stable ``argsort`` of the keys with pads mapped to an extra last bin, so no
  ``nonzero`` (a device sync) is needed. A one-hot prefix sum (``O(N * bins)``, no sort) was
  tried for few bins and was 30-300x slower than ``argsort`` on CPU (cumsum along dim 0).

Keys ``>= num_bins`` are not checked (checking would force a device sync); they are the
caller's bug and give undefined positions.
"""

from __future__ import annotations

import torch

from moeplan.runtime.kernels._backend import triton_enabled


def stable_positions(keys: torch.Tensor, num_bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pos [N] int64, counts [num_bins] int64)`` for 1-D integer ``keys`` (``-1`` = pad)."""
    keys = keys.reshape(-1)
    if keys.numel() == 0:
        return (
            torch.empty(0, dtype=torch.long, device=keys.device),
            torch.zeros(num_bins, dtype=torch.long, device=keys.device),
        )
    if triton_enabled(keys):
        from moeplan.runtime.kernels._triton import stable_positions_triton

        return stable_positions_triton(keys, num_bins)
    return stable_positions_torch(keys, num_bins)


def stable_positions_torch(keys: torch.Tensor, num_bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectorised torch backend (see module docstring)."""
    valid = keys >= 0
    bins = torch.where(valid, keys.long(), num_bins)  # pads go to an extra, last bin
    counts = torch.bincount(bins, minlength=num_bins + 1)[:num_bins]
    order = torch.argsort(bins, stable=True)
    pos = torch.empty_like(order)
    pos[order] = torch.arange(order.numel(), device=keys.device)
    return torch.where(valid, pos, -1), counts
