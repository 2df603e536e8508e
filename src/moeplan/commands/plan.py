"""``moeplan plan``'s inputs and answer: the workload, the serving footing's request stream,
the instance knobs it searches, the routing trace checked up front, and the ``--json`` object
of a :class:`moeplan.search.job.outcome.PlanOutcome`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from moeplan.backends import priced_engine, simulated
from moeplan.commands.knob_checks import check_plan_knobs
from moeplan.commands.steady import check_rate, check_requests
from moeplan.commands.workers import check_jobs
from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, check_int, require
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.rank import PROPOSING_FAMILIES
from moeplan.search.job.outcome import PlanOutcome
from moeplan.search.job.run import JobSpec
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec, Workload, cluster_names, load_cluster, load_model

#: the --requests range this command accepts: its own choice, not a statistical rule (the SLO
#: percentile's minimum, p90 35 / p99 381 measured requests, is checked on top of it by
#: ``check_requests`` with the capacity search's ``percentile_boundable``)
MIN_REQUESTS, MAX_REQUESTS = 50, 100_000


ANALYTIC_NOTE = (
    "each family's own figure from its paper's model: prompt tokens/s per GPU for "
    "the prefill of one batch of --batch prompts (MixServe, SMIDT, FinDEP); shown "
    "beside the serving simulation, not used to rank"
)


def serve_workload(
    w: Workload,
    requests: int,
    rate: float | None,
    isl_dist: str | None,
    osl_dist: str | None,
    seed: int,
) -> ServeWorkload:
    """The open request stream of the serving footing (a placeholder rate when none is given:
    each plan is then simulated at its own largest SLO-meeting rate)."""
    isl = LengthDist.parse(isl_dist) if isl_dist else LengthDist(mean=w.isl)
    osl = LengthDist.parse(osl_dist) if osl_dist else LengthDist(mean=w.osl)
    given = rate if rate is not None else w.rate
    return ServeWorkload(
        num_requests=requests,
        rate=given or 1.0,
        isl=isl,
        osl=osl,
        seed=seed,
    )


def read_workload(path: str | None, isl: int, osl: int, batch: int, rate: float | None) -> Workload:
    if path is None:
        return Workload(phase="both", batch=batch, isl=isl, osl=osl, rate=rate)
    from moeplan.specs.hf_config import read_json_file

    data = read_json_file(path, "workload")  # bounded: regular file, UTF-8, sane sizes
    require(isinstance(data, dict), f"workload ({path}) must be a JSON object")
    allowed = {"phase", "batch", "isl", "osl", "rate"}
    extra = sorted(set(data) - allowed)
    require(
        not extra,
        f"workload.{extra[0] if extra else ''} is not a workload field "
        f"(allowed: {', '.join(sorted(allowed))})",
    )
    try:
        return Workload(**data)
    except TypeError as err:
        raise MoeplanError(f"workload ({path}) is malformed: {err}") from None


def check_trace(trace: str, num_experts: int) -> None:
    """Stream ``trace`` once through the reader's checks (format, ranges, expert ids)."""
    from moeplan.traces.format import iter_trace

    require(Path(trace).exists(), f"--routing-trace ({trace}) does not exist")
    for _ in iter_trace(trace, num_experts=num_experts):
        pass


def trace_source(trace: str | None, num_experts: int) -> Any:
    """The routing trace's chunks, read afresh on each call (None: no trace)."""
    if trace is None:
        return None
    from moeplan.traces.format import iter_trace

    return lambda: iter_trace(trace, num_experts=num_experts)


