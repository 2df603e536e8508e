"""Stop a steady run once its SLO miss is certain: a proof, not a guess.

A steady probe (:func:`moeplan.search.capacity.slo.steady_probe`) misses the SLOs when the point
percentile of its measured window's TTFT or TPOT exceeds the limit. Partway through a run,
at time ``now`` (the start of the engine's last iteration; every later first token or finish
comes at the end of an iteration not yet ended, so after ``now``):

- a measured request without a first token has TTFT > ``now - arrival``;
- a measured request decoding but not finished has TPOT > ``(now - first token) / (osl - 1)``.

Those lower bounds, and the exact values of requests already past the event, only grow as
the run goes on. The point percentile (``numpy.percentile``, linear between the order
statistics at ranks ``floor`` and ``ceil`` of ``(n - 1) p``) exceeds a limit once at least
``n - floor((n - 1) p)`` of the ``n`` values do. When that many lower bounds exceed the SLO,
the full run's percentile exceeds it too, and so does the stopped run's (its unfinished
requests count as infinitely late): the verdict "misses" is the full run's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from moeplan.serve.engine.run import Engine
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import Requests


def _needed(n: int, p: float) -> int:
    """Values above a limit that put the point ``p``-th percentile of ``n`` values above it."""
    return n - math.floor((n - 1) * p / 100.0) if n else 1 << 62


def certain_miss(reqs: Requests, window: slice, slo: SLO) -> Callable[[Engine], bool]:
    """Stop predicate for :func:`moeplan.serve.engine.run.simulate`: True once the measured
    ``window`` of ``reqs`` misses ``slo`` whatever the rest of the run does (module
    docstring)."""
    arr = reqs.arrival_s[window]
    osl = reqs.osl[window]
    multi = osl > 1
    tt_need = _needed(len(arr), slo.percentile)
    tp_need = _needed(int(multi.sum()), slo.percentile)
    per_tok = np.where(multi, osl - 1, 1).astype(float)
    lo, hi = window.start, window.stop
    earliest = float(arr[0]) + min(x for x in (slo.ttft_s, slo.tpot_s) if x is not None)

    def stop(e: Engine) -> bool:
        now = e.now
        if now <= earliest:
            return False
        first = np.asarray(e.first[lo:hi])
        if slo.ttft_s is not None:
            ttft = np.where(np.isnan(first), now - arr, first - arr)
            if int(np.count_nonzero(ttft > slo.ttft_s)) >= tt_need:
                return True
        if slo.tpot_s is not None:
            fin = np.asarray(e.finish[lo:hi])
            with np.errstate(invalid="ignore"):
                tpot = (np.where(np.isnan(fin), now, fin) - first) / per_tok
                late = multi & (tpot > slo.tpot_s)  # NaN (no first token) compares False
            if int(np.count_nonzero(late)) >= tp_need:
                return True
        return False

    return stop
