"""Routers: softmax top-k, DeepSeek grouped top-k, Top-P dynamic k.

All routers return a :class:`Routing` with ``ids`` ``[T, K]`` (int64, ``-1`` pads unused slots)
and ``weights`` ``[T, K]`` (fp32, ``0`` on pads), so fixed-k and dynamic-k routing feed the same
permutation code (:mod:`moeplan.runtime.layers.permute`).

- :func:`softmax_topk`: Mixtral/Qwen style; optional renormalisation of the k weights.
- :func:`grouped_topk`: DeepSeek-V2 (softmax scores, group score = best expert of the group) and
  DeepSeek-V3 (sigmoid scores plus ``e_score_correction_bias`` for the *choice* only, group score =
  sum of the two best biased scores); the weights come from the unbiased scores, optionally
  renormalised, times ``routed_scaling_factor`` (as in DeepSeek's reference code).
- :func:`topp_routing`: SMIDT §2 / DESIGN.md "Top-P": experts by descending probability until the
  cumulative probability reaches ``p`` (the expert that crosses ``p`` is included), clamped to
  ``[k_min, k_max]``; ties go to the lower expert id (the planner's ``moeplan.traces.topp``
  rule). Vectorised: one sort and one cumsum, no loop over tokens. The cumulative
  sum is taken in fp64 so ties at ``p`` do not depend on fp32 summation order. ``p <= 0`` gives
  ``k = k_min`` (possibly 0). Weights are the selected probabilities, renormalised on request.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moeplan.errors import require


@dataclass(frozen=True, kw_only=True, slots=True)
class Routing:
    """Routing decision for ``T`` tokens: ``ids [T, K]`` (-1 = unused), ``weights [T, K]``."""

    ids: torch.Tensor
    weights: torch.Tensor

    def __post_init__(self) -> None:
        require(
            self.ids.shape == self.weights.shape,
            f"routing.ids shape ({tuple(self.ids.shape)}) must equal weights shape "
            f"({tuple(self.weights.shape)})",
        )

    @property
    def k_per_token(self) -> torch.Tensor:
        """Number of experts each token uses, ``[T]`` int64."""
        return (self.ids >= 0).sum(dim=1)


def softmax_topk(logits: torch.Tensor, k: int, *, renormalize: bool = True) -> Routing:
    """Softmax over experts, keep the ``k`` best. ``logits [T, E]``."""
    require(1 <= k <= logits.shape[1], f"top_k ({k}) must be in [1, {logits.shape[1]}]")
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return Routing(ids=ids, weights=weights)


def grouped_topk(
    logits: torch.Tensor,
    k: int,
    *,
    n_group: int,
    topk_group: int,
    scoring: str = "softmax",
    bias: torch.Tensor | None = None,
    renormalize: bool = False,
    scaling: float = 1.0,
) -> Routing:
    """DeepSeek node-limited routing. ``logits [T, E]``, ``E`` divisible by ``n_group``.

    Step 1: score experts (softmax, or sigmoid for V3). Step 2: score groups (V2: max; V3 with a
    bias: sum of the top-2 biased scores). Step 3: keep ``topk_group`` groups, mask the rest.
    Step 4: top-``k`` experts among the kept groups (by biased score); weights from unbiased scores.
    """
    num_tokens, num_experts = logits.shape
    require(
        num_experts % n_group == 0,
        f"num_experts ({num_experts}) must be divisible by n_group ({n_group})",
    )
    require(1 <= topk_group <= n_group, f"topk_group ({topk_group}) must be in [1, {n_group}]")
    per_group = num_experts // n_group
    require(
        1 <= k <= topk_group * per_group,
        f"top_k ({k}) must be in [1, topk_group*experts_per_group={topk_group * per_group}]",
    )
    require(scoring in ("softmax", "sigmoid"), f"scoring ({scoring}) must be softmax or sigmoid")
    # Step 1: expert scores
    x = logits.float()
    scores = torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)
    choice = scores if bias is None else scores + bias.float()[None, :]
    # Step 2: group scores
    grouped = choice.view(num_tokens, n_group, per_group)
    if bias is None:
        group_scores = grouped.max(dim=-1).values
    else:
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(dim=-1)
    # Step 3: keep the best groups
    group_idx = torch.topk(group_scores, topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool)
    group_mask.scatter_(1, group_idx, True)
    expert_mask = group_mask[:, :, None].expand(-1, -1, per_group).reshape(num_tokens, -1)
    # Step 4: experts within the kept groups
    masked = choice.masked_fill(~expert_mask, float("-inf"))
    ids = torch.topk(masked, k, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return Routing(ids=ids, weights=weights * scaling)


def topp_k(probs: torch.Tensor, p: float, k_min: int, k_max: int) -> torch.Tensor:
    """Experts per token under Top-P: smallest k with sorted cumsum >= p, clamped. ``[T]``."""
    require(
        0 <= k_min <= k_max <= probs.shape[1],
        f"k_min ({k_min}) and k_max ({k_max}) must satisfy 0 <= k_min <= k_max <= {probs.shape[1]}",
    )
    sorted_probs = torch.sort(probs, dim=-1, descending=True, stable=True).values
    cum = torch.cumsum(sorted_probs.double(), dim=-1)
    k = (
        torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
        if p <= 0
        else (cum < p).sum(dim=-1) + 1
    )
    return k.clamp(min=k_min, max=k_max)


def topp_routing(
    logits: torch.Tensor,
    p: float,
    *,
    k_min: int = 1,
    k_max: int | None = None,
    renormalize: bool = False,
) -> Routing:
    """Top-P dynamic routing. Returns ``[T, k_max]`` padded with ``-1`` beyond each token's k."""
    require(p <= 1.0, f"top_p ({p}) must be <= 1")
    num_experts = logits.shape[1]
    k_max = num_experts if k_max is None else k_max
    probs = torch.softmax(logits.float(), dim=-1)
    k = topp_k(probs, p, k_min, k_max)
    weights, ids = torch.sort(probs, dim=-1, descending=True, stable=True)  # ties: lower id first
    weights, ids = weights[:, :k_max], ids[:, :k_max]
    keep = torch.arange(k_max, device=logits.device)[None, :] < k[:, None]
    weights = torch.where(keep, weights, torch.zeros_like(weights))
    ids = torch.where(keep, ids, torch.full_like(ids, -1))
    if renormalize:
        total = weights.sum(dim=-1, keepdim=True)
        weights = torch.where(total > 0, weights / total.clamp_min(1e-20), weights)
    return Routing(ids=ids, weights=weights)
