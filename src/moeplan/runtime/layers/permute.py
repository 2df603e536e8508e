"""Token permutation for variable k per token (sort by expert, counts, inverse).

Given a :class:`~moeplan.runtime.layers.routing.Routing` (``ids [T, K]`` with ``-1`` pads), every valid
(token, slot) pair becomes one row of the permuted buffer, rows sorted by expert (stable, so
within an expert rows keep token order). Tokens routed to zero experts contribute no row; a
token routed to many experts contributes one row per expert. :func:`combine` is the inverse:
a weighted scatter-add back to ``[T, H]``. This is the layout used by grouped expert GEMMs and
by the all-to-all dispatch (experts owned by one rank are contiguous). No paper defines it;
it follows the usual MoE kernels (Megablocks / SGLang ``moe_align``). On CUDA with Triton the
three functions run the kernels of :mod:`moeplan.runtime.kernels.permute` (same result; the
Triton combine accumulates in fp32); elsewhere the torch code below, the reference those
kernels are tested against.
"""

from __future__ import annotations

import torch

from moeplan.runtime import kernels
from moeplan.runtime.kernels import Permutation

__all__ = ["Permutation", "combine", "gather_rows", "permute"]


def permute(ids: torch.Tensor, weights: torch.Tensor, num_experts: int) -> Permutation:
    """Sort the valid slots of ``ids [T, K]`` by expert."""
    if kernels.triton_enabled(ids):
        return kernels.permute(ids, weights, num_experts)
    num_tokens, k = ids.shape
    flat = ids.reshape(-1)
    slots = torch.nonzero(flat >= 0, as_tuple=False).flatten()
    experts = flat[slots]
    order = torch.argsort(experts, stable=True)
    sorted_slots = slots[order]
    inverse = torch.full((num_tokens * k,), -1, dtype=torch.long, device=ids.device)
    inverse[sorted_slots] = torch.arange(sorted_slots.numel(), device=ids.device)
    return Permutation(
        token_index=torch.div(sorted_slots, max(k, 1), rounding_mode="floor"),
        expert=experts[order],
        weight=weights.reshape(-1)[sorted_slots],
        counts=torch.bincount(experts, minlength=num_experts),
        inverse=inverse.view(num_tokens, k),
        num_tokens=num_tokens,
    )


def gather_rows(x: torch.Tensor, perm: Permutation) -> torch.Tensor:
    """Permuted activations ``[N, H]`` from tokens ``x [T, H]``."""
    if kernels.triton_enabled(x):
        return kernels.gather_rows(x, perm)
    return x.index_select(0, perm.token_index)


def combine(y: torch.Tensor, perm: Permutation, *, weighted: bool = True) -> torch.Tensor:
    """Inverse of :func:`gather_rows`: ``out[t] = sum over rows of t of weight * y[row]``."""
    if kernels.triton_enabled(y):
        return kernels.combine(y, perm, weighted=weighted)
    out = y.new_zeros(perm.num_tokens, y.shape[1])
    rows = y * perm.weight[:, None].to(y.dtype) if weighted else y
    return out.index_add_(0, perm.token_index, rows)
