"""FinDEP: fine-grained scheduling of disaggregated expert parallelism (paper 000, §3–§4).

Attention (+ shared experts) run on ``ag`` GPUs, routed experts on ``eg`` GPUs. A prompt batch
is cut into ``r1`` micro-batches of ``ma`` prompts per AG GPU, and the expert part of each
micro-batch into ``r2`` chunks of ``me`` tokens per expert; the AG runs its attention (A) and
shared-expert (S) tasks in order ``ASAS`` or ``AASS``. The task graph, its exact fast
makespan and the paper's closed form (Eqs. 12–13, corrected) are in
:mod:`moeplan.planners.dep.schedule`; durations and memory in
:mod:`moeplan.planners.dep.problem`; brute force and CP-SAT in :mod:`moeplan.planners.dep.verify`.

What is here:

- :func:`solve` — Algorithm 1: ``ma`` from the memory cap down, ``r1`` = the largest that
  fits memory, skip an ``r1`` already seen (Pareto), both orders, best ``r2``. Departure: every
  ``r2 <= r2_max`` is scanned (:func:`best_r2`) instead of relying on Theorem 4's convexity in
  ``1/r2`` — tile-padded GEMMs break unimodality (the findep-c counter-example lost
  3.5 % to a binary search). ASAS candidates are scored by the corrected closed form, which is the exact
  simulated makespan (``_dep_schedule``). AASS candidates are ranked by our closed-form
  analogue (``aass_estimate``: exact on 99.6 % of a random sweep, never above), skipped
  when it cannot beat the incumbent, and otherwise refined with the exact O(r1)-per-layer
  recurrence; the returned makespan is always exact. A ``(ma, r1)`` pair whose AG work alone
  (:func:`ag_bound`) caps its throughput below the incumbent is skipped before any ``r2`` is
  priced: it cannot change the incumbent, so the answer is unchanged, and a cold solve asks
  the cost model for ~20 % fewer task times (cold solve 12.5 ms vs a 10 ms target).
- :func:`search_groups` — the offline phase: every ``(ag, eg)`` split of a GPU budget.
- :class:`OnlineSolver` — the online phase: ``solve(seq_len)`` re-plans per prompt length
  for a fixed ``(ag, eg)``, caching results per length.
- Baselines on the same simulator, each with its best knobs by brute force:
  :func:`pppipe` (MegaScale-Infer: ``r2 = 1``, shared expert inside the attention task, A2E
  after it; best ``(ma, r1)``) and :func:`naive` (``r1 = r2 = 1``, same fused task; best
  ``ma``).

Findings (tests pin them; tables and commands in docs/benchmarks/dep.md):

- The corrected closed form equals the simulator for ASAS (``_dep_schedule``); Eq. 13 as
  printed double-counts ``(r2-1)·Y`` and is off by up to 69 %.
- Algorithm 1 solves a paper instance in ~2.3 ms (median, max 2.7 ms), ~300x faster than
  brute force over the grid.
- Theorems 1–3 hold on the exact simulator for the paper's linear (α-β) cost models
  (property tests on random instances). Theorem 1 fails once GEMMs are padded to tiles (as
  real kernels and the roofline cost model do): a pinned counter-example loses >10 % going
  from ma = 6 to ma = 7; on the paper's grid the dips are ≤ 2.1 %. Algorithm 1's "largest
  ma first, skip repeated r1" is then a heuristic — its pick stayed within 0.2 % of brute force
  over the whole (ma, r1, r2, order) grid on all 32 paper instances at every batch cap tried,
  and within 0 % at the default cap.
- ASAS/AASS against the CP-SAT optimum with free order on every resource (2 layers,
  r1, r2 ≤ 4): the better of the two is optimal on 59/60 random instances, at most 6.9 %
  above; ASAS alone up to 11.6 %, AASS alone up to 6.9 %.
- FinDEP is never slower than PPPipe (PPPipe's graph is FinDEP's ASAS, r2 = 1 graph plus an
  edge). Its edge depends on how many prompts are in flight: 1.04–1.95× at one prompt per
  AG GPU, ≤ 1.7 % at a batch cap of 64, where every schedule is resource-bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from moeplan.errors import MoeplanError
from moeplan.planners.dep.problem import DepProblem, alpha_beta_problem, dep_problem
from moeplan.planners.dep.schedule import (
    ORDERS,
    DepConfig,
    DepTimes,
    aass_estimate,
    build_graph,
    closed_form_applies,
    closed_form_makespan,
    makespan,
)

__all__ = [
    "ORDERS",
    "DepConfig",
    "DepProblem",
    "DepResult",
    "DepTimes",
    "OnlineSolver",
    "alpha_beta_problem",
    "brute_force",
    "dep_problem",
    "evaluate",
    "naive",
    "pppipe",
    "search_groups",
    "solve",
]

Evaluator = Callable[[DepProblem, DepConfig, str], float]


@dataclass(frozen=True, kw_only=True, slots=True)
class DepResult:
    """A configuration of ``variant`` (findep, pppipe, naive) and its predicted iteration."""

    variant: str
    config: DepConfig
    makespan: float  # seconds per iteration (all layers, r1 micro-batches)
    tokens: int  # prompt tokens per iteration over the AG
    times: DepTimes
    me: float  # tokens per expert per chunk
    evaluations: int = 0
    solve_s: float = 0.0

    @property
    def throughput(self) -> float:
        """Prompt tokens per second of the whole deployment."""
        return self.tokens / self.makespan

    def config_dict(self, problem: DepProblem) -> dict[str, object]:
        c = self.config
        return {
            "ma": c.ma,
            "r1": c.r1,
            "r2": c.r2,
            "me": self.me,
            "order": c.order,
            "ag": problem.ag,
            "eg": problem.eg,
        }


def evaluate(problem: DepProblem, cfg: DepConfig, variant: str = "findep") -> float:
    """Makespan (s) of ``cfg``'s semi-active schedule, exactly as the simulator computes it."""
    times = problem.times(cfg.ma, cfg.r2)
    if variant == "findep" and closed_form_applies(times, cfg, problem.dense_layers):
        return closed_form_makespan(times, cfg.r1, cfg.r2, problem.layers, problem.dense_layers)
    return makespan(times, cfg, problem.layers, problem.dense_layers, variant)


