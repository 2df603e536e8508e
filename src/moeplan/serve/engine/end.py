"""The serving engine at an iteration's end: decode steps done (ITL samples, finishes) and
prompt chunks done (first tokens, entries into decode); semantics in
:mod:`moeplan.serve.engine.run`."""

from __future__ import annotations

import heapq

from moeplan.serve.engine.state import DECODE, DONE, EngineState


class IterationEnd(EngineState):
    """What an iteration's end does to the run's state."""

    def _end(self, t: float) -> None:
        chunks, n_dec, k = self.pending
        if n_dec:
            self._decode_done(t, n_dec, k)
        if chunks:
            self._chunks_done(t, chunks)

    def _decode_done(self, t: float, n_dec: int, k: int) -> None:
        tps = self.tps
        step = self.step = self.step + k
        self.sum_ctx += n_dec * k * tps
        self.remaining -= n_dec * k * tps
        self.out_tokens += n_dec * k * tps
        first_end = self.segs[-1][0] + self.segs[-1][1] if k == 1 else self._first_end(k)
        itl, itl_w, epoch, state, last_tok = (
            self.itl,
            self.itl_w,
            self.epoch,
            self.state,
            self.last_tok,
        )
        fresh = 0
        if self.entrants:
            add, add_w = itl.append, itl_w.append
            for r, ep in self.entrants:
                if epoch[r] == ep and state[r] == DECODE:
                    add(first_end - last_tok[r])
                    add_w(1)
                    fresh += 1
            self.entrants = []
        if n_dec > fresh:
            itl.append(first_end - self.last_dec_end)
            itl_w.append(n_dec - fresh)
        if k > 1:
            self._itl_segments(k)
        self.last_dec_end = t
        fin = self.finishers
        if fin and fin[0] <= step:
            self._decode_finish(t, step)

    def _decode_finish(self, t: float, step: int) -> None:
        """Requests whose last decode step was ``step`` (or earlier) finish at ``t``."""
        fin, due, epoch, state, s0, osl, base_prod, base_ctx = (
            self.finishers, self.due, self.epoch, self.state, self.s0, self.osl, self.base_prod,
            self.base_ctx,
        )  # fmt: skip
        produced, running, finish, closed = self.produced, self.running, self.finish, self.r.closed
        remaining, out, n_dec, sum_ctx, kv = (
            self.remaining, self.out_tokens, self.n_dec, self.sum_ctx, self.kv_used
        )  # fmt: skip
        tps, pop, w = self.tps, heapq.heappop, self.seq_kv
        while fin and fin[0] <= step:
            for r, ep in due.pop(pop(fin)):  # by finishing step, then in order of entry
                if epoch[r] != ep or state[r] != DECODE:
                    continue  # preempted since
                j = step - s0[r]
                left = osl[r] - base_prod[r]
                assert j == (left if tps == 1 else self._steps(left)), "finished off-step"
                surplus = j * tps - left  # 0 without MTP
                remaining += surplus
                out -= surplus
                produced[r] = osl[r]
                n_dec -= 1
                ctx = base_ctx[r] + j * tps
                sum_ctx -= ctx
                kv -= ctx + w  # the request's KV is freed (as in :meth:`_finish`)
                del running[r]
                state[r] = DONE
                finish[r] = t
                if closed:  # its client's next request (touches none of the locals)
                    self._push_arrival(t)
        self.remaining, self.out_tokens, self.n_dec, self.sum_ctx, self.kv_used = (
            remaining, out, n_dec, sum_ctx, kv
        )  # fmt: skip

    def _first_end(self, k: int) -> float:
        """End time of the first of the last ``k`` decode steps (their segments are last)."""
        i, left = len(self.segs) - 1, k
        while self.segs[i][2] < left:
            left -= self.segs[i][2]
            i -= 1
        t0, d, count = self.segs[i][:3]
        return t0 + d * (count - left + 1)

    def _itl_segments(self, k: int) -> None:
        """Gaps of steps 2..k of a fast-forward: each step's duration, for every sequence."""
        i, left = len(self.segs) - 1, k
        while left > 0:
            _, d, count, n = self.segs[i][:4]
            steps = min(count, left) - (1 if left <= count else 0)
            if steps > 0:
                self.itl.append(d)
                self.itl_w.append(steps * n)
            left -= count
            i -= 1

    def _chunks_done(self, t: float, chunks: list[tuple[int, int]]) -> None:
        """The chunks' prompt tokens are in KV (first-time or recomputed); a request whose
        prompt is done has its next token at ``t`` and decodes from the next step, or ends
        (one pass over the chunks: the two parts touch different state)."""
        at, left, hi, isl = self.prefill_ctx, self.left, self.hi, self.isl
        fresh_all, recomputed = self.prefill_tokens, self.recomputed
        pf, produced, osl, first, last_tok, state = (
            self.prefilling, self.produced, self.osl, self.first, self.last_tok, self.state
        )  # fmt: skip
        base_ctx, base_prod, s0, epoch, fin, due, entrants = (
            self.base_ctx, self.base_prod, self.s0, self.epoch, self.finishers, self.due,
            self.entrants,
        )  # fmt: skip
        remaining, out, n_dec, sum_ctx = self.remaining, self.out_tokens, self.n_dec, self.sum_ctx
        step, tps, push = self.step, self.tps, heapq.heappush
        for r, q in chunks:
            start = at[r]
            end = start + q
            top, h = isl[r], hi[r]
            if end < top:
                top = end
            fresh = top - (start if start > h else h)
            if fresh < 0:
                fresh = 0
            if top > h:
                hi[r] = top
            fresh_all += fresh
            recomputed += q - fresh
            at[r] = end
            rest = left[r] - q
            left[r] = rest
            if rest:
                continue
            # the prompt (recomputed tokens included) is done: its next token is out
            if pf[0] == r:
                pf.popleft()
            else:
                pf.remove(r)
            p = produced[r] = produced[r] + 1
            remaining -= 1
            out += 1
            if first[r] != first[r]:  # NaN: the first token
                first[r] = t
            else:  # a recomputed prompt: its next token
                self.itl.append(t - last_tok[r])
                self.itl_w.append(1)
                self.resumed.append(t)
            last_tok[r] = t
            o = osl[r]
            if p == o:
                self._finish(r, t, end)
                continue
            state[r] = DECODE
            base_ctx[r], base_prod[r], s0[r] = end, p, step
            n_dec += 1
            sum_ctx += end
            ep = epoch[r]
            last = step + (o - p if tps == 1 else self._steps(o - p))  # its last decode step
            same = due.get(last)
            if same is None:
                due[last] = [(r, ep)]
                push(fin, last)
            else:
                same.append((r, ep))
            entrants.append((r, ep))
        self.prefill_tokens, self.recomputed = fresh_all, recomputed
        self.remaining, self.out_tokens, self.n_dec, self.sum_ctx = remaining, out, n_dec, sum_ctx
