"""Decode-step times on a grid of batch sizes, interpolated: the evaluator of capacity runs.

A steady capacity search simulates many rates of many layouts; each distinct decode batch
size ``b`` (1 .. thousands) at each context bucket costs a cost-model evaluation. Above
:data:`EXACT_BELOW` sequences, :class:`GridEvaluator` prices a decode-only iteration by linear
interpolation in ``b`` between the two neighbouring points of a grid of relative step 1/32
(the step :func:`moeplan.serve.engine.config.bucket` uses for contexts): exact on the grid and below
it, monotone between grid points when the step time is monotone in ``b``. Prefill and mixed
iterations are priced exactly. The capacity of :mod:`moeplan.search.capacity.slo` and its upper
bound (:mod:`moeplan.search.capacity.bound`) both use it, so the bound holds for the figure it bounds.
"""

from __future__ import annotations

from moeplan.serve.engine.run import Evaluator
from moeplan.serve.iteration.model import Batch

EXACT_BELOW = 64  # batches up to this size are priced exactly (the grid step would be < 2)


def _grid_below(b: int) -> tuple[int, int]:
    """Grid points ``lo <= b < hi`` (spacing ``2^(bit_length - 6)``: relative step <= 1/32)."""
    step = 1 << max(0, b.bit_length() - 6)
    lo = (b // step) * step
    return lo, lo + step


class GridEvaluator:
    """``evaluate`` with decode-only iterations interpolated on the batch grid."""

    def __init__(self, evaluate: Evaluator) -> None:
        self.inner = evaluate
        self._cache: dict[Batch, float] = {}

    def __call__(self, batch: Batch) -> float:
        b = batch.decode
        if batch.prefill or b <= EXACT_BELOW:
            return self.inner(batch)
        t = self._cache.get(batch)
        if t is None:
            lo, hi = _grid_below(b)
            t0 = self.inner(Batch(lo, batch.decode_ctx, ()))
            if lo == b:
                t = t0
            else:
                t1 = self.inner(Batch(hi, batch.decode_ctx, ()))
                t = t0 + (t1 - t0) * (b - lo) / (hi - lo)
            self._cache[batch] = t
        return t

    def breakdown(self, batch: Batch) -> dict[str, float]:
        return self.inner.breakdown(batch)  # type: ignore[attr-defined]
