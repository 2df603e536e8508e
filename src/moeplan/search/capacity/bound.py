"""An upper bound of an instance's SLO-bound capacity from iteration-time lower bounds.

The search over deployments (:mod:`moeplan.search.colocated.search`) simulates layouts in the
order of this bound and stops when the best simulated capacity beats every remaining bound:
the bound must never be below what simulation finds (tested over the preset grid).

For an engine instance serving ``lam`` requests/s in steady state, each request needs
``pt`` prefill tokens (prompt minus prefix-cache hit) and ``osl`` decode tokens:

- **Decode.** A decode iteration of ``b`` sequences produces ``b`` tokens in ``d(b)``
  seconds, ``d`` nondecreasing in ``b`` and in the context. ``b`` is at most ``b_max`` = the
  running-request cap, and the sequences the KV pool holds at the shortest context a
  decoding request has (``isl_min + 1``), over every engine configuration searched. On a
  geometric grid ``b_0 < b_1 < ...`` of ratio :data:`GRID`, any ``b`` in ``(b_i, b_{i+1}]``
  gives ``b / d(b) <= b_{i+1} / d(b_i)``, so ``D = max_i b_{i+1} / d(b_i)`` bounds the decode
  tokens/s (contexts evaluated at the shortest, rounded down past the engine's bucketing).
- **Prefill.** An iteration holds at most ``c_max`` prompt tokens (the largest chunk; no
  chunking: the KV pool); prompts cut into pieces of the shortest prompt give the cheapest
  arrangement, and the same grid argument bounds the prefill tokens/s by ``P``.
- SGLang's ``prefill-first`` scheduler runs prefill and decode in separate iterations, so the
  times add: ``lam <= 1 / (pt / P + osl / D)``. A ``mixed`` iteration costs at least its
  decode part and at least its prefill part: ``lam <= min(P / pt, D / osl)``.

- **TPOT.** A request's TPOT is at least the mean of the decode steps it sits in, so the
  mean TPOT over requests is at least the token-weighted mean step time, which is at least
  the mean step time ``d(b_mean)`` when ``d`` is linear or convex in ``b`` (the decode step
  is weights read once plus per-sequence work). When the mean TPOT is within the SLO, the mean
  batch is at most ``b_T`` = the largest ``b`` with ``d(b) <= TPOT SLO`` and the decode
  throughput ``b_mean / d(b_mean) <= b_T / d(b_T)``: ``b_max`` is cut to ``b_T`` (one grid
  step above). Under ``prefill-first`` a fraction ``f = lam pt / P`` of the time goes to
  prefill iterations that decoding requests sit through, so the decode steps must fit
  ``TPOT SLO x (1 - f)`` and decode runs ``1 - f`` of the time:
  ``lam osl <= (1 - f) D(TPOT SLO (1 - f))``, solved for the largest ``lam`` by bisection. It assumes the mean TPOT is within the percentile's, true of the TPOT
  distributions of a continuous-batching engine at a percentile of 90 or more (tested over
  the preset grid); below that percentile the TPOT does not enter the bound.
- **MTP.** When the evaluator prices multi-token prediction, a step of ``b`` sequences
  produces ``tau b`` tokens in expectation (:func:`moeplan.serve.engine.run.tokens_per_step`) and
  a request's ``osl - 1`` decode tokens take ``ceil((osl - 1) / tau)`` steps, so TPOT is at
  least the mean step over ``tau``: ``D`` is scaled by ``tau`` and the step limit is ``tau``
  times the TPOT SLO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from moeplan.serve.engine.run import EngineConfig, Evaluator, tokens_per_step
from moeplan.serve.iteration.model import Batch
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload

GRID = 1.125  # ratio of the batch / chunk grid above FINE_FROM: the bound is loose by <= 12.5 %
FINE_FROM = 64  # below it the grid doubles (those intervals never hold the maximum in practice)
TPOT_PERCENTILE = 90.0  # the TPOT cut applies at SLO percentiles >= this (docstring)
BUCKET_MARGIN = (
    1.0 / 32
)  # the engine's context grid (serve.iteration.grid.bucket) rounds down by <= 1/64


@dataclass(frozen=True, kw_only=True, slots=True)
class Bound:
    """Upper bound of one instance's capacity (requests/s into it) and its two parts."""

    rate_rps: float
    decode_tokens_per_s: float
    prefill_tokens_per_s: float
    batch_max: int
    chunk_max: int
    lone_ttft_s: float = 0.0
    lone_tpot_s: float = 0.0

    def per_gpu(self, osl_mean: float, gpus: int) -> float:
        return self.rate_rps * osl_mean / gpus


def grid(top: int) -> list[int]:
    out = [1]
    while out[-1] < top:
        r = 2.0 if out[-1] < FINE_FROM else GRID
        out.append(min(top, max(out[-1] + 1, math.floor(out[-1] * r))))
    return out


def throughput(values: list[int], time) -> float:  # type: ignore[no-untyped-def]
    """``max_i values[i+1] / time(values[i])`` and the last point's own ratio."""
    best = values[-1] / time(values[-1])
    for a, b in zip(values, values[1:], strict=False):
        best = max(best, b / time(a))
    return best