def knob_search(
    redundant: int | None,
    tbo: bool | None,
    mtp: int,
    mtp_accept: float | None,
    kv_dtype: str,
    a2a: str | None,
    mem_fraction: float | None = None,
    routing: str = "random",
) -> Any:
    """The instance knobs ``plan`` searches: the given ones fixed (one-line errors); the
    memory fraction, when not given, is searched with each layout's scheduler knobs
    (:data:`moeplan.serve.knobs.MEM_FRACTIONS` beside the engine's default)."""
    from moeplan.cost.a2a import A2A_CHOICES
    from moeplan.search.ranking.rank import KnobSearch
    from moeplan.serve.iteration.instance_knobs import KV_DTYPES, InstanceKnobs

    require(
        redundant is None,
        f"--redundant-experts ({redundant}) is not applied by moeplan plan: its deployment search "
        "sets no redundant experts on a layout; price them on one with moeplan serve-sim "
        "--redundant-experts N",
    )
    require(
        kv_dtype in KV_DTYPES, f"--kv-dtype ({kv_dtype!r}) must be one of {', '.join(KV_DTYPES)}"
    )
    require(
        a2a is None or a2a in A2A_CHOICES,
        f"--a2a ({a2a!r}) must be one of {', '.join(A2A_CHOICES)}",
    )
    require(mtp_accept is None or mtp > 0, f"--mtp-accept ({mtp_accept}) needs --mtp N")
    require(
        mtp_accept is None or 0 < mtp_accept <= 1, f"--mtp-accept ({mtp_accept}) must be in (0, 1]"
    )
    require(
        mtp == 0 or mtp_accept is not None,
        f"--mtp ({mtp}) needs --mtp-accept P in (0, 1] (no default acceptance)",
    )
    given = {
        n
        for n, v in (
            ("tbo", tbo),
            ("a2a", a2a),
            ("mtp", mtp or None),
        )
        if v is not None
    }
    base = InstanceKnobs(
        tbo=bool(tbo), kv_dtype=kv_dtype, mtp=mtp, mtp_accept=float(mtp_accept or 0.0),
        mem_fraction=mem_fraction, routing=routing,
    )  # fmt: skip
    return KnobSearch(base=base, given=frozenset(given), a2a=a2a)


def plan_warnings(spec: JobSpec, outcome: PlanOutcome) -> list[str]:
    """The warnings of a plan: a truncated model (``--layers``), a quantized one priced on
    bf16 tables."""
    from moeplan.export.plan_export import truncation_warning
    from moeplan.search.job.outcome import quant_sentence

    full = spec.full_model if spec.full_model is not None else spec.model
    truncated = truncation_warning(spec.model.num_layers, full.num_layers)
    return [x for x in (truncated, quant_sentence(outcome.quant)) if x]


def plan_json(
    outcome: PlanOutcome, files: dict[str, str], elapsed: float, warnings: list[str]
) -> dict:
    """The ``--json`` object of a plan (``files``: the artifacts written, ``elapsed``: the
    command's seconds)."""
    result, ranking, place_res = outcome.analytic, outcome.ranking, outcome.placement
    win = ranking.winner
    out: dict[str, Any] = {
        "model": result.model.name,
        "cluster": result.cluster.name,
        "objective": ranking.objective,
        "slo": {
            "ttft_s": ranking.slo.ttft_s,
            "tpot_s": ranking.slo.tpot_s,
            "percentile": ranking.slo.percentile,
        },
        "workload": outcome.served_workload,
        "candidates": [s.summary() for s in ranking.ranked],
        "pareto": outcome.curves.get("front", []),
        "aggregated_vs_disaggregated": outcome.side_by_side,
        "not_served": ranking.not_served,
        "pruned": [
            {
                "family": e.family,
                "label": e.label,
                "layout": e.layout.label,
                "bound_output_tokens_per_s_per_gpu": v,
            }
            for e, v in ranking.pruned
        ],
        "winner": win.summary(),
        "analytic": {
            "note": ANALYTIC_NOTE,
            "ranking": [c.summary() for c in result.candidates],
            "explanation": result.explanation,
        },
        "skipped": result.skipped,
        "explanation": list(outcome.explanation),
        "limits": outcome.limits,
        "cluster_fill": None if outcome.fill is None else outcome.fill.to_dict(),
        "plan": outcome.plan.to_dict(),
        "artifacts": files,
        "elapsed_s": elapsed,
        "timings_s": outcome.timings,
        "search": ranking.search,
    }
    if place_res is not None:
        out["placement"] = place_res.to_dict()
    return {
        **out,
        **({"placement_skipped": outcome.placement_note} if outcome.placement_note else {}),
        "pricing": outcome.pricing,
        "price_sources": outcome.price_sources,
        "cuda_graphs": outcome.cuda_graphs,
        "interval": outcome.interval,
        "warnings": warnings,
    }


