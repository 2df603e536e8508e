"""The serving engine's per-run state (:class:`EngineState`): request columns, queues,
counters and the iteration record, and the result it becomes; the event loop and the
scheduler are in :mod:`moeplan.serve.engine.run`, iteration ends in :mod:`.engine_end`."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from moeplan.errors import require
from moeplan.serve.engine.config import EngineConfig, Evaluator, SimResult
from moeplan.serve.workload.arrivals import Requests

ARRIVAL, ITER_END = 0, 1
WAIT, PREFILL, DECODE, DONE = 0, 1, 2, 3


def tokens_per_step(evaluate: Evaluator) -> float:
    """Expected tokens a decoding sequence gains per decode step under ``evaluate``: its
    knobs' ``tokens_per_step`` when it prices multi-token prediction (``knobs.mtp > 0``),
    else the int 1. The engine, the capacity bounds and the analytic estimates all ask here.
    A wrapper (e.g. :class:`moeplan.serve.iteration.batch_grid.GridEvaluator`) is looked through via
    its ``inner`` evaluator."""
    while getattr(evaluate, "knobs", None) is None and hasattr(evaluate, "inner"):
        evaluate = evaluate.inner  # type: ignore[attr-defined]
    knobs = getattr(evaluate, "knobs", None)
    if knobs is None or not getattr(knobs, "mtp", 0):
        return 1
    return float(knobs.tokens_per_step)


def one_token_prompts(isl: np.ndarray, cached: np.ndarray, osl: np.ndarray) -> bool:
    """Whether every request has all of its prompt but one token cached and some request
    decodes (the requests :class:`moeplan.serve.engine.unpreempted.DecodePoolEngine` runs)."""
    return len(isl) > 0 and int(osl.max()) > 1 and bool(np.all(isl - cached == 1))


class EngineState:
    """One simulation run's state; :class:`moeplan.serve.engine.run.Engine` runs it."""

    def __init__(
        self,
        reqs: Requests,
        cfg: EngineConfig,
        evaluate: Evaluator,
        fast_forward: bool = True,
        horizon_s: float | None = None,
        stop: Callable[[Any], bool] | None = None,
    ) -> None:
        big = int(np.max(reqs.isl + reqs.osl)) + cfg.seq_kv
        require(
            big <= cfg.kv_tokens_per_rank,
            f"request isl+osl ({big}) must fit the KV pool of one rank "
            f"({cfg.kv_tokens_per_rank} tokens)",
        )
        self.r, self.cfg, self.evaluate = reqs, cfg, evaluate
        #: tokens per decode step (int 1 without MTP: the integer arithmetic stays exact)
        self.tps = tokens_per_step(evaluate)
        n = len(reqs)
        self.isl, self.osl = reqs.isl.tolist(), reqs.osl.tolist()
        self.cached = reqs.cached.tolist()
        self.arrival = reqs.arrival_s.tolist()
        self.first = [math.nan] * n
        self.admit = [math.nan] * n
        self.now = 0.0
        self.finish = [math.nan] * n
        self.state = [WAIT] * n
        self.produced = [0] * n
        self.left = [0] * n  # prompt tokens still to prefill
        self.prefill_ctx = [0] * n
        self.base_ctx = [0] * n
        self.base_prod = [0] * n
        self.s0 = [0] * n
        self.epoch = [0] * n
        self.last_tok = [0.0] * n
        self.hi = reqs.cached.tolist()  # highest prompt position ever prefilled
        self.last_dec_end = 0.0
        self.pending: tuple[list[tuple[int, int]], int, int] = ([], 0, 0)
        self.waiting: deque[int] = deque()
        self.prefilling: deque[int] = deque()
        self.running: dict[int, None] = {}
        self.entrants: list[tuple[int, int]] = []
        #: decode steps at which some decoding request takes its last step (a heap), and
        #: who, ``(request, epoch)`` in order of entry into decode (stale after a preemption)
        self.finishers: list[int] = []
        self.due: dict[int, list[tuple[int, int]]] = {}
        self.n_dec = 0
        # token counts that turn fractional under MTP (tokens_per_step a float)
        self.sum_ctx: float = 0
        self.kv_used: float = 0
        self.remaining: float = 0
        self.step = 0  # decode steps executed
        self.seq = 0  # event heap tie-break (closed loop)
        self.heap: list[tuple[float, int, int, int]] = []
        self.next_arrival = 0
        self.preemptions = self.prefill_tokens = self.recomputed = 0
        self.out_tokens: float = 0
        self.segs: list[tuple[float, float, int, int, int, float, float]] = []
        self.fast = fast_forward
        self.horizon = math.inf if horizon_s is None else horizon_s
        self.stop = stop
        self.itl: list[float] = []
        self.itl_w: list[int] = []
        self.resumed: list[float] = []  # SimResult.resumed_s
        # the scheduler's knobs, read once per iteration
        self.mixed = cfg.policy == "mixed"
        self.budget = cfg.chunk_tokens or (1 << 62)
        self.kv_cap = cfg.kv_tokens
        self.seq_kv = cfg.seq_kv  # held from admission to the end besides the context
        self.reserve = cfg.admit_reserve
        r_new = cfg.admit_reserve_new
        self.reserve_new = cfg.admit_reserve if r_new is None else r_new
        self.max_running = cfg.max_running
        #: every request has one output token (a P/D prefill instance): :mod:`.engine_prefill`
        self.prefill_only = int(reqs.osl.max()) == 1

    def _push(self, t: float, prio: int, x: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, x))

    def _push_arrival(self, t: float) -> None:
        """Queue the next request at ``t`` plus its think time (``t``: when its client's
        previous request finished, or 0), not before its due time (``Requests.due_s``)."""
        i = self.next_arrival
        if i < len(self.arrival):
            think, due = self.r.think_s, self.r.due_s
            self.arrival[i] = t + (0.0 if think is None else float(think[i]))
            if due is not None and due[i] > self.arrival[i]:
                self.arrival[i] = float(due[i])
            self._push(self.arrival[i], ARRIVAL, i)
            self.next_arrival = i + 1

    def _steps(self, tokens: int) -> int:
        """Decode steps that produce ``tokens`` tokens (``tokens`` itself without MTP)."""
        return tokens if self.tps == 1 else math.ceil(tokens / self.tps - 1e-9)

    def _finish(self, r: int, t: float, ctx: float) -> None:
        self.kv_used -= ctx + self.seq_kv
        del self.running[r]
        self.state[r] = DONE
        self.finish[r] = t
        if self.r.closed:
            self._push_arrival(t)

    def _result(self) -> SimResult:
        f = np.asarray
        t0, d, count, dec, pre, kv0, kv_step = (f(c) for c in zip(*self.segs, strict=True))
        idx = np.repeat(np.arange(len(count)), count)
        j = np.arange(len(idx)) - np.repeat(np.cumsum(count) - count, count)
        start = t0[idx] + d[idx] * j
        return SimResult(
            arrival_s=f(self.arrival),
            admit_s=f(self.admit),
            first_token_s=f(self.first),
            finish_s=f(self.finish),
            isl=self.r.isl,
            osl=self.r.osl,
            iter_start_s=start,
            iter_end_s=start + d[idx],
            iter_decode=dec[idx],
            iter_prefill=pre[idx],
            iter_kv=kv0[idx] + kv_step[idx] * j,
            itl_s=f(self.itl),
            itl_weight=f(self.itl_w, dtype=np.int64),
            kv_capacity=self.cfg.kv_tokens,
            preemptions=self.preemptions,
            prefill_tokens=self.prefill_tokens,
            recomputed_tokens=self.recomputed,
            output_tokens=round(self.out_tokens),
            resumed_s=f(self.resumed, dtype=float),
        )
