"""Token permutation for variable k per token (sort by expert, counts, inverse).

Given a :class:`~moeplan.runtime.routing.Routing` (``ids [T, K]`` with ``-1`` pads), every valid
(token, slot) pair becomes one row of the permuted buffer, rows sorted by expert (stable, so
within an expert rows keep token order). Tokens routed to zero experts contribute no row; a
token routed to many experts contributes one row per expert. :func:`combine` is the inverse:
a weighted scatter-add back to ``[T, H]``. This is the layout used by grouped expert GEMMs and
by the all-to-all dispatch (experts owned by one rank are contiguous). No paper defines it;
it follows the usual MoE kernels (Megablocks / SGLang ``moe_align``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def permute(ids: torch.Tensor, weights: torch.Tensor, num_experts: int) -> Permutation:
    """Sort the valid slots of ``ids [T, K]`` by expert."""
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
    return x.index_select(0, perm.token_index)


def combine(y: torch.Tensor, perm: Permutation, *, weighted: bool = True) -> torch.Tensor:
    """Inverse of :func:`gather_rows`: ``out[t] = sum over rows of t of weight * y[row]``."""
    out = y.new_zeros(perm.num_tokens, y.shape[1])
    rows = y * perm.weight[:, None].to(y.dtype) if weighted else y
    return out.index_add_(0, perm.token_index, rows)


def offsets(counts: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sum of ``counts``: start row of each expert, ``[E]``."""
    return torch.cumsum(counts, dim=0) - counts
