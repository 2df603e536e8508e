"""The engine on a decode pool: every request arrives with all of its prompt but one token in
KV (a P/D decode instance: the prompt and the first token came over the link), open loop,
under the ``mixed`` policy, one token per decode step.

:class:`DecodePoolEngine` is :class:`moeplan.serve.engine.Engine` with the per-request steps
(admission, the prompt chunk's end, the last decode step) written for what they reduce to
here; the event loop, the iteration's forming and pricing and the decode fast-forward are the
general engine's own. Every field of the :class:`SimResult` is the same bit for bit
(``tests/test_serve_engine_decode.py`` checks it against the general engine):

- a request's prompt chunk is one token and fits any iteration's budget (the budget left
  after the decode tokens is positive whenever a request can be admitted: ``chunk_tokens >
  max_running``), so no request is ever part-way through its prompt between iterations, and
  every prompt token prefilled is a first-time one;
- the chunk's end produces the request's next token, so every request that enters decode at
  an iteration's end does so at the same instant (one ITL value for all of them at their
  first decode step) and leaves at a step known then (``osl - 1`` steps later), with
  ``isl + osl - 1`` tokens of KV;
- nothing is preempted while the pool has room for the next step's tokens. When it has not,
  the general engine's recompute preemption would start: :class:`NeedsPreemption` is raised
  and :func:`moeplan.serve.engine.simulate` runs the general engine from the start instead.
"""

from __future__ import annotations

import heapq

import numpy as np

from moeplan.serve.config import SimResult
from moeplan.serve.engine import Engine


class NeedsPreemption(Exception):  # noqa: N818 (a signal, not an error shown to anyone)
    """The pool has no room for the next decode step: the general engine must run."""


class DecodePoolEngine(Engine):
    """One run of a decode pool (module docstring); use :func:`moeplan.serve.engine.simulate`."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        assert self.mixed and self.tps == 1 and not self.r.closed
        isl = self.r.isl.astype(np.int64)
        shift = np.maximum(np.frexp(isl)[1] - 6, 0)  # frexp's exponent: int.bit_length
        half = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
        #: the one-token chunk's priced context: moeplan.serve.grid.bucket of the prompt
        self.key = np.where(shift > 0, ((isl >> shift) << shift) + half, isl).tolist()
        #: a request's KV at its last decode step
        self.ctx_end = (isl + self.r.osl.astype(np.int64) - 1).tolist()
        self.n_run = 0  # requests admitted and not finished
        self.entered = 0  # requests whose first token came at the last iteration's end
        self.entered_at = 0.0  # that end
        #: who takes their last decode step at each step of ``finishers``, in order of entry
        self.leaving: dict[int, list[int]] = {}

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

    def _take_prefill(self, budget: int) -> tuple[list, tuple, int]:
        if budget > 0 and self.waiting and self.n_run < self.max_running:
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
        room = self.max_running - self.n_run
        while budget > 0 and waiting and room > 0:
            r = waiting[0]
            need = isl[r]
            rem = osl[r]
            if kv + need + reserve * (remaining + rem) > cap:
                break
            waiting.popleft()
            admit[r] = now
            room -= 1
            kv += need
            remaining += rem
            chunks.append(r)
            pre.append((1, key[r]))
            budget -= 1
        self.n_run = self.max_running - room
        self.kv_used, self.remaining = kv, remaining
        return budget

    def _decode_done(self, t: float, n_dec: int, k: int) -> None:
        step = self.step = self.step + k
        self.sum_ctx += n_dec * k
        self.remaining -= n_dec * k
        self.out_tokens += n_dec * k
        first_end = self.segs[-1][0] + self.segs[-1][1] if k == 1 else self._first_end(k)
        fresh = self.entered
        if fresh:
            self.itl.extend([first_end - self.entered_at] * fresh)
            self.itl_w.extend([1] * fresh)
            self.entered = 0
        if n_dec > fresh:
            self.itl.append(first_end - self.last_dec_end)
            self.itl_w.append(n_dec - fresh)
        if k > 1:
            self._itl_segments(k)
        self.last_dec_end = t
        fin = self.finishers
        if fin and fin[0] <= step:
            self._decode_finish(t, step)

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
                self.kv_used -= isl[r]
                self.finish[r] = t
                self.n_run -= 1
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

    def _decode_finish(self, t: float, step: int) -> None:
        fin, due, ctx_end, finish = self.finishers, self.leaving, self.ctx_end, self.finish
        sum_ctx, kv, done, pop = self.sum_ctx, self.kv_used, 0, heapq.heappop
        while fin and fin[0] <= step:
            for r in due.pop(pop(fin)):
                c = ctx_end[r]
                sum_ctx -= c
                kv -= c
                finish[r] = t
                done += 1
        self.n_dec -= done
        self.n_run -= done
        self.sum_ctx, self.kv_used = sum_ctx, kv
