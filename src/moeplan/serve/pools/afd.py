"""Attention–FFN disaggregated decode instances (MegaScale-Infer, Step-3) on FinDEP's schedule.

An AFD decode instance is ``ag`` attention GPUs (attention DP, each with its own KV pool and
a replica of the non-expert weights) and ``eg`` expert GPUs (``E/eg`` routed experts each).
One engine iteration is one decode step of the running batch: FinDEP's task graph
(:mod:`moeplan.planners.dep.schedule`) with ping-pong micro-batches ``r1``, expert chunks
``r2`` and AG order ASAS/AASS, A2E/E2A every layer.

:class:`AFDIteration` is an evaluator ``Batch -> seconds`` for :mod:`moeplan.serve.engine.run`
(so the same continuous-batching engine runs it). Per iteration shape — sequences per AG GPU
``b`` (rounded *up* to a grid of relative step 1/16, exact below 32) and mean context
``ctx`` (bucketed by the engine) — it runs FinDEP's online phase (§4.3: Algorithm 1,
:func:`moeplan.planners.dep.solver.solve`, on :func:`moeplan.planners.dep.decode.decode_problem`),
memoised per ``(b, ctx rounded up to a relative step of 1/4)``: the pick (``r1``, ``r2``,
order) is shared by the contexts of one coarse bucket and then timed exactly at the
engine's context by the schedule evaluator. Algorithm 1 maximises tokens/s under ``r1·ma <= b``; when its pick
covers fewer than ``b`` sequences, the step runs the picked ``(r1, r2, order)`` with
``ma = ceil(b / r1)`` (the last micro-batches padded) and is timed by the exact schedule
evaluator. The lm-head GEMM of ``b`` rows is added on the AG (not overlapped).

Departures: a one-token prefill chunk in the batch (the decode pool's first step of a request
arriving with its KV) is a decode sequence here; longer prefill chunks are refused — AFD
instances only decode (:mod:`moeplan.serve.pools.pd` puts them behind a prefill pool).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from moeplan.cost import CostModel
from moeplan.errors import require
from moeplan.planners.dep.decode import ag_kv_tokens, check_fits, decode_problem
from moeplan.planners.dep.schedule import DepConfig
from moeplan.planners.dep.solver import DepResult, evaluate, solve
from moeplan.serve.engine.config import EngineConfig
from moeplan.serve.iteration.model import Batch
from moeplan.specs import ClusterSpec, ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class AFDLayout:
    """One AFD decode instance: ``ag`` attention GPUs + ``eg`` expert GPUs."""

    ag: int
    eg: int
    gpus: int = field(init=False)

    def __post_init__(self) -> None:
        for f in ("ag", "eg"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1, f"afd.{f} ({v!r}) must be a positive integer")
        object.__setattr__(self, "gpus", self.ag + self.eg)

    @property
    def label(self) -> str:
        return f"AFD AG{self.ag}+EG{self.eg}"

    @property
    def moe_ep(self) -> int:
        """Expert GPUs (the expert-parallel degree of the instance)."""
        return self.eg

    def to_dict(self) -> dict[str, int | str]:
        return {"kind": "afd", "ag": self.ag, "eg": self.eg, "gpus": self.gpus}


def bucket_up(n: int) -> int:
    """``n`` rounded up to a grid of relative step 1/16 (exact below 32)."""
    s = n.bit_length() - 5
    if s <= 0:
        return n
    return ((n + (1 << s) - 1) >> s) << s


def coarse_ctx(ctx: int) -> int:
    """``ctx`` rounded up to a grid of relative step 1/4 (the online solve's memo key)."""
    s = ctx.bit_length() - 3
    if s <= 0:
        return ctx
    return ((ctx + (1 << s) - 1) >> s) << s


class AFDIteration:
    """Seconds per decode step of an AFD instance (module docstring); memoised per shape."""

    def __init__(
        self, model: ModelSpec, cluster: ClusterSpec, cost: CostModel, layout: AFDLayout
    ) -> None:
        check_fits(model, cluster, layout.ag, layout.eg)
        self.model, self.cluster, self.cost, self.layout = model, cluster, cost, layout
        self._cache: dict[tuple[int, int], float] = {}
        self._picks: dict[tuple[int, int], DepResult] = {}

    def __call__(self, batch: Batch) -> float:
        seqs, ctx = self._shape(batch)
        if seqs == 0:
            return 0.0
        b = bucket_up(-(-seqs // self.layout.ag))
        key = (b, max(1, ctx))
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._step(*key)
        return t

    @staticmethod
    def _shape(batch: Batch) -> tuple[int, int]:
        """Sequences and their mean context; one-token chunks count as decode sequences."""
        require(
            all(q == 1 for q, _ in batch.prefill),
            "an AFD decode instance runs decode steps only (prefill chunks of > 1 token)",
        )
        n = batch.decode + len(batch.prefill)
        if n == 0:
            return 0, 0
        keys = batch.decode * batch.decode_ctx + sum(c for _, c in batch.prefill)
        return n, (keys + n // 2) // n

    def pick(self, b: int, ctx: int) -> DepResult:
        """Algorithm 1's configuration for ``b`` sequences per AG GPU at ``ctx`` keys."""
        key = (b, ctx)
        hit = self._picks.get(key)
        if hit is None:
            hit = self._picks[key] = solve(self.problem(b, ctx))
        return hit

    def problem(self, b: int, ctx: int):  # type: ignore[no-untyped-def]
        lay = self.layout
        return decode_problem(
            self.model, self.cluster, self.cost, ag=lay.ag, eg=lay.eg, batch=b, ctx=ctx
        )

    def _step(self, b: int, ctx: int) -> float:
        coarse = coarse_ctx(ctx)
        res = self.pick(b, coarse)
        c = res.config
        span = res.makespan
        if c.r1 * c.ma < b or coarse != ctx:
            run = DepConfig(ma=math.ceil(b / c.r1), r1=c.r1, r2=c.r2, order=c.order)
            span = evaluate(self.problem(b, ctx), run)
        md = self.model
        return span + self.cost.gemm(b, md.vocab_size, md.hidden_size)

    @property
    def cache_size(self) -> int:
        return len(self._cache)


def afd_engine_config(
    model: ModelSpec, cluster: ClusterSpec, layout: AFDLayout, cap: int, reserve: float
) -> EngineConfig:
    """Decode-pool scheduler of an AFD instance: mixed batches (arrivals join the running
    batch), ``cap`` running sequences, one KV pool per AG GPU."""
    per_ag = -(-cap // layout.ag)
    per_rank = ag_kv_tokens(model, cluster, layout.ag, layout.eg, per_ag)
    require(per_rank >= 1, f"{layout.label}: no memory left for KV cache on the AG")
    return decode_engine_config(cap, per_rank, layout.ag, reserve)


def decode_engine_config(cap: int, per_rank: int, ranks: int, reserve: float) -> EngineConfig:
    """A decode pool's scheduler: mixed batches with room for every running sequence plus
    one arrival's one-token step, ``cap`` running, ``ranks`` KV pools of ``per_rank``."""
    return EngineConfig(
        policy="mixed",
        chunk_tokens=cap + 1,
        max_running=cap,
        kv_tokens=per_rank * ranks,
        kv_tokens_per_rank=per_rank,
        admit_reserve=reserve,
    )
