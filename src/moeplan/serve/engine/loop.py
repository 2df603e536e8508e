"""The general engine loop (:class:`Engine`): event loops, scheduling and preemption;
semantics in :mod:`moeplan.serve.engine.run`, which runs it (:func:`moeplan.serve.engine.run.simulate`)."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right

from moeplan.errors import require
from moeplan.serve.engine.config import STOP_EVERY, SimResult
from moeplan.serve.engine.end import IterationEnd
from moeplan.serve.engine.prefill import run_prefill_only
from moeplan.serve.engine.state import (
    ARRIVAL,
    DECODE,
    ITER_END,
    PREFILL,
    WAIT,
)
from moeplan.serve.iteration.grid import bucket
from moeplan.serve.iteration.model import Batch


class Engine(IterationEnd):
    """One simulation run; use :func:`moeplan.serve.engine.run.simulate`."""

    def run(self) -> SimResult:
        if self.r.closed:
            return self._run_heap()
        if self.prefill_only:
            return run_prefill_only(self)
        return self._run_open()

    # ---- event loops ----------------------------------------------------------------------
    def _run_open(self) -> SimResult:
        """Open loop: arrivals come sorted and at most one iteration is in flight, so the next
        event is the earlier of the next arrival and the iteration's end (the arrival at equal
        times: it joins the next iteration) — the order of :meth:`_run_heap`'s heap."""
        arrival, waiting, horizon, stop = self.arrival, self.waiting, self.horizon, self.stop
        n, i, ends, end = len(arrival), 0, 0, None
        while True:
            if i < n and (end is None or arrival[i] <= end):
                # arrivals up to the iteration's end (idle: those at this instant) queue now
                t = arrival[i]
                k = bisect_right(arrival, t if end is None else end, i)
                h = bisect_right(arrival, horizon, i, k)
                waiting.extend(range(i, h))
                if h < k:  # stopped: requests not done keep NaN times
                    break
                i = self.next_arrival = k
                if end is not None:
                    continue
            elif end is not None:
                t = end
                if t > horizon:
                    break
                self._end(t)
                end = None
                ends += 1
                if stop is not None and ends % STOP_EVERY == 0 and stop(self):
                    break  # a verdict is certain: the rest keeps NaN times
                if i < n and arrival[i] <= t:
                    continue
            else:
                assert not self.running and not waiting, "engine stopped with work left"
                break
            end = self._start(t)
        return self._result()

    def _run_heap(self) -> SimResult:
        """Closed loop: a finish queues its client's next request, so arrivals go on a heap
        keyed ``(time, priority, seq)`` with the iteration ends."""
        for _ in range(min(self.r.closed, len(self.arrival))):
            self._push_arrival(0.0)
        busy = False
        heap, waiting, horizon, stop = self.heap, self.waiting, self.horizon, self.stop
        pop, ends = heapq.heappop, 0
        while heap:
            t, prio, _, x = pop(heap)
            if t > horizon:
                return self._result()
            if prio == ARRIVAL:
                waiting.append(x)
            else:
                self._end(t)
                busy = False
                ends += 1
                if stop is not None and ends % STOP_EVERY == 0 and stop(self):
                    return self._result()
            if not busy and not (heap and heap[0][0] <= t and heap[0][1] == ARRIVAL):
                end = self._start(t)
                busy = end is not None
                if end is not None:
                    self._push(end, ITER_END, 0)
        assert not self.running and not self.waiting, "engine stopped with work left"
        return self._result()

    def _next_arrival_s(self) -> float:
        """When the next request not yet queued arrives (inf: none is known)."""
        if self.r.closed:
            return self.heap[0][0] if self.heap else math.inf
        i = self.next_arrival
        return self.arrival[i] if i < len(self.arrival) else math.inf

    # ---- scheduling -----------------------------------------------------------------------
    def _start(self, t: float) -> float | None:
        """Form and launch the next iteration at ``t``: its end (None: nothing to run)."""
        self.now = t
        # without a request being prefilled or waiting no chunk can be formed
        if self.mixed:
            n_dec = self._alloc_decode() if self.n_dec else 0
            if not (self.prefilling or self.waiting):
                return self._start_decode(t, n_dec) if n_dec else None
            chunks, pre, tokens = self._take_prefill(self.budget - n_dec)
        elif self.prefilling or self.waiting:
            chunks, pre, tokens = self._take_prefill(self.budget)
            n_dec = 0 if chunks or not self.n_dec else self._alloc_decode()
        else:
            n_dec = self._alloc_decode()
            return self._start_decode(t, n_dec) if n_dec else None
        if not chunks and not n_dec:
            return None
        if not chunks:
            return self._start_decode(t, n_dec)
        assert self.kv_used <= self.kv_cap, "KV pool over-committed"
        ctx = bucket(int((self.sum_ctx + n_dec * self.tps + n_dec // 2) // n_dec)) if n_dec else 0
        dur = self.evaluate(Batch(n_dec, ctx, pre))
        if not 0.0 < dur < math.inf:  # the message is built only when it is raised
            require(False, f"iteration time ({dur}) must be positive")
        self.pending = (chunks, n_dec, 1)
        self.segs.append((t, dur, 1, n_dec, tokens, self.kv_used, 0))
        return t + dur

    def _start_decode(self, t: float, n: int) -> float:
        """Decode-only steps, fast-forwarded: with no prefill work the batch stays the same
        until the next finish, arrival or full KV pool, and the mean context grows by one per
        step, so steps are timed one bucket segment at a time. One step is already allocated."""
        assert self.kv_used <= self.kv_cap, "KV pool over-committed"
        k_max = self.finishers[0] - self.step if self.finishers else 1
        k_max = min(k_max, 1 + int((self.kv_cap - self.kv_used) // (n * self.tps)))
        if not self.fast:
            k_max = 1
        t_arr = self._next_arrival_s()
        tau, segs, evaluate, sum_ctx = self.tps, self.segs, self.evaluate, self.sum_ctx
        done, end, kv0 = 0, t, self.kv_used
        while done < k_max:
            x = int((sum_ctx + n * tau * (done + 1) + n // 2) // n)  # mean context
            shift = x.bit_length() - 6
            if shift > 0:  # bucket(x), inline, and the steps left in its cell
                key = ((x >> shift) << shift) + (1 << (shift - 1))
                room = (((x >> shift) + 1) << shift) - x
            else:
                key, room = x, 1
            # MTP: the context grows by tau (+1 of rounding) per step; stay inside the cell
            span = min(k_max - done, room if tau == 1 else max(1, math.floor((room - 1) / tau)))
            d = evaluate(Batch(n, key, ()))
            if not 0.0 < d < math.inf:  # the message is built only when it is raised
                require(False, f"iteration time ({d}) must be positive")
            if end + span * d >= t_arr:
                span = min(span, max(1, math.ceil((t_arr - end) / d)))
            last = segs[-1] if done else None
            if last is not None and last[1] == d:  # same duration: extend the segment
                segs[-1] = (*last[:2], last[2] + span, *last[3:])
            else:
                segs.append((end, d, span, n, 0, kv0 + done * n * tau, n * tau))
            done += span
            end += span * d
            if end >= t_arr:
                break
        self.kv_used += (done - 1) * n * tau
        self.pending = ([], n, done)
        return end

    def _alloc_decode(self) -> int:
        """Allocate one KV slot per decoding request, preempting the newest when full."""
        if self.n_dec == 0:
            return 0
        while self.kv_used + self.n_dec * self.tps > self.kv_cap:
            self._preempt(next(reversed(self.running)))
        self.kv_used += self.n_dec * self.tps
        return self.n_dec

    def _take_prefill(self, budget: int) -> tuple[list[tuple[int, int]], tuple, int]:
        """Prompt chunks for this iteration — requests being prefilled first, then admissions
        — as ``(request, tokens)``, as the priced ``(tokens, bucketed context)``, and their
        token total."""
        chunks: list[tuple[int, int]] = []
        pre: list[tuple[int, int]] = []
        left, at, budget0 = self.left, self.prefill_ctx, budget
        for r in self.prefilling:
            if budget <= 0:
                break
            q = left[r]
            if q > budget:
                q = budget
            chunks.append((r, q))
            c = at[r] + q
            s = c.bit_length() - 6  # bucket(c), inline
            pre.append((q, ((c >> s) << s) + (1 << (s - 1)) if s > 0 else c))
            budget -= q
        waiting, running = self.waiting, self.running
        if budget > 0 and waiting and len(running) < self.max_running:
            budget = self._admit(budget, chunks, pre)
        return chunks, tuple(pre), budget0 - budget

    def _admit(self, budget: int, chunks: list, pre: list) -> int:
        """Admit waiting requests in arrival order while the budget, ``max_running`` and the
        KV pool allow, each with its first chunk; the budget left."""
        waiting, produced = self.waiting, self.produced
        r = waiting[0]  # the loop's first test, alone: a full pool admits nobody (most calls)
        p = produced[r]
        need = self.isl[r] + p  # the same sum in the same order as the loop's (fresh = 0)
        if (
            self.kv_used
            + need
            + self.seq_kv
            + self.reserve * self.remaining
            + self.reserve_new * (self.osl[r] - p)
            > self.kv_cap
        ):
            return budget
        running, max_running = self.running, self.max_running
        isl, osl, cached = self.isl, self.osl, self.cached
        admit, state, left, at, prefilling = (
            self.admit,
            self.state,
            self.left,
            self.prefill_ctx,
            self.prefilling,
        )
        kv, remaining, reserve, cap, now, w = (
            self.kv_used,
            self.remaining,
            self.reserve,
            self.kv_cap,
            self.now,
            self.seq_kv,
        )
        room = max_running - len(running)  # admissions max_running allows
        # the running requests' outstanding output at ``reserve``, this iteration's
        # admissions' at ``reserve_new`` (run.py's docstring)
        held, new, fresh = reserve * remaining, self.reserve_new, 0.0
        while budget > 0 and waiting and room > 0:
            r = waiting[0]
            p = produced[r]
            need = isl[r] + p
            rem = osl[r] - p
            if kv + need + w + held + fresh + new * rem > cap:
                break
            fresh += new * rem
            waiting.popleft()
            if admit[r] != admit[r]:  # NaN: first admission
                admit[r] = now
            state[r] = PREFILL
            running[r] = None
            room -= 1
            kv += need + w
            remaining += rem
            c = cached[r]
            q = need - c
            left[r] = q
            at[r] = c
            prefilling.append(r)
            if q > budget:
                q = budget
            chunks.append((r, q))
            c += q
            s = c.bit_length() - 6  # bucket(c), inline
            pre.append((q, ((c >> s) << s) + (1 << (s - 1)) if s > 0 else c))
            budget -= q
        self.kv_used, self.remaining = kv, remaining
        return budget

    def _preempt(self, r: int) -> None:
        """Recompute preemption: free ``r``'s KV and put it back at the head of the queue."""
        if self.state[r] == DECODE:
            k = self.step - self.s0[r]
            ctx = self.base_ctx[r] + k * self.tps
            gained = min(int(k * self.tps), self.osl[r] - self.base_prod[r] - 1)
            self.remaining += k * self.tps - gained  # what the steps took beyond whole tokens
            self.out_tokens -= k * self.tps - gained
            self.produced[r] = self.base_prod[r] + gained
            self.n_dec -= 1
            self.sum_ctx -= ctx
            self.kv_used -= ctx + self.seq_kv
            if k > 0:
                self.last_tok[r] = self.last_dec_end
        else:
            self.kv_used -= self.isl[r] + self.produced[r] + self.seq_kv
            self.prefilling.remove(r)
        self.remaining -= self.osl[r] - self.produced[r]
        self.epoch[r] += 1
        self.state[r] = WAIT
        del self.running[r]
        self.waiting.appendleft(r)
        self.preemptions += 1
