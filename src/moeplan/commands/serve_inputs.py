"""``moeplan serve-sim``'s inputs, checked and resolved before any simulation.

What is served (:func:`resolve_deployment`: layout flags, a ``plan.json`` or a ``--pd`` pair,
with what a plan written by ``moeplan plan`` recorded filling the flags left unset), the
request stream and SLOs it is served under (:func:`serve_inputs`), the flags of one phase
(:func:`check_phase_flags`) and the routing a trace gives (:func:`trace_routing`). Every
refusal is one line naming the flag, its value and the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from moeplan.backends import priced_engine, simulated
from moeplan.commands.serve_plan import (
    layout_from_plan,
    plan_knobs,
    plan_overlap,
    served_deployment,
)
from moeplan.commands.steady import check_fits, check_rate
from moeplan.commands.workers import check_jobs
from moeplan.cost import CostModel
from moeplan.errors import require
from moeplan.planners.layout import Layout
from moeplan.planners.plan import Plan
from moeplan.planners.plan_schema import check_plan_model
from moeplan.search.capacity.slo import DEFAULT_REQUESTS
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.deployment import PDLayout, parse_pd, pd_from_dict
from moeplan.serve.iteration.phase import PHASES
from moeplan.specs import ModelSpec, RoutingProfile, load_cluster, load_model
from moeplan.specs.cluster import ClusterSpec
from moeplan.specs.hf_config import read_json_file

DEFAULT_TTFT_SLO_MS = 2000.0  # a chat-style interactive target (2 s to the first token)
DEFAULT_TPOT_SLO_MS = 100.0  # 10 tokens/s per user, faster than reading speed
DEFAULT_ISL, DEFAULT_OSL = 2048, 256  # same defaults as ``moeplan plan``
MAX_REQUESTS = 200_000
MAX_THINK_MS = (
    3_600_000.0  # one hour: bounds the simulated clock; no interactive client idles longer
)
LAYOUT_FLAGS = ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "micro_batches")


@dataclass(frozen=True, kw_only=True)
class ServedInstance:
    """What serve-sim simulates: one instance ``layout`` (``replicas`` copies) or the P/D
    pair ``pd``, with the engine settings and instance knobs given or read from the plan."""

    layout: Layout  # the instance (P/D: the prefill pool's)
    pd: PDLayout | None
    plan: Plan | None
    replicas: int
    chunk_tokens: int | None
    max_running: int | None
    a2a: str
    tbo: bool | None
    kv_dtype: str
    #: the plan's host overlap (:mod:`moeplan.cost.host`; None: the engine's default)
    overlap: bool | None = None


def resolve_deployment(
    pd: str | None,
    plan: str | None,
    flags: dict[str, int | None],
    *,
    replicas: int | None,
    chunk_tokens: int | None,
    max_running: int | None,
    a2a: str,
    tbo: bool | None,
    kv_dtype: str,
    redundant_experts: int,
    phase: str | None,
    concurrency: int | None,
    trace_out: str | None,
) -> ServedInstance:
    """The deployment of the flags; a plan written by ``moeplan plan`` is simulated as it
    served it (instance, replicas, knobs, chunk and running cap) unless a flag says else."""
    require(redundant_experts >= 0, f"--redundant-experts ({redundant_experts}) must be >= 0")
    deployment = None
    if pd is not None:
        check_pd_flags(flags, plan, concurrency, chunk_tokens, max_running, trace_out)
        knob_given = {
            "--phase": phase,
            "--redundant-experts": redundant_experts or None,
            "--tbo/--no-tbo": tbo,
            "--kv-dtype": None if kv_dtype == "auto" else kv_dtype,
            "--a2a": None if a2a == "auto" else a2a,
        }
        bad = [k for k, v in knob_given.items() if v is not None]
        require(
            not bad,
            f"{bad[0] if bad else ''} does not apply to --pd (each pool runs the "
            "engine's all-to-all and the better two-batch overlap setting; redundant experts "
            "go in the layout: moe-rN; --mtp applies to the decode pool)",
        )
        deployment, the_plan = read_pd(pd)
        layout = deployment.prefill
    else:
        layout, the_plan = _layout(plan, flags)
    served = served_deployment(the_plan) if the_plan is not None and pd is None else None
    overlap = None
    if served is not None:  # what `moeplan plan` served, exactly (commands/serve_plan.py)
        overlap = plan_overlap(served)
        layout = served.layout
        replicas = served.replicas if replicas is None else replicas
        chunk_tokens = served.chunk_tokens if chunk_tokens is None else chunk_tokens
        max_running = served.max_running if max_running is None else max_running
        a2a, tbo, kv_dtype = plan_knobs(served, a2a, tbo, kv_dtype)
    if redundant_experts and deployment is None:
        layout = replace(layout, redundant_experts=redundant_experts)
    return ServedInstance(
        layout=layout, pd=deployment, plan=the_plan, replicas=1 if replicas is None else replicas,
        chunk_tokens=chunk_tokens, max_running=max_running, a2a=a2a, tbo=tbo, kv_dtype=kv_dtype,
        overlap=overlap,
    )  # fmt: skip


def check_fits_cluster(d: ServedInstance, c: ClusterSpec, one_instance: bool) -> None:
    """One line when the deployment needs more GPUs than ``c`` has (``one_instance``: a
    closed loop or one phase, which run a single instance), with what would fit."""
    if d.pd is not None:
        check_fits(f"--pd deployment ({d.pd.label})", d.pd.gpus, c)
    elif d.replicas > 1 and not one_instance:
        where = f"{d.replicas} replicas of {d.layout.label}"
        check_fits(where, d.layout.gpus * d.replicas, c, per_copy=d.layout.gpus)
    else:
        check_fits(f"layout {d.layout.label}", d.layout.gpus, c)


def _layout(plan_path: str | None, flags: dict[str, int | None]) -> tuple[Layout, Plan | None]:
    given = [k for k, v in flags.items() if v is not None]
    require(
        flags["micro_batches"] is None or (flags["pp"] or 1) > 1,
        "--micro-batches applies to pipelines only (--pp > 1)",
    )
    if plan_path is None:
        return Layout(**{k: v for k, v in flags.items() if v is not None}), None
    require(
        not given,
        f"--plan and layout flags ({', '.join('--' + g.replace('_', '-') for g in given)})"
        " are exclusive",
    )
    plan = Plan.from_dict(read_json_file(plan_path, "plan"))
    return layout_from_plan(plan), plan


def _lengths(fixed: int | None, dist: str | None, name: str, default: int) -> LengthDist:
    require(fixed is None or dist is None, f"--{name} and --{name}-dist are exclusive")
    require(fixed is None or fixed >= 1, f"--{name} ({fixed}) must be >= 1")
    return LengthDist.parse(dist) if dist else LengthDist(mean=fixed or default)


def _think_s(think_ms: float, concurrency: int | None) -> float:
    require(
        math.isfinite(think_ms) and 0 <= think_ms <= MAX_THINK_MS,
        f"--think-ms ({think_ms}) must be in [0, {MAX_THINK_MS:g}]",
    )
    require(
        think_ms == 0 or concurrency is not None,
        "--think-ms applies to a closed loop (--concurrency) only",
    )
    return think_ms / 1e3


def serve_inputs(
    *,
    ttft_slo: float,
    tpot_slo: float,
    slo_percentile: float,
    requests: int,
    rate: float | None,
    concurrency: int | None,
    arrival: str,
    cv: float,
    lengths: tuple[int | None, str | None, int | None, str | None],
    prefix_hit: float,
    think_ms: float,
    seed: int,
) -> tuple[SLO, ServeWorkload]:
    """The SLOs and the request stream (``lengths``: --isl, --isl-dist, --osl, --osl-dist)."""
    require(ttft_slo > 0 and tpot_slo > 0, "--ttft-slo and --tpot-slo must be positive (ms)")
    require(
        slo_percentile in (50.0, 90.0, 99.0),
        f"--slo-percentile ({slo_percentile}) must be 50, 90 or 99",
    )
    slo = SLO(ttft_s=ttft_slo / 1e3, tpot_s=tpot_slo / 1e3, percentile=slo_percentile)
    isl, isl_dist, osl, osl_dist = lengths
    w = ServeWorkload(
        num_requests=requests,
        rate=None if concurrency else (rate or 1.0),
        concurrency=concurrency,
        arrival=arrival,
        cv=cv,
        isl=_lengths(isl, isl_dist, "isl", DEFAULT_ISL),
        osl=_lengths(osl, osl_dist, "osl", DEFAULT_OSL),
        prefix_hit=prefix_hit,
        think_s=_think_s(think_ms, concurrency),
        seed=seed,
    )
    return slo, w


def check_flags(
    engine: str,
    rate: float | None,
    concurrency: int | None,
    requests: int,
    chunk_tokens: int | None,
    max_running: int | None,
    arrival: str,
    cv: float,
) -> None:
    """One-line errors for flags that would otherwise be ignored or meaningless."""
    engines = simulated()
    require(engine in engines, f"--engine ({engine!r}) must be one of {', '.join(engines)}")
    require(rate is None or concurrency is None, "--rate and --concurrency are exclusive")
    require(rate is None or rate > 0, f"--rate ({rate}) must be positive")
    require(1 <= requests <= MAX_REQUESTS, f"--requests ({requests}) must be in 1..{MAX_REQUESTS}")
    require(
        chunk_tokens is None or chunk_tokens >= 0, f"--chunk-tokens ({chunk_tokens}) must be >= 0"
    )
    require(max_running is None or max_running >= 1, f"--max-running ({max_running}) must be >= 1")
    require(
        concurrency is None or 1 <= concurrency <= requests,
        f"--concurrency ({concurrency}) must be in 1..--requests ({requests}): clients beyond "
        "the requests simulated would never send one",
    )
    require(
        cv == 1.0 or arrival == "gamma",
        f"--cv ({cv}) applies to --arrival gamma only (arrival is {arrival!r})",
    )
    require(
        concurrency is None or arrival == "poisson",
        "--arrival applies to open workloads (--rate), not --concurrency",
    )


def read_pd(value: str) -> tuple[PDLayout, Plan | None]:
    """The deployment of ``--pd``: a plan.json path (an existing ``.json`` file) or the text."""
    if value.strip().endswith(".json") or Path(value).is_file():
        plan = Plan.from_dict(read_json_file(value, "plan"))
        pools = plan.details.get("disaggregation")
        require(
            pools is not None,
            f"--pd plan ({value}) has no details.disaggregation: it is a {plan.family} plan of "
            "one engine; simulate it with --plan",
        )
        return pd_from_dict(pools), plan
    return parse_pd(value), None


def check_pd_flags(
    layout_flags: dict[str, int | None],
    plan: str | None,
    concurrency: int | None,
    chunk_tokens: int | None,
    max_running: int | None,
    trace_out: str | None,
) -> None:
    """One-line errors for serve-sim flags that a P/D simulation does not take."""
    given = [k for k, v in layout_flags.items() if v is not None] + (["plan"] if plan else [])
    require(not given, f"--pd and --{given[0].replace('_', '-') if given else ''} are exclusive")
    for flag, v in (
        ("--concurrency", concurrency),
        ("--chunk-tokens", chunk_tokens),
        ("--max-running", max_running),
        ("--trace-out", trace_out),
    ):
        require(
            v is None,
            f"{flag} ({v}) does not apply to --pd (each pool's scheduler is its "
            "engine's default; the arrivals are an open stream)",
        )


def check_phase_flags(
    phase: str | None,
    batch_per_gpu: int | None,
    tokens_per_gpu: int | None,
    context: int | None,
    isl: int | None,
) -> int:
    """The phase's context (decode ``--context``, prefill ``--isl``); one-line errors."""
    if phase is None:
        for flag, v in (
            ("--batch-per-gpu", batch_per_gpu),
            ("--tokens-per-gpu", tokens_per_gpu),
            ("--context", context),
        ):
            require(v is None, f"{flag} ({v}) applies to --phase only")
        return 0
    require(phase in PHASES, f"--phase ({phase!r}) must be one of {', '.join(PHASES)}")
    if phase == "decode":
        require(batch_per_gpu is not None, "--phase decode needs --batch-per-gpu B")
        require(context is not None, "--phase decode needs --context C (KV tokens per request)")
        require(tokens_per_gpu is None, "--tokens-per-gpu applies to --phase prefill")
        return int(context)  # type: ignore[arg-type]
    require(tokens_per_gpu is not None, "--phase prefill needs --tokens-per-gpu T")
    require(batch_per_gpu is None, "--batch-per-gpu applies to --phase decode")
    require(context is None, "--phase prefill takes the prompt length from --isl, not --context")
    return int(isl or 2048)