_exact = evaluate


def _result(
    problem: DepProblem, variant: str, cfg: DepConfig, span: float, evals: int, t0: float
) -> DepResult:
    return DepResult(
        variant=variant,
        config=cfg,
        makespan=span,
        tokens=problem.tokens(cfg.ma, cfg.r1),
        times=problem.times(cfg.ma, cfg.r2),
        me=cfg.ma * problem.me_per_ma / cfg.r2,
        evaluations=evals,
        solve_s=time.perf_counter() - t0,
    )


def best_r2(
    problem: DepProblem,
    ma: int,
    r1: int,
    order: str,
    evaluate: Evaluator = evaluate,
    lower: Evaluator | None = None,
    variant: str = "findep",
    incumbent: float = math.inf,
) -> tuple[int, float, int]:
    """``(r2, makespan, evaluations)`` minimizing the makespan for fixed ``(ma, r1, order)``.

    Every ``r2`` in ``1..r2_max`` is considered: tile-padded GEMMs make the makespan
    non-unimodal in ``r2`` (0.886, 0.929, 0.928, 1.020, … with the minimum at
    ``r2 = 1``), so Theorem 4's convexity cannot be used to stop early. Without ``lower``
    every ``r2`` is evaluated. With ``lower`` (an O(1) bound never above the exact makespan,
    e.g. :func:`aass_estimate`), candidates are evaluated exactly in increasing order of
    their bound until the bound reaches the best exact makespan or ``incumbent`` — the result
    is the same as the full exact scan (branch and bound). Returns ``(0, inf, n)`` when every
    bound is at least ``incumbent``.
    """
    rng = range(1, problem.r2_max + 1)
    if evaluate is _exact and variant == "findep" and order == "ASAS":
        return _best_r2_asas(problem, ma, r1, rng)
    if lower is None:
        spans = [
            (evaluate(problem, DepConfig(ma=ma, r1=r1, r2=r2, order=order), variant), r2)
            for r2 in rng
        ]
        span, r2 = min(spans)
        return r2, span, len(spans)
    if lower is _aass_screen:  # the same estimate, without a DepConfig per r2
        layers, dense = problem.layers, problem.dense_layers
        bounds = sorted(
            (aass_estimate(problem.times(ma, r2), r1, r2, layers, dense), r2) for r2 in rng
        )
    else:
        bounds = sorted(
            (lower(problem, DepConfig(ma=ma, r1=r1, r2=r2, order=order), variant), r2) for r2 in rng
        )
    best, evals = (math.inf, 0), 0
    for bound, r2 in bounds:
        if bound >= min(best[0], incumbent):
            break
        span = evaluate(problem, DepConfig(ma=ma, r1=r1, r2=r2, order=order), variant)
        evals += 1
        best = min(best, (span, r2))
    return best[1], best[0], evals