def job_spec(
    *,
    model: str,
    model_path: str | None,
    cluster: str,
    nodes: int | None,
    racks: int | None = None,
    layers: int | None,
    workload: str | None,
    isl: int,
    osl: int,
    batch: int,
    rate: float | None,
    concurrency: int | None,
    isl_dist: str | None,
    osl_dist: str | None,
    slo_ms: tuple[float, float, float],
    objective: str,
    engine: tuple[str, str | None],
    cost_engine: str,
    requests: int,
    trace: str | None,
    families: str,
    profile: str | None,
    any_divisor: bool | None,
    placement: bool,
    seed: int,
    out: str | None,
    jobs: int | None,
    knobs: tuple[int | None, bool | None, int, float | None, str, str | None, float | None, str],
) -> tuple[JobSpec, CostModel, int, Path]:
    """``plan``'s flags checked (one line each, before any planning) and turned into the
    job: its spec, the cost model, the worker count and the artifact folder. ``slo_ms``: TTFT
    and TPOT SLOs in ms and their percentile; ``engine``: ``--engine`` and
    ``--engine-version``; ``knobs``: ``--redundant-experts``, ``--tbo``,
    ``--mtp``, ``--mtp-accept``, ``--kv-dtype``, ``--a2a``, ``--mem-fraction`` and
    ``--routing``."""
    redundant_experts, tbo, mtp, mtp_accept, kv_dtype, a2a, mem_fraction, routing = knobs
    search = knob_search(
        redundant_experts, tbo, mtp, mtp_accept, kv_dtype, a2a, mem_fraction, routing
    )
    m: ModelSpec = load_model(model)
    require(
        mtp == 0 or m.num_nextn_predict_layers > 0,
        f"--mtp ({mtp}) needs a model with an MTP/NextN layer; {m.name} has none",
    )
    if layers is not None:
        require(layers >= 1, f"layers ({layers}) must be >= 1")
        m = m.with_layers(min(layers, m.num_layers))
    from moeplan.export.plan_export import model_path_for

    launch_path = model_path_for(model, model_path)  # a bad --model-path fails before planning
    c: ClusterSpec = load_cluster(cluster, nodes, racks)
    w = read_workload(workload, isl, osl, batch, rate)
    fams = tuple(f.strip() for f in families.split(",") if f.strip())
    require(
        bool(fams) and all(f in PROPOSING_FAMILIES for f in fams),
        f"families ({families!r}) must be a comma-separated subset of {','.join(PROPOSING_FAMILIES)}",
    )
    require(
        concurrency is None,
        f"--concurrency ({concurrency}) is not modelled by moeplan plan: it ranks deployments on "
        "open (Poisson) steady probes; simulate a closed loop with moeplan serve-sim --plan "
        "PLAN --concurrency N",
    )
    check_int("--seed", seed, 0, 2**32 - 1)
    n_jobs = check_jobs(jobs)
    if trace is not None:  # read it whole now: a bad trace fails before planning, not after
        check_trace(trace, m.num_experts)
    engine, engine_version = engine  # (--engine, --engine-version)
    engines = simulated()
    require(engine in engines, f"--engine ({engine!r}) must be one of {', '.join(engines)}")
    require(
        cost_engine in ("engine", "none"),
        f"--cost-engine ({cost_engine!r}) must be 'engine' or 'none'",
    )
    ttft_slo, tpot_slo, slo_percentile = slo_ms
    slo = SLO(ttft_s=ttft_slo / 1e3, tpot_s=tpot_slo / 1e3, percentile=slo_percentile)
    check_requests(requests, slo.percentile, MIN_REQUESTS, MAX_REQUESTS)
    sw = serve_workload(w, requests, rate, isl_dist, osl_dist, seed)
    check_rate(rate, 1, sw, slo)  # fed whole to one instance: the largest run of the search
    if isl_dist or osl_dist:
        w = replace(w, isl=sw.isl.mean, osl=sw.osl.mean)
    cm = engine_cost_model(
        c, profile, engine=priced_engine(cost_engine, engine), version=engine_version
    )
    check_plan_knobs(cm.engine, m, c, a2a=a2a, tbo=tbo)
    outdir = Path(out) if out else Path("out") / f"{m.name}-{c.name}"
    from moeplan.report.plan_report import check_outdir

    check_outdir(outdir)
    full = load_model(model)
    spec = JobSpec(
        model=m, cluster=c, workload=w, serve_workload=sw, slo=slo, families=fams,
        objective=objective, engine=engine, rate_given=rate is not None,
        requests=requests, knob_search=search, any_divisor=any_divisor,
        alternatives=[load_cluster(n) for n in cluster_names()], placement=placement,
        trace=trace, trace_source=trace_source(trace, m.num_experts), seed=seed,
        full_model=full, model_path=launch_path,
    )  # fmt: skip
    return spec, cm, n_jobs, outdir