#: Flags of a serving run that ``--phase`` (one phase's steady step, no arrivals, no
#: scheduler) does not read, each with its default: given with another value, refused.
RUN_ONLY_FLAGS: tuple[tuple[str, str, Any], ...] = (
    ("replicas", "--replicas", None),
    ("rate", "--rate", None),
    ("concurrency", "--concurrency", None),
    ("think_ms", "--think-ms", 0.0),
    ("arrival", "--arrival", "poisson"),
    ("cv", "--cv", 1.0),
    ("osl", "--osl", None),
    ("isl_dist", "--isl-dist", None),
    ("osl_dist", "--osl-dist", None),
    ("prefix_hit", "--prefix-hit", 0.0),
    ("ttft_slo", "--ttft-slo", DEFAULT_TTFT_SLO_MS),
    ("tpot_slo", "--tpot-slo", DEFAULT_TPOT_SLO_MS),
    ("slo_percentile", "--slo-percentile", 90.0),
    ("chunk_tokens", "--chunk-tokens", None),
    ("max_running", "--max-running", None),
    ("mem_fraction", "--mem-fraction", None),
    ("requests", "--requests", DEFAULT_REQUESTS),
    ("seed", "--seed", 0),
    ("trace_out", "--trace-out", None),
)


def check_phase_only(f: ServeSimFlags) -> None:
    """One line when ``--phase`` is given with a flag it does not read (:data:`RUN_ONLY_FLAGS`;
    ``--isl`` with ``--phase decode``, whose context is ``--context``), or when a serving run
    is given a weight offload (priced in one phase's step only)."""
    if f.phase is None:
        require(
            f.weight_offload in ("auto", "off"),
            f"--weight-offload ({f.weight_offload}) applies to --phase (the offload's copies "
            "are priced in one phase's step, not in a serving run's iterations)",
        )
        return
    for name, flag, default in RUN_ONLY_FLAGS:
        v = getattr(f, name)
        require(
            v == default,
            f"{flag} ({v}) applies to a serving run, not to --phase (one phase's steady step: "
            "no arrivals, no scheduler, no trace)",
        )
    require(
        f.phase != "decode" or f.isl is None,
        f"--isl ({f.isl}) applies to --phase prefill; --phase decode takes --context",
    )


