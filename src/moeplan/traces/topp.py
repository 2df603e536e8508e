"""Top-P (dynamic top-k) routing over router probabilities, in pure numpy.

SMIDT (paper 001, §2.1 and §3) plans for *dynamic top-k* routing, where the number of experts a
token activates varies per token and per layer. Top-P routing (Huang et al. 2024, cited by SMIDT)
adds experts in descending probability until their cumulative probability reaches ``p``. This
module is the reference the torch runtime mirrors, so the semantics are pinned exactly:

* **Order.** Experts are ranked by descending probability; ties go to the *lower expert index*
  (a stable sort of ``-probs``; torch: ``torch.sort(-probs, stable=True)``).
* **Cumulative sum.** Computed in float64 over the ranked probabilities
  (torch: ``cumsum(dtype=torch.float64)``), whatever the input dtype.
* **Boundary.** ``k`` is the smallest count whose cumulative sum is ``>= p`` (inclusive), i.e.
  ``k = 1 + #{j < E-1 : cumsum[j] < p}``; if rounding keeps the sum below ``p``, ``k = E``.
* **Bounds.** ``k`` is then clamped to ``[k_min, k_max]`` (``k_max`` defaults to ``E``).
* **Weights.** The router probabilities of the selected experts, unnormalised (the runtime
  renormalises if the model does, e.g. Qwen's ``norm_topk_prob``).
* **Output.** Selected expert ids in rank order, padded with ``-1`` to ``k_max`` columns — the
  trace format's convention for dynamic k (DESIGN.md, "Files and formats").

Departure from the paper: none in the rule itself; SMIDT does not define ties or float
boundaries, so the choices above are ours.
"""

from __future__ import annotations

import numpy as np

from moeplan.errors import MoeplanError, require


def _check(probs: np.ndarray, p: float, k_min: int, k_max: int | None) -> tuple[int, int]:
    require(probs.ndim == 2, f"probs.ndim ({probs.ndim}) must be 2 (tokens, experts)")
    num_experts = int(probs.shape[1])
    require(num_experts >= 1, f"probs.shape[1] ({num_experts}) must be >= 1")
    if not (0.0 < float(p) <= 1.0):
        raise MoeplanError(f"top_p ({p}) must be in (0, 1]")
    k_hi = num_experts if k_max is None else int(k_max)
    require(1 <= int(k_min) <= k_hi, f"k_min ({k_min}) must be in [1, k_max ({k_hi})]")
    require(k_hi <= num_experts, f"k_max ({k_hi}) must be <= num_experts ({num_experts})")
    require(bool(np.all(probs >= 0)), "probs must be non-negative")
    return int(k_min), k_hi


def top_p_counts(
    probs: np.ndarray, p: float, *, k_min: int = 1, k_max: int | None = None
) -> np.ndarray:
    """Number of experts each token activates under Top-P routing.

    Args:
        probs: ``[tokens, experts]`` router probabilities (rows sum to 1 up to rounding).
        p: cumulative-probability threshold in ``(0, 1]``.
        k_min, k_max: bounds on the count (``1 <= k_min <= k_max <= experts``).
    Returns:
        ``[tokens]`` int64 counts.
    """
    probs = np.asarray(probs)
    k_lo, k_hi = _check(probs, p, k_min, k_max)
    ranked = -np.sort(-probs.astype(np.float64), axis=1, kind="stable")
    csum = np.cumsum(ranked, axis=1)
    counts = 1 + np.count_nonzero(csum[:, :-1] < p, axis=1)
    return np.clip(counts, k_lo, k_hi).astype(np.int64)


def top_p_route(
    probs: np.ndarray, p: float, *, k_min: int = 1, k_max: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-P routing: selected experts and their probabilities.

    Args:
        probs: ``[tokens, experts]`` router probabilities.
        p, k_min, k_max: as in :func:`top_p_counts`.
    Returns:
        ``(experts, weights)``: ``[tokens, k_max]`` int64 ids in rank order padded with ``-1``,
        and ``[tokens, k_max]`` float64 probabilities padded with ``0``.
    """
    probs = np.asarray(probs)
    _, k_hi = _check(probs, p, k_min, k_max)
    counts = top_p_counts(probs, p, k_min=k_min, k_max=k_hi)
    order = np.argsort(-probs.astype(np.float64), axis=1, kind="stable")[:, :k_hi]
    keep = np.arange(k_hi)[None, :] < counts[:, None]
    experts = np.where(keep, order, -1).astype(np.int64)
    weights = np.where(keep, np.take_along_axis(probs.astype(np.float64), order, axis=1), 0.0)
    return experts, weights


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (router probabilities from logits)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