def _best_r2_asas(problem: DepProblem, ma: int, r1: int, rng: range) -> tuple[int, float, int]:
    """:func:`best_r2` for ASAS with the exact evaluator, without building a DepConfig per
    ``r2``: the same :func:`evaluate` arithmetic (closed form when it applies)."""
    best = (math.inf, 0)
    for r2 in rng:
        t = problem.times(ma, r2)
        if t.a2e == t.e2a:  # closed_form_applies for ASAS
            span = closed_form_makespan(t, r1, r2, problem.layers, problem.dense_layers)
        else:
            cfg = DepConfig(ma=ma, r1=r1, r2=r2, order="ASAS")
            span = makespan(t, cfg, problem.layers, problem.dense_layers, "findep")
        best = min(best, (span, r2))
    return best[1], best[0], len(rng)


def _aass_screen(problem: DepProblem, cfg: DepConfig, variant: str) -> float:
    """Evaluator for ranking AASS candidates cheaply (:func:`aass_estimate`)."""
    t = problem.times(cfg.ma, cfg.r2)
    return aass_estimate(t, cfg.r1, cfg.r2, problem.layers, problem.dense_layers)


#: a pair is skipped when its throughput bound is below the incumbent by this factor: the
#: 1e-9 margin keeps float rounding in the bound from skipping a pair that could tie
SKIP = 1 - 1e-9


def pareto_pairs(problem: DepProblem) -> list[tuple[int, int]]:
    """Algorithm 1's ``(ma, r1)`` candidates: ``ma`` from the memory cap down, ``r1`` = the
    largest that fits, a repeated ``r1`` skipped (not on the Pareto front)."""
    pairs, prev_r1 = [], 0
    for ma in range(problem.ma_max, 0, -1):
        r1 = problem.max_r1(ma)
        if r1 and r1 != prev_r1:
            pairs.append((ma, r1))
            prev_r1 = r1
    return pairs


def ag_bound(problem: DepProblem, ma: int, r1: int) -> float:
    """Seconds of work on the AG for ``(ma, r1)``: every A, S (and dense D) task runs on
    that one resource, so no schedule of any ``r2`` or order is shorter. ``t_a``, ``t_s``
    and ``t_dense`` depend on ``ma`` only (FinDEP §3.2), so ``r2 = 1`` gives them."""
    t = problem.times(ma, 1)
    return r1 * (problem.dense_layers * t.dense + problem.layers * (t.attn + t.shared))


def solve(
    problem: DepProblem, *, orders: Iterable[str] = ORDERS, evaluate: Evaluator = evaluate
) -> DepResult:
    """Algorithm 1 (see module docstring); raises ``ValueError`` if nothing fits.

    With the default (exact) evaluator, AASS candidates are first ranked by
    :func:`aass_estimate` (O(1), never above the exact makespan); an order whose estimate cannot
    beat the incumbent is skipped, otherwise its ``r2`` values are evaluated exactly in
    increasing order of the estimate (branch and bound, :func:`best_r2`). A pair whose
    throughput bound (:func:`ag_bound`) is below the incumbent is skipped unevaluated: it
    cannot change the incumbent, so the answer is the same, and the cold solve — whose cost
    is the cost model's task times per ``(ma, r2)`` — asks for one instead of ``r2_max``.
    Other evaluators are used as given for every pair, order and ``r2``.
    """
    screen = evaluate is _exact
    t0 = time.perf_counter()
    best: tuple[float, DepConfig, float] | None = None
    evals = 0
    pairs = pareto_pairs(problem)
    if problem.prefetch is not None:  # the expert times of every candidate in one pass
        problem.prefetch([(ma, r2) for ma, _ in pairs for r2 in range(1, problem.r2_max + 1)])
    for ma, r1 in pairs:
        tokens = problem.tokens(ma, r1)
        if screen and best is not None and tokens / ag_bound(problem, ma, r1) < best[0] * SKIP:
            continue
        for order in orders:
            lower = _aass_screen if screen and order == "AASS" else None
            incumbent = math.inf if best is None else tokens / best[0]
            r2, span, n = best_r2(problem, ma, r1, order, evaluate, lower, incumbent=incumbent)
            evals += n
            if r2 and (best is None or tokens / span > best[0]):
                best = (tokens / span, DepConfig(ma=ma, r1=r1, r2=r2, order=order), span)
    if best is None:
        raise MoeplanError(f"{problem.label}: no (ma, r1) fits memory")
    return _result(problem, "findep", best[1], best[2], evals, t0)


def _grid_best(
    problem: DepProblem, variant: str, configs: Iterable[DepConfig], evaluate: Evaluator
) -> DepResult:
    t0 = time.perf_counter()
    best: tuple[float, DepConfig, float] | None = None
    n = 0
    for cfg in configs:
        span = evaluate(problem, cfg, "findep" if variant == "findep" else "pppipe")
        n += 1
        tps = problem.tokens(cfg.ma, cfg.r1) / span
        if best is None or tps > best[0]:
            best = (tps, cfg, span)
    if best is None:
        raise MoeplanError(f"{problem.label}: no (ma, r1) fits memory")
    return _result(problem, variant, best[1], best[2], n, t0)