def trace_routing(path: str, model: ModelSpec) -> RoutingProfile:
    """Per-expert loads per MoE layer counted from a routing trace (``.parquet`` / ``.npz``),
    the profile the busiest EP rank's load comes from (:mod:`moeplan.serve.iteration.balance`)."""
    import numpy as np

    from moeplan.traces.format import load_trace

    tr = load_trace(path, num_experts=model.num_experts)
    rows = []
    for layer in range(tr.experts.shape[1]):
        ids = tr.experts[:, layer, :].astype(np.int64)
        counts = np.bincount(ids[ids >= 0], minlength=model.num_experts)
        require(counts.sum() > 0, f"--routing-trace ({path}) layer {layer} routes no token")
        rows.append(tuple(float(x) for x in counts))
    return RoutingProfile(top_k=model.top_k, expert_load=tuple(rows), source=f"trace {path}")


@dataclass(frozen=True, kw_only=True)
class ServeSimFlags:
    """``serve-sim``'s flags as given (None: not given), named as the flags."""

    model: str | None
    cluster: str | None
    nodes: int | None
    racks: int | None
    plan: str | None
    pd: str | None
    attn_tp: int | None
    attn_dp: int | None
    moe_tp: int | None
    moe_ep: int | None
    pp: int | None
    micro_batches: int | None
    replicas: int | None
    rate: float | None
    concurrency: int | None
    think_ms: float
    arrival: str
    cv: float
    isl: int | None
    osl: int | None
    isl_dist: str | None
    osl_dist: str | None
    prefix_hit: float
    ttft_slo: float
    tpot_slo: float
    slo_percentile: float
    engine: str
    cost_engine: str
    engine_version: str | None
    chunk_tokens: int | None
    max_running: int | None
    requests: int
    seed: int
    profile: str | None
    trace_out: str | None
    phase: str | None
    batch_per_gpu: int | None
    tokens_per_gpu: int | None
    context: int | None
    redundant_experts: int
    tbo: bool | None
    mtp: int
    mtp_accept: float | None
    kv_dtype: str
    mem_fraction: float | None
    a2a: str
    routing_trace: str | None
    routing: str
    jobs: int | None
    weight_offload: str = "auto"
    overlap_schedule: bool | None = None


