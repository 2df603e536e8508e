"""FinDEP end to end: plan a model on a cluster, compare with the baselines, verify, export.

:func:`plan_dep` is what the CLI (``moeplan dep``) and ``moeplan plan`` call; it returns a
:class:`DepReport`. :func:`report_dict` is the ``--json`` object, :func:`to_plan` the
:class:`Plan` (schema ``moeplan.plan/1``, family ``dep``, docs/API.md) and
:func:`chrome_traces` the Chrome trace of the chosen schedule next to PPPipe's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, require
from moeplan.planners.dep.problem import DepProblem, dep_problem
from moeplan.planners.dep.schedule import DepConfig
from moeplan.planners.dep.solver import (
    DepResult,
    brute_force,
    naive,
    pppipe,
    schedule,
    search_groups,
    solve,
)
from moeplan.planners.dep.verify import cpsat_optimum
from moeplan.planners.plan import Plan
from moeplan.specs import ClusterSpec, ModelSpec

CPSAT_MAX = 4  # r1, r2 <= 4 and 2 layers: CP-SAT proves optimality in seconds
# prompts in flight on one GPU: SGLang's request pool cap (its server_args; RUNNING_CAP
# in moeplan.backends.sglang); a larger cap is no deployment an engine runs
MAX_PROMPTS_PER_GPU = 4096
# --verify's brute force, in schedule evaluations: 17,920 took 3.2 s on findep-a (ag 3, eg 5,
# isl 1024, cap 64), so this is about 20 s; a larger grid is refused before planning
MAX_BRUTE_FORCE = 100_000


@dataclass(frozen=True, kw_only=True)
class DepReport:
    """The chosen FinDEP schedule, its baselines, and the verification that was run."""

    model: str
    cluster: str
    profile: str
    seq_len: int
    problem: DepProblem
    findep: DepResult
    pppipe: DepResult
    naive: DepResult
    baseline_problems: dict[str, DepProblem]
    search_s: float = 0.0
    warmup_s: float = 0.0  # loading the measured kernel tables the instance prices (once)
    wall_s: float = 0.0  # the whole plan_dep call: what the caller waited for
    bruteforce: DepResult | None = None
    bruteforce_s: float = 0.0
    cpsat: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def speedup_vs_pppipe(self) -> float:
        return self.findep.throughput / self.pppipe.throughput

    @property
    def speedup_vs_naive(self) -> float:
        return self.findep.throughput / self.naive.throughput


def plan_dep(
    model: ModelSpec,
    cluster: ClusterSpec,
    cm: CostModel,
    *,
    seq_len: int,
    ag: int | None = None,
    eg: int | None = None,
    gpus: int | None = None,
    layers: int | None = None,
    batch: int = 64,
    imbalance: float = 1.0,
    verify: bool = False,
    cpsat_time_limit_s: float = 10.0,
) -> DepReport:
    """Plan FinDEP for fixed ``ag``/``eg`` or the best split of ``gpus`` GPUs (see module)."""
    require(seq_len > 0, f"isl ({seq_len}) must be > 0")
    require(
        1 <= batch <= MAX_PROMPTS_PER_GPU,
        f"max batch ({batch}) must be in 1..{MAX_PROMPTS_PER_GPU} prompts per AG GPU (SGLang's request "
        "pool per GPU)",
    )

    built: dict[tuple[int, int], DepProblem] = {}  # one instance per split, shared

    def make(a: int, e: int) -> DepProblem:
        if (a, e) not in built:
            built[a, e] = dep_problem(
                model,
                cluster,
                cm,
                ag=a,
                eg=e,
                seq_len=seq_len,
                layers=layers,
                batch=batch,
                imbalance=imbalance,
            )
        return built[a, e]

    t_start = time.perf_counter()
    fixed = ag is not None or eg is not None
    if fixed:
        require(ag is not None and eg is not None, "--ag and --eg must be given together")
        require(gpus is None, "give either --ag/--eg or --gpus, not both")
    n = cluster.num_gpus if gpus is None else gpus
    require(
        fixed or 2 <= n <= cluster.num_gpus,
        f"gpus ({n}) must be between 2 and the cluster's {cluster.num_gpus} GPUs",
    )
    _require_tractable(make, [(ag, eg)] if fixed else [(a, n - a) for a in range(1, n)], batch)
    warm_pricing(model, cm, seq_len)
    t0 = time.perf_counter()
    if fixed:
        problem = make(ag, eg)  # type: ignore[arg-type]
        result = solve(problem)
        pp_problem = nv_problem = problem
        pp, nv = pppipe(problem), naive(problem)
    else:
        try:
            problem, result = search_groups(make, n)
            pp_problem, pp = search_groups(make, n, pppipe)
            nv_problem, nv = search_groups(make, n, naive)
        except MoeplanError:
            make(1, n - 1)  # raises the memory error of the roomiest split
            raise
    search_s = time.perf_counter() - t0
    report = DepReport(
        model=model.name,
        cluster=cluster.name,
        profile=cm.profile_name,
        seq_len=seq_len,
        problem=problem,
        findep=result,
        pppipe=pp,
        naive=nv,
        baseline_problems={"pppipe": pp_problem, "naive": nv_problem},
        search_s=search_s,
        warmup_s=t0 - t_start,
    )
    if verify:
        report = _verified(report, cpsat_time_limit_s)
    return replace(report, wall_s=time.perf_counter() - t_start)


def _require_tractable(make, splits: list, batch: int) -> None:  # type: ignore[no-untyped-def]
    """Refuse, before any schedule is priced, a batch cap whose baselines (PPPipe's brute
    force over every fitting (ma, r1), naive DEP's over ma, on every split) exceed
    :data:`MAX_BRUTE_FORCE` schedule evaluations. Splits that do not fit are left to the
    search's own memory error."""
    total = 0
    for a, e in splits:
        try:
            p = make(a, e)
        except MoeplanError:
            continue
        total += sum(p.max_r1(ma) for ma in range(1, p.ma_max + 1)) + p.ma_max
        require(
            total <= MAX_BRUTE_FORCE,
            f"max batch ({batch}): the PPPipe and naive baselines would evaluate over "
            f"{MAX_BRUTE_FORCE:,} schedules (about 20 s) on {len(splits)} (ag, eg) split(s); "
            "lower --max-batch",
        )


def warm_pricing(model: ModelSpec, cm: CostModel, seq_len: int) -> None:
    """Price one task of each kind so that the measured kernel tables they use are loaded
    (and their variants fitted or read from the cache) before Algorithm 1 is timed: a
    once-per-process cost that the solve time would otherwise carry (seconds on a cold
    process against milliseconds for the search)."""
    cm.attention_layer(model, 1, seq_len, seq_len)
    cm.router(model, seq_len)
    cm.shared_expert(model, seq_len)
    cm.dense_mlp(model, seq_len)
    cm.expert_ffn(model, 1.0, model.num_experts)


def brute_force_size(problem: DepProblem) -> int:
    """Configurations :func:`brute_force` evaluates: every fitting (ma, r1), r2, order."""
    pairs = sum(problem.max_r1(ma) for ma in range(1, problem.ma_max + 1))
    return pairs * problem.r2_max * 2


def _verified(report: DepReport, cpsat_time_limit_s: float) -> DepReport:
    size = brute_force_size(report.problem)
    require(
        size <= MAX_BRUTE_FORCE,
        f"--verify: brute force over {size:,} configurations exceeds {MAX_BRUTE_FORCE:,} "
        f"(about 20 s); lower --max-batch ({report.problem.batch}) or drop --verify",
    )
    p, c = report.problem, report.findep.config
    t0 = time.perf_counter()
    bf = brute_force(p)
    bf_s = time.perf_counter() - t0
    small = DepConfig(ma=c.ma, r1=min(c.r1, CPSAT_MAX), r2=min(c.r2, CPSAT_MAX), order=c.order)
    cp = cpsat_optimum(
        p.times(small.ma, small.r2), small, min(p.layers, 2), time_limit_s=cpsat_time_limit_s
    )
    cp["clipped"] = (small.r1, small.r2) != (c.r1, c.r2) or p.layers > 2
    return replace(report, bruteforce=bf, bruteforce_s=bf_s, cpsat=cp)


def busy_seconds(problem: DepProblem, result: DepResult) -> dict[str, float]:
    """Busy time per resource in one iteration (sum of its task durations)."""
    c, t = result.config, result.times
    work, chunks = problem.layers * c.r1, problem.layers * c.r1 * c.r2
    return {
        "AG": problem.dense_layers * c.r1 * t.dense + work * (t.attn + t.shared),
        "A2E": chunks * t.a2e,
        "EG": chunks * t.expert,
        "E2A": chunks * t.e2a,
    }


def utilization(problem: DepProblem, result: DepResult) -> dict[str, float]:
    return {k: v / result.makespan for k, v in busy_seconds(problem, result).items()}


def _summary(problem: DepProblem, result: DepResult) -> dict[str, Any]:
    return {
        "config": result.config_dict(problem),
        "throughput_tokens_per_s": result.throughput,
        "iteration_s": result.makespan,
        "tokens_per_iteration": result.tokens,
        "utilization": utilization(problem, result),
    }


def report_dict(report: DepReport) -> dict[str, Any]:
    """The ``moeplan dep --json`` object."""
    p, f = report.problem, report.findep
    out: dict[str, Any] = {
        "model": report.model,
        "cluster": report.cluster,
        "profile": report.profile,
        "seq_len": report.seq_len,
        "layers": p.layers + p.dense_layers,
        "a2e_model": p.a2e_source,
        "moe_layers": p.layers,
        **_summary(p, f),
        "memory_per_gpu": p.memory(f.config.ma, f.config.r1) if p.memory else None,
        "baselines": {
            k: _summary(report.baseline_problems[k], getattr(report, k))
            for k in ("pppipe", "naive")
        },
        "speedup_vs_pppipe": report.speedup_vs_pppipe,
        "speedup_vs_naive": report.speedup_vs_naive,
        "solve_ms": f.solve_s * 1e3,
        "evaluations": f.evaluations,
        "search_ms": report.search_s * 1e3,
        "warmup_ms": report.warmup_s * 1e3,
        "wall_ms": report.wall_s * 1e3,
    }
    if report.bruteforce is not None:
        bf = report.bruteforce
        out["bruteforce"] = {
            "throughput_tokens_per_s": bf.throughput,
            "ms": report.bruteforce_s * 1e3,
            "evaluations": bf.evaluations,
            "config": bf.config_dict(p),
        }
        out["gap_vs_bruteforce"] = (bf.throughput - f.throughput) / bf.throughput
    if report.cpsat is not None:
        out["cpsat"] = report.cpsat
    return out


def to_plan(report: DepReport) -> Plan:
    """The :class:`~moeplan.planners.plan.Plan` of the chosen FinDEP deployment."""
    p, f = report.problem, report.findep
    c = f.config
    return Plan(
        family="dep",
        model=report.model,
        cluster=report.cluster,
        layout={"world_size": p.ag + p.eg, "ag": p.ag, "eg": p.eg},
        details={
            "ma": c.ma,
            "r1": c.r1,
            "r2": c.r2,
            "me": f.me,
            "order": c.order,
            "seq_len": report.seq_len,
            "profile": report.profile,
            "a2e_model": p.a2e_source,
        },
        predicted={
            "throughput_tokens_per_s": f.throughput,
            "iteration_s": f.makespan,
            "tokens_per_iteration": f.tokens,
            "utilization": utilization(p, f),
            "memory_per_gpu": p.memory(c.ma, c.r1) if p.memory else None,
        },
        baselines={
            k: _summary(report.baseline_problems[k], getattr(report, k))
            for k in ("pppipe", "naive")
        },
    )


def chrome_traces(report: DepReport, layers: int | None = None) -> dict[str, Any]:
    """Chrome trace JSON with the FinDEP schedule and PPPipe's as two processes."""
    from moeplan.sim import chrome_trace

    return chrome_trace(
        schedules(report, layers),
        metadata={"model": report.model, "cluster": report.cluster, "seq_len": report.seq_len},
    )


def schedules(report: DepReport, layers: int | None = None) -> dict[str, Any]:
    """Simulated schedules ``{"FinDEP ...": Schedule, "PPPipe ...": Schedule}``."""
    out = {}
    for key, res in (("FinDEP", report.findep), ("PPPipe", report.pppipe)):
        prob = report.problem if key == "FinDEP" else report.baseline_problems["pppipe"]
        c = res.config
        label = f"{key} ag={prob.ag} eg={prob.eg} ma={c.ma} r1={c.r1} r2={c.r2}"
        out[label + (f" {c.order}" if key == "FinDEP" else "")] = schedule(prob, res, layers)
    return out
