"""The engine while nothing is preempted: the general loop with its per-request steps reduced.

Until the KV pool first lacks room for a decode step, no request is preempted, and the
general engine's per-request steps after admission (:class:`moeplan.serve.engine.run.Engine`: a
prompt chunk's end, a request's last decode step) reduce to less:

- every request is admitted once, with nothing produced yet, so its prompt is prefilled once
  and every prompt token prefilled is a first-time one (nothing recomputed);
- a request that enters decode leaves at a step known then (``osl - 1`` steps later), with
  ``isl + osl - 1`` tokens of KV, still decoding at its first decode step.

:class:`UnpreemptedEngine` runs any open-loop stream of one token per decode step (no MTP)
so; :class:`DecodePoolEngine` further reduces a P/D decode instance's pool (every prompt in
KV but one token, ``mixed`` policy):

- a request's prompt chunk is one token and fits any iteration's budget, so admission is
  reduced too (the budget left
  after the decode tokens is positive whenever a request can be admitted: ``chunk_tokens >
  max_running``), so no request is ever part-way through its prompt between iterations;
- the chunk's end produces the request's next token, so every request that enters decode at
  an iteration's end does so at the same instant (one ITL value for all of them at their
  first decode step).

The event loop, the iteration's forming and pricing and the decode fast-forward are the
general engine's own. Every field of the :class:`SimResult` is the same bit for bit
(``tests/test_serve_engine_unpreempted.py`` checks both against the general engine). When the
pool has no room for the next step's tokens, the general engine's recompute preemption would
start: :class:`NeedsPreemption` is raised and :func:`moeplan.serve.engine.run.simulate` runs the
general engine from the start instead.
"""

from __future__ import annotations

import heapq

import numpy as np

from moeplan.serve.engine.config import SimResult
from moeplan.serve.engine.loop import Engine


class NeedsPreemption(Exception):  # noqa: N818 (a signal, not an error shown to anyone)
    """The pool has no room for the next decode step: the general engine must run."""


