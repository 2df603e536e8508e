"""The engine on a prefill-only pool: every request has one output token (a P/D prefill
instance), open loop.

The general loop (:class:`moeplan.serve.engine.run.Engine`) reduces to a first-come-first-served
chunked-batch queue here, and this module runs that queue with the same arithmetic, so every
field of the :class:`SimResult` is the same bit for bit (``tests/test_serve_engine_prefill.py``
checks it against the general loop):

- no request ever decodes, so an iteration is prompt chunks only under either policy, no KV
  slot is allocated per step and nothing is preempted (preemption only frees room for decode
  slots); every prompt token prefilled is a first-time one;
- a request's last chunk produces its only token: it finishes at that iteration's end
  (first token = finish), freeing its prompt's KV;
- admissions are in arrival order and every chunk but an iteration's last completes its
  request, so the requests of one iteration are consecutive and at most one request (the
  last admitted) is part-way through its prompt between iterations;
- the admission test is the engine's: the KV in use plus the request's prompt plus
  ``admit_reserve`` times the outstanding output of the requests running before the
  iteration and ``admit_reserve_new`` times that of the iteration's admissions (one token
  each, itself included) must fit the pool.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from moeplan.errors import require
from moeplan.serve.engine.config import STOP_EVERY, SimResult
from moeplan.serve.engine.state import EngineState
from moeplan.serve.iteration.model import Batch


class _Queue:
    """The pool's state between events (requests by index, in arrival order)."""

    __slots__ = ("e", "j", "part_left", "part_ctx", "kv", "nrun", "pend", "tokens", "done")

    def __init__(self, e: EngineState) -> None:
        self.e = e
        self.j = 0  # next request to admit (those before it were admitted)
        self.part_left = 0  # prompt tokens request j - 1 still has to prefill (0: none)
        self.part_ctx = 0  # its context so far
        self.kv = 0  # KV tokens allocated
        self.nrun = 0  # requests admitted and not finished
        self.pend = (0, 0, 0)  # iteration in flight: requests [lo, hi) finish, tokens
        self.tokens = 0  # prompt tokens prefilled (iterations ended)
        self.done = 0  # requests finished

    def start(self, t: float, arrived: int) -> float | None:
        """Launch the iteration at ``t`` (requests before ``arrived`` have arrived): its end,
        or None when nothing can run."""
        e = self.e
        e.now = t
        budget = e.budget
        pre: list[tuple[int, int]] = []
        j, left = self.j, self.part_left
        lo = j - 1 if left else j
        if left:  # the request part-way through its prompt goes first
            q = left if left <= budget else budget
            c = self.part_ctx + q
            s = c.bit_length() - 6  # moeplan.serve.iteration.grid.bucket(c), inline
            pre.append((q, ((c >> s) << s) + (1 << (s - 1)) if s > 0 else c))
            budget -= q
            left -= q
            self.part_ctx = c
        isl, cached, admit = e.isl, e.cached, e.admit
        kv, nrun, max_running, reserve, cap = (
            self.kv,
            self.nrun,
            e.max_running,
            e.reserve,
            e.kv_cap,
        )
        held, new, fresh, w = reserve * nrun, e.reserve_new, 0.0, e.seq_kv  # as Engine._admit
        while budget > 0 and j < arrived and nrun < max_running:
            need = isl[j]
            if kv + need + w + held + fresh + new > cap:
                break
            fresh += new
            admit[j] = t
            kv += need + w
            nrun += 1
            c = cached[j]
            q = need - c
            if q > budget:  # the budget ends inside this prompt
                left, q = q - budget, budget
                self.part_ctx = c + q
            c += q
            s = c.bit_length() - 6
            pre.append((q, ((c >> s) << s) + (1 << (s - 1)) if s > 0 else c))
            budget -= q
            j += 1
        if not pre:
            return None
        assert kv <= cap, "KV pool over-committed"
        self.j, self.part_left, self.kv, self.nrun = j, left, kv, nrun
        dur = e.evaluate(Batch(0, 0, tuple(pre)))
        if not 0.0 < dur < math.inf:  # the message is built only when it is raised
            require(False, f"iteration time ({dur}) must be positive")
        tokens = e.budget - budget
        self.pend = (lo, j - 1 if left else j, tokens)
        e.segs.append((t, dur, 1, 0, tokens, kv, 0))
        return t + dur

    def end(self, t: float) -> None:
        """The iteration in flight ends at ``t``: its completed prompts' requests finish."""
        lo, hi, tokens = self.pend
        self.tokens += tokens
        if hi > lo:
            e, k = self.e, hi - lo
            at_t = [t] * k
            e.first[lo:hi] = at_t
            e.finish[lo:hi] = at_t
            self.kv -= sum(e.isl[lo:hi]) + k * e.seq_kv
            self.nrun -= k
            self.done += k

    def result(self) -> SimResult:
        e = self.e
        e.kv_used, e.prefill_tokens, e.out_tokens = self.kv, self.tokens, self.done
        return e._result()


def run_prefill_only(e: EngineState) -> SimResult:
    """Run ``e`` (open loop, every ``osl`` 1) to its end, horizon or stop (module docstring);
    events in :meth:`moeplan.serve.engine.run.Engine._run_open`'s order."""
    queue = _Queue(e)
    arrival, horizon, stop = e.arrival, e.horizon, e.stop
    n, i, ends, end = len(arrival), 0, 0, None
    while True:
        if i < n and (end is None or arrival[i] <= end):
            # arrivals up to the iteration's end (idle: those at this instant) queue now
            t = arrival[i]
            k = bisect_right(arrival, t if end is None else end, i)
            if bisect_right(arrival, horizon, i, k) < k:  # stopped: not done keep NaN times
                break
            i = k
            if end is not None:
                continue
        elif end is not None:
            t = end
            if t > horizon:
                break
            queue.end(t)
            end = None
            ends += 1
            if stop is not None and ends % STOP_EVERY == 0 and stop(e):
                break
            if i < n and arrival[i] <= t:
                continue
        else:
            assert queue.j == n and not queue.part_left, "engine stopped with work left"
            break
        end = queue.start(t, i)
    return queue.result()