def feasible_pairs(problem: DepProblem) -> list[tuple[int, int]]:
    """Every ``(ma, r1)`` that fits memory and the batch cap."""
    return [
        (ma, r1) for ma in range(1, problem.ma_max + 1) for r1 in range(1, problem.max_r1(ma) + 1)
    ]


def pppipe(problem: DepProblem, evaluate: Evaluator = evaluate) -> DepResult:
    """Best PPPipe (MegaScale-Infer ping-pong pipeline) by brute force over ``(ma, r1)``."""
    cfgs = (DepConfig(ma=ma, r1=r1, r2=1) for ma, r1 in feasible_pairs(problem))
    return _grid_best(problem, "pppipe", cfgs, evaluate)


def naive(problem: DepProblem, evaluate: Evaluator = evaluate) -> DepResult:
    """Best naive DEP (no pipelining: ``r1 = r2 = 1``, shared expert in the attention task)."""
    cfgs = (DepConfig(ma=ma, r1=1, r2=1) for ma in range(1, problem.ma_max + 1))
    return _grid_best(problem, "naive", cfgs, evaluate)


def brute_force(problem: DepProblem, evaluate: Evaluator = evaluate) -> DepResult:
    """Best FinDEP configuration over the whole (ma, r1, r2, order) grid."""
    if problem.prefetch is not None:
        mas = range(1, problem.ma_max + 1)
        problem.prefetch([(ma, r2) for ma in mas for r2 in range(1, problem.r2_max + 1)])
    cfgs = (
        DepConfig(ma=ma, r1=r1, r2=r2, order=o)
        for ma, r1 in feasible_pairs(problem)
        for r2 in range(1, problem.r2_max + 1)
        for o in ORDERS
    )
    return _grid_best(problem, "findep", cfgs, evaluate)


def schedule(problem: DepProblem, result: DepResult, layers: int | None = None):
    """The simulated :class:`moeplan.sim.Schedule` of ``result`` (optionally fewer layers)."""
    from moeplan.sim import simulate

    variant = "findep" if result.variant == "findep" else "pppipe"
    graph = build_graph(
        result.times,
        result.config,
        problem.layers if layers is None else layers,
        problem.dense_layers,
        variant,
    )
    return simulate(graph).check()


def search_groups(
    make_problem: Callable[[int, int], DepProblem],
    gpus: int,
    planner: Callable[[DepProblem], DepResult] = solve,
) -> tuple[DepProblem, DepResult]:
    """Offline phase: the ``(ag, eg)`` split of ``gpus`` GPUs with the highest throughput.

    ``make_problem(ag, eg)`` builds an instance; splits that raise (memory) are skipped.
    Raises :class:`MoeplanError` when no split is feasible.
    """
    best: tuple[DepProblem, DepResult] | None = None
    for ag in range(1, gpus):
        try:
            problem = make_problem(ag, gpus - ag)
        except MoeplanError:
            continue
        res = planner(problem)
        if best is None or res.throughput > best[1].throughput:
            best = (problem, res)
    if best is None:
        raise MoeplanError(f"no (ag, eg) split of {gpus} GPUs fits memory")
    return best


class OnlineSolver:
    """Online phase (FinDEP Fig. 6): re-plan ``(ma, r1, r2, order)`` per prompt length.

    ``(ag, eg)`` are fixed offline; ``make_problem(seq_len)`` builds the instance for a prompt
    length. A repeated length costs a dict lookup; a new one costs one Algorithm 1 run
    (median ~2.3 ms on the paper's grid). :meth:`for_deployment` wires it to the cost model.
    """

    def __init__(self, make_problem: Callable[[int], DepProblem], cache_size: int = 256) -> None:
        self._make = make_problem
        self._cache: dict[int, DepResult] = {}
        self._size = cache_size

    @classmethod
    def for_deployment(cls, model, cluster, cm, *, ag: int, eg: int, **kw) -> OnlineSolver:
        """Online solver of ``model`` on ``ag + eg`` GPUs; ``kw`` as for :func:`dep_problem`."""
        return cls(
            lambda seq_len: dep_problem(model, cluster, cm, ag=ag, eg=eg, seq_len=seq_len, **kw)
        )

    def solve(self, seq_len: int) -> DepResult:
        hit = self._cache.get(seq_len)
        if hit is None:
            if len(self._cache) >= self._size:
                self._cache.pop(next(iter(self._cache)))
            hit = self._cache[seq_len] = solve(self._make(seq_len))
        return hit