@dataclass(frozen=True, kw_only=True)
class ServeSimSetup:
    """What every ``serve-sim`` run needs: the specs, the deployment, the worker count, the
    instance knobs given, the routing of ``--routing-trace`` and a phase's context."""

    model: ModelSpec
    cluster: ClusterSpec
    deployment: ServedInstance
    jobs: int
    knob_flags: dict[str, Any]
    routing: RoutingProfile | None
    phase_context: int


def prepare(f: ServeSimFlags) -> ServeSimSetup:
    """The flags checked and resolved: what is served, on which model and cluster."""
    check_phase_only(f)
    require(
        f.mem_fraction is None or 0.0 < f.mem_fraction < 1.0,
        f"--mem-fraction ({f.mem_fraction}) must be in (0, 1)",
    )
    phase_ctx = check_phase_flags(f.phase, f.batch_per_gpu, f.tokens_per_gpu, f.context, f.isl)
    flags = {k: getattr(f, k) for k in LAYOUT_FLAGS}
    d = resolve_deployment(
        f.pd, f.plan, flags, replicas=f.replicas, chunk_tokens=f.chunk_tokens,
        max_running=f.max_running, a2a=f.a2a, tbo=f.tbo, kv_dtype=f.kv_dtype,
        redundant_experts=f.redundant_experts, phase=f.phase, concurrency=f.concurrency,
        trace_out=f.trace_out,
    )  # fmt: skip
    require(
        f.overlap_schedule is None or d.pd is None,
        "--overlap-schedule does not apply to --pd (each pool runs its engine release's "
        "default host overlap)",
    )
    require(bool(f.model or d.plan), "--model is required without --plan")
    require(bool(f.cluster or d.plan), "--cluster is required without --plan")
    m = load_model(f.model or d.plan.model)  # type: ignore[union-attr]
    if d.plan is not None:  # its layers against the model simulated
        check_plan_model(d.plan, m)
    c = load_cluster(f.cluster or d.plan.cluster, f.nodes, f.racks)  # type: ignore[union-attr]
    require(
        f.replicas is None or f.concurrency is None,
        f"--replicas ({f.replicas}) applies to open workloads (--rate or the SLO-capacity "
        "search); a closed loop (--concurrency) drives one instance",
    )
    check_fits_cluster(d, c, one_instance=f.phase is not None or f.concurrency is not None)
    if d.pd is None:  # the layout's cut of the model, before anything is sized on it
        d.layout.validate(m, c)
    n_jobs = check_jobs(f.jobs)
    knob_flags = dict(a2a=d.a2a, tbo=d.tbo, mtp=f.mtp, mtp_accept=f.mtp_accept, kv_dtype=d.kv_dtype,
                      mem_fraction=f.mem_fraction, routing=f.routing or "random",
                      overlap=d.overlap if f.overlap_schedule is None else f.overlap_schedule)  # fmt: skip
    routing = trace_routing(f.routing_trace, m) if f.routing_trace else None
    return ServeSimSetup(
        model=m, cluster=c, deployment=d, jobs=n_jobs, knob_flags=knob_flags, routing=routing,
        phase_context=phase_ctx,
    )  # fmt: skip