def prefill_batch(c: int, q: int) -> Batch:
    """``c`` prompt tokens as pieces of ``q`` tokens, each at the lowest context the engine's
    grid can price it at (:data:`BUCKET_MARGIN` below its own length)."""

    def low(n: int) -> int:
        return max(n, 1) if n < 64 else math.floor(n * (1 - BUCKET_MARGIN))

    k, rem = divmod(c, q)
    items = ((q, low(q)),) * k + (((rem, low(rem)),) if rem else ())
    return Batch(0, 0, items)


class DecodeCurve:
    """Decode step times ``d(b)`` on the batch grid up to ``b_max`` at one context, read in
    grid order and kept: the TPOT bisection asks :meth:`bound` for many step limits."""

    def __init__(self, evaluate: Evaluator, b_max: int, ctx: int) -> None:
        self.evaluate, self.ctx = evaluate, ctx
        self.grid = grid(b_max)
        self.d: list[float] = []
        self.pair: list[float] = []  # running max of grid[i + 1] / d[i]

    def _time(self, i: int) -> float:
        while len(self.d) <= i:
            j = len(self.d)
            self.d.append(self.evaluate(Batch(self.grid[j], self.ctx, ())))
            if j:
                r = self.grid[j] / self.d[j - 1]
                self.pair.append(max(self.pair[-1], r) if self.pair else r)
        return self.d[i]

    def bound(self, step_s: float) -> float:
        """Decode tokens/s bound over batches up to one grid step past the largest whose
        decode step is within ``step_s`` (all of ``b_max`` when ``step_s`` is infinite):
        ``max(b_top / d(b_top), max_i b_{i+1} / d(b_i))`` over the grid up to ``b_top``."""
        grid = self.grid
        top = len(grid)
        for i in range(len(grid)):
            if self._time(i) > step_s:
                top = min(len(grid), max(i, 1) + 1)
                break
        last = self._time(top - 1)
        best = grid[top - 1] / last
        return max(best, self.pair[top - 2]) if top >= 2 else best


def _tpot_rate(
    curve: DecodeCurve,
    tpot_s: float,
    pt: float,
    p: float,
    osl: float,
    hi: float,
    tau: float = 1,
) -> float:
    """Largest ``lam <= hi`` with ``lam osl <= (1 - f) D(tpot (1 - f))``, ``f = lam pt / P``
    the fraction of time in prefill iterations (prefill-first; module docstring)."""

    def ok(lam: float) -> bool:
        f = lam * pt / p
        if f >= 1.0:
            return False
        step = tau * tpot_s * (1.0 - f)  # MTP: a step of tau tokens within tau TPOTs
        return lam * osl <= (1.0 - f) * tau * curve.bound(step)

    if ok(hi):
        return hi
    lo = 0.0
    while hi - lo > 1e-3 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return hi


def capacity_bound(
    evaluate: Evaluator,
    cfgs: Sequence[EngineConfig],
    workload: ServeWorkload,
    slo: SLO | None = None,
) -> Bound:
    """The bound of the module docstring over the engine configurations ``cfgs`` (the
    candidates a knob search tries; their policy must be one)."""
    isl_min = workload.isl.mean if workload.isl.kind == "fixed" else workload.isl.low
    q_min = max(1, isl_min - math.floor(workload.prefix_hit * isl_min))
    ctx = max(1, math.floor((isl_min + 1) * (1 - BUCKET_MARGIN)))
    b_max = max(1, max(min(c.max_running, c.kv_tokens // (isl_min + 1)) for c in cfgs))
    c_max = max(1, max(c.chunk_tokens or c.kv_tokens for c in cfgs))
    tpot = (
        slo.tpot_s
        if slo is not None and slo.tpot_s is not None and slo.percentile >= TPOT_PERCENTILE
        else math.inf
    )
    tau = tokens_per_step(evaluate)  # MTP: tau tokens per step, TPOT >= step / tau
    curve = DecodeCurve(evaluate, b_max, ctx)
    d = tau * curve.bound(tpot * tau)
    p = throughput(grid(c_max), lambda c: evaluate(prefill_batch(c, min(c, q_min))))
    isl_mean = workload.isl.mean
    pt = max(1e-9, isl_mean - math.floor(workload.prefix_hit * isl_mean))
    osl = workload.osl.mean
    if all(c.policy == "prefill-first" for c in cfgs):
        rate = 1.0 / (pt / p + osl / d)
        if math.isfinite(tpot):
            rate = _tpot_rate(curve, tpot, pt, p, osl, rate, tau)
    else:
        rate = min(p / pt, d / osl)
    # a lone request: its prompt's prefill (one chunk at least) and a one-sequence decode step
    ttft = evaluate(prefill_batch(min(q_min, c_max), min(q_min, c_max)))
    tpot = evaluate(Batch(1, ctx, ())) / tau
    if slo is not None and (
        (slo.ttft_s is not None and ttft > slo.ttft_s)
        or (slo.tpot_s is not None and tpot > slo.tpot_s)
    ):
        rate = 0.0
    return Bound(
        lone_ttft_s=ttft,
        lone_tpot_s=tpot,
        rate_rps=rate,
        decode_tokens_per_s=d,
        prefill_tokens_per_s=p,
        batch_max=b_max,
        chunk_max=c_max,
    )