class UnpreemptedEngine(Engine):
    """One open-loop run, one token per decode step, while nothing is preempted (module
    docstring); use :func:`moeplan.serve.engine.run.simulate`."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        assert self.tps == 1 and not self.r.closed
        #: a request's KV at its last decode step
        self.ctx_end = (self.r.isl.astype(np.int64) + self.r.osl.astype(np.int64) - 1).tolist()
        #: who takes their last decode step at each step of ``finishers``, in order of entry
        self.leaving: dict[int, list[int]] = {}
        self.fresh: list[int] = []  # requests that entered decode since the last decode step

    def run(self) -> SimResult:
        return self._run_open()

    def _alloc_decode(self) -> int:
        n = self.n_dec
        if n == 0:
            return 0
        if self.kv_used + n > self.kv_cap:
            raise NeedsPreemption
        self.kv_used += n
        return n

    def _decode_done(self, t: float, n_dec: int, k: int) -> None:
        step = self.step = self.step + k
        self.sum_ctx += n_dec * k
        self.remaining -= n_dec * k
        self.out_tokens += n_dec * k
        first_end = self.segs[-1][0] + self.segs[-1][1] if k == 1 else self._first_end(k)
        fresh = self._fresh_itls(first_end)
        if n_dec > fresh:
            self.itl.append(first_end - self.last_dec_end)
            self.itl_w.append(n_dec - fresh)
        if k > 1:
            self._itl_segments(k)
        self.last_dec_end = t
        fin = self.finishers
        if fin and fin[0] <= step:
            self._decode_finish(t, step)

    def _fresh_itls(self, first_end: float) -> int:
        """The ITLs of the requests at their first decode step (it ended at ``first_end``):
        from their first token; how many they are."""
        fresh = len(self.fresh)
        if fresh:
            last_tok, itl = self.last_tok, self.itl
            for r in self.fresh:
                itl.append(first_end - last_tok[r])
            self.itl_w.extend([1] * fresh)
            self.fresh = []
        return fresh

    def _chunks_done(self, t: float, chunks: list) -> None:
        at, left, osl, first, last_tok = (
            self.prefill_ctx, self.left, self.osl, self.first, self.last_tok
        )  # fmt: skip
        pf, due, fin, fresh, push = (
            self.prefilling, self.leaving, self.finishers, self.fresh, heapq.heappush
        )  # fmt: skip
        n_dec, sum_ctx, step, tokens, done = self.n_dec, self.sum_ctx, self.step, 0, 0
        for r, q in chunks:
            tokens += q
            end = at[r] + q
            at[r] = end
            rest = left[r] - q
            left[r] = rest
            if rest:
                continue
            # the prompt is done: its first token is out
            if pf[0] == r:
                pf.popleft()
            else:
                pf.remove(r)
            done += 1
            first[r] = last_tok[r] = t
            o = osl[r]
            if o == 1:  # its only token: done, its KV freed
                self.kv_used -= end + self.seq_kv
                self.finish[r] = t
                del self.running[r]
                continue
            n_dec += 1
            sum_ctx += end
            last = step + o - 1  # its last decode step
            same = due.get(last)
            if same is None:
                due[last] = [r]
                push(fin, last)
            else:
                same.append(r)
            fresh.append(r)
        self.prefill_tokens += tokens
        self.remaining -= done
        self.out_tokens += done
        self.n_dec, self.sum_ctx = n_dec, sum_ctx

    def _decode_finish(self, t: float, step: int) -> None:
        fin, due, ctx_end, finish = self.finishers, self.leaving, self.ctx_end, self.finish
        sum_ctx, kv, done, pop, running = self.sum_ctx, self.kv_used, 0, heapq.heappop, self.running
        w = self.seq_kv
        while fin and fin[0] <= step:
            for r in due.pop(pop(fin)):
                c = ctx_end[r]
                sum_ctx -= c
                kv -= c + w
                finish[r] = t
                del running[r]
                done += 1
        self.n_dec -= done
        self.sum_ctx, self.kv_used = sum_ctx, kv


class DecodePoolEngine(UnpreemptedEngine):
    """One run of a decode pool (module docstring); use :func:`moeplan.serve.engine.run.simulate`."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        assert self.mixed
        isl = self.r.isl.astype(np.int64)
        shift = np.maximum(np.frexp(isl)[1] - 6, 0)  # frexp's exponent: int.bit_length
        half = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
        #: the one-token chunk's priced context: moeplan.serve.iteration.grid.bucket of the prompt
        self.key = np.where(shift > 0, ((isl >> shift) << shift) + half, isl).tolist()
        self.entered = 0  # requests whose first token came at the last iteration's end
        self.entered_at = 0.0  # that end

    def _take_prefill(self, budget: int) -> tuple[list, tuple, int]:
        if budget > 0 and self.waiting and len(self.running) < self.max_running:  # none part-way
            chunks: list[int] = []
            pre: list[tuple[int, int]] = []
            left = self._admit(budget, chunks, pre)
            return chunks, tuple(pre), budget - left
        return [], (), 0

    def _admit(self, budget: int, chunks: list, pre: list) -> int:
        waiting, isl, osl, key, admit = self.waiting, self.isl, self.osl, self.key, self.admit
        kv, remaining, reserve, cap, now = (
            self.kv_used, self.remaining, self.reserve, self.kv_cap, self.now
        )  # fmt: skip
        running = self.running
        room = self.max_running - len(running)
        held, new, fresh = reserve * remaining, self.reserve_new, 0.0  # as Engine._admit
        w = self.seq_kv
        while budget > 0 and waiting and room > 0:
            r = waiting[0]
            need = isl[r] + w
            rem = osl[r]
            if kv + need + held + fresh + new * rem > cap:
                break
            fresh += new * rem
            waiting.popleft()
            admit[r] = now
            running[r] = None
            room -= 1
            kv += need
            remaining += rem
            chunks.append(r)
            pre.append((1, key[r]))
            budget -= 1
        self.kv_used, self.remaining = kv, remaining
        return budget

    def _fresh_itls(self, first_end: float) -> int:
        fresh = self.entered  # all with their first token at one instant
        if fresh:
            self.itl.extend([first_end - self.entered_at] * fresh)
            self.itl_w.extend([1] * fresh)
            self.entered = 0
        return fresh

    def _chunks_done(self, t: float, chunks: list) -> None:
        first, osl, isl, due, fin = self.first, self.osl, self.isl, self.leaving, self.finishers
        n_dec, sum_ctx, step, push = self.n_dec, self.sum_ctx, self.step, heapq.heappush
        k = len(chunks)
        self.prefill_tokens += k
        self.remaining -= k
        self.out_tokens += k
        entered = 0
        for r in chunks:
            first[r] = t
            o = osl[r]
            if o == 1:  # its only token: done, its KV freed
                self.kv_used -= isl[r] + self.seq_kv
                self.finish[r] = t
                del self.running[r]
                continue
            n_dec += 1
            sum_ctx += isl[r]
            last = step + o - 1  # its last decode step
            same = due.get(last)
            if same is None:
                due[last] = [r]
                push(fin, last)
            else:
                same.append(r)
            entered += 1
        self.n_dec, self.sum_ctx = n_dec, sum_ctx
        self.entered, self.entered_at = entered, t