def sim_inputs(f: ServeSimFlags, s: ServeSimSetup) -> tuple[SLO, ServeWorkload, CostModel]:
    """A load simulation's SLOs, request stream and cost model (one-line errors first)."""
    d, c = s.deployment, s.cluster
    check_flags(
        f.engine, f.rate, f.concurrency, f.requests, d.chunk_tokens, d.max_running, f.arrival,
        f.cv,
    )  # fmt: skip
    slo, w = serve_inputs(
        ttft_slo=f.ttft_slo, tpot_slo=f.tpot_slo, slo_percentile=f.slo_percentile,
        requests=f.requests, rate=f.rate, concurrency=f.concurrency, arrival=f.arrival, cv=f.cv,
        lengths=(f.isl, f.isl_dist, f.osl, f.osl_dist), prefix_hit=f.prefix_hit,
        think_ms=f.think_ms, seed=f.seed,
    )  # fmt: skip
    check_rate(f.rate, d.replicas if d.pd is None else 1, w, slo)  # P/D: one stream, both pools
    require(
        f.cost_engine in ("engine", "none"),
        f"--cost-engine ({f.cost_engine!r}) must be 'engine' or 'none'",
    )
    from moeplan.kernel_tables import engine_cost_model

    engine = f.engine
    cost_engine = f.cost_engine
    cm = engine_cost_model(
        c, f.profile, engine=priced_engine(cost_engine, engine), version=f.engine_version
    )
    return slo, w, cm
