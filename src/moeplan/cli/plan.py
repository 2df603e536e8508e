"""``moeplan plan``: compare every family, explain the winner, draw it, export it.

Two steps: each family's own search with its paper's analytic figure
(:func:`moeplan.planners.rank.plan`), then every family's deployments on one serving footing —
continuous batching under the TTFT/TPOT SLOs, ranked by the objective
(:func:`moeplan.search.ranking.rank.serve_rank`). The serving winner is exported.

Artifacts in ``--out`` (written as one set): ``plan.json``, ``report.html``, ``timeline.json``,
``launch/`` (``deployment.json`` and per engine ``launch.sh`` / ``stop.sh`` starting every
replica and pool of the deployment, :mod:`moeplan.export.plan_export`) and, when placement
ran, ``expert_location.json``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from moeplan.cli._common import Table, console, err_console, fmt_time, fmt_times, print_json
from moeplan.cli._fork import check_jobs, workers
from moeplan.cli._steady import check_rate, check_requests
from moeplan.cli.glossary import glossary
from moeplan.errors import MoeplanError, check_int, require
from moeplan.kernel_tables import engine_cost_model, pricing_line
from moeplan.planners.families import FAMILY
from moeplan.planners.rank import FAMILIES, FAMILY_NAMES, PlanResult
from moeplan.search.capacity.slo import DEFAULT_REQUESTS
from moeplan.search.job.outcome import PlanOutcome, quant_sentence
from moeplan.search.job.run import JobSpec, plan_job
from moeplan.search.ranking.rank import ServeRanking, describe
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec, Workload, cluster_names, load_cluster, load_model

DEFAULT_TTFT_SLO_MS = 2000.0  # a chat-style interactive target (2 s to the first token)
DEFAULT_TPOT_SLO_MS = 100.0  # 10 tokens/s per user, faster than reading speed
#: the --requests range this command accepts: its own choice, not a statistical rule (the SLO
#: percentile's minimum, p90 35 / p99 381 measured requests, is checked on top of it by
#: ``check_requests`` with the capacity search's ``percentile_boundable``)
MIN_REQUESTS, MAX_REQUESTS = 50, 100_000
ANALYTIC_NOTE = (
    "each family's own figure from its paper's model: prompt tokens/s per GPU for "
    "the prefill of one batch of --batch prompts (MixServe, SMIDT, FinDEP); shown "
    "beside the serving simulation, not used to rank"
)


def _serve_workload(
    w: Workload,
    requests: int,
    rate: float | None,
    concurrency: int | None,
    isl_dist: str | None,
    osl_dist: str | None,
    seed: int,
) -> ServeWorkload:
    """The request stream of the serving footing (a placeholder rate when none is given:
    each plan is then simulated at its own largest SLO-meeting rate)."""
    isl = LengthDist.parse(isl_dist) if isl_dist else LengthDist(mean=w.isl)
    osl = LengthDist.parse(osl_dist) if osl_dist else LengthDist(mean=w.osl)
    given = rate if rate is not None else w.rate
    return ServeWorkload(
        num_requests=requests,
        rate=None if concurrency else (given or 1.0),
        concurrency=concurrency,
        isl=isl,
        osl=osl,
        seed=seed,
    )


def _ms(seconds: float | None) -> str:
    return "none" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _workload(path: str | None, isl: int, osl: int, batch: int, rate: float | None) -> Workload:
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


def _check_trace(trace: str, num_experts: int) -> None:
    """Stream ``trace`` once through the reader's checks (format, ranges, expert ids)."""
    from moeplan.traces.format import iter_trace

    require(Path(trace).exists(), f"--trace ({trace}) does not exist")
    for _ in iter_trace(trace, num_experts=num_experts):
        pass


def plan_cmd(
    model: Annotated[
        str, typer.Option(help="Model preset, config.json or checkpoint folder.")
    ] = "qwen3-235b-a22b",
    model_path: Annotated[
        str | None,
        typer.Option(
            "--model-path",
            help="What the launch scripts load: a Hugging Face repo id or a local "
            "model folder (default: the preset's repo, or the config.json's folder).",
        ),
    ] = None,
    cluster: Annotated[str, typer.Option(help="Cluster preset.")] = "smidt-a40",
    nodes: Annotated[int | None, typer.Option(help="Override the cluster's node count.")] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            help="Keep only the first L decoder layers (the FinDEP paper's reduced models)."
        ),
    ] = None,
    isl: Annotated[int, typer.Option(help="Prompt length (tokens).")] = 2048,
    osl: Annotated[int, typer.Option(help="Output length (tokens).")] = 256,
    batch: Annotated[int, typer.Option(help="Concurrent prompts.")] = 32,
    rate: Annotated[
        float | None,
        typer.Option(
            help="Poisson arrival rate (requests/s). Default: each plan at the largest rate that "
            "meets the SLOs (its SLO-bound capacity)."
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="Closed loop: this many requests in flight (instead of --rate)."),
    ] = None,
    isl_dist: Annotated[
        str | None,
        typer.Option(
            help="Prompt length distribution: N, uniform:LO:HI or lognormal:MEDIAN:SIGMA[:MAX] "
            "(replaces --isl; the analytic figures use its mean)."
        ),
    ] = None,
    osl_dist: Annotated[
        str | None, typer.Option(help="Output length distribution, as --isl-dist (replaces --osl).")
    ] = None,
    ttft_slo: Annotated[
        float, typer.Option(help="TTFT SLO in ms (at --slo-percentile).")
    ] = DEFAULT_TTFT_SLO_MS,
    tpot_slo: Annotated[
        float, typer.Option(help="TPOT SLO in ms (at --slo-percentile).")
    ] = DEFAULT_TPOT_SLO_MS,
    slo_percentile: Annotated[
        float, typer.Option(help="Percentile the SLOs bind: 50, 90 or 99.")
    ] = 90.0,
    objective: Annotated[
        str,
        typer.Option(
            help="throughput-per-gpu (output tokens/s per GPU meeting the SLOs), goodput, "
            "min-gpus or latency (p90 end-to-end)."
        ),
    ] = "throughput-per-gpu",
    engine: Annotated[
        str,
        typer.Option(
            help="Engine modelled: sglang or vllm — its scheduler and, unless --cost-engine none, "
            "its measured kernels (moeplan.cost.kerneldb)."
        ),
    ] = "sglang",
    cost_engine: Annotated[
        str,
        typer.Option(
            help="'engine' (price kernels from the engine's measured tables) or 'none' "
            "(the calibrated GEMM/NCCL model alone)."
        ),
    ] = "engine",
    requests: Annotated[
        int,
        typer.Option(
            help="Requests measured per steady capacity probe (same count and seed for every "
            "deployment; warm-up and drain requests come on top)."
        ),
    ] = DEFAULT_REQUESTS,
    workload: Annotated[
        str | None,
        typer.Option(
            help="Workload JSON {phase, batch, isl, osl, rate} (replaces --isl/--osl/--batch/--rate)."
        ),
    ] = None,
    trace: Annotated[str | None, typer.Option(help="Routing trace for Sem-MoE placement.")] = None,
    families: Annotated[
        str,
        typer.Option(
            help="Comma-separated: strategy,pipeline,dep. Served with them: prefill/decode pools "
            "(pd) with strategy, attention-FFN disaggregated decode (afd) with dep."
        ),
    ] = ",".join(FAMILIES),
    profile: Annotated[
        str | None, typer.Option(help="HardwareProfile (default: the cluster's).")
    ] = None,
    any_divisor: Annotated[
        bool | None,
        typer.Option(
            "--any-divisor/--powers-of-two",
            help="Strategy family degrees: every divisor of the GPU count, or powers of two only "
            "(MixServe's rule). Default: every divisor when the GPU count is not a power "
            "of two (e.g. --nodes 12), else powers of two.",
        ),
    ] = None,
    placement: Annotated[
        bool,
        typer.Option("--placement/--no-placement", help="Run Sem-MoE placement on the winner."),
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic trace and splits.")] = 0,
    out: Annotated[
        str | None, typer.Option(help="Artifact folder (default out/<model>-<cluster>).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress display.")] = False,
    redundant_experts: Annotated[
        int | None,
        typer.Option(
            help="Redundant experts per MoE layer (default: searched, 0 or the smallest making "
            "E + R divisible by EP, at most E/8)."
        ),
    ] = None,
    tbo: Annotated[
        bool | None,
        typer.Option(
            "--tbo/--no-tbo", help="Two-batch overlap (default: searched where DeepEP runs)."
        ),
    ] = None,
    mtp: Annotated[
        int, typer.Option(help="MTP draft tokens per decode step (0: off; needs --mtp-accept).")
    ] = 0,
    mtp_accept: Annotated[
        float | None, typer.Option(help="Acceptance rate of each MTP draft token, in (0, 1].")
    ] = None,
    kv_dtype: Annotated[str, typer.Option(help="KV cache dtype: auto, bf16 or fp8.")] = "auto",
    a2a: Annotated[
        str | None, typer.Option(help="MoE all-to-all: auto, deepep or nccl (default: searched).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Worker processes for independent simulations (default: the CPUs this process "
            "may use; 1: none). The plan is the same for every value."
        ),
    ] = None,
) -> None:
    """Plan MODEL on CLUSTER with every family, rank them, explain and export the winner."""
    t_start = time.perf_counter()
    knob_search = _knob_search(redundant_experts, tbo, mtp, mtp_accept, kv_dtype, a2a)
    m: ModelSpec = load_model(model)
    require(
        mtp == 0 or m.num_nextn_predict_layers > 0,
        f"--mtp ({mtp}) needs a model with an MTP/NextN layer; {m.name} has none",
    )
    if layers is not None:
        require(layers >= 1, f"layers ({layers}) must be >= 1")
        m = m.with_layers(min(layers, m.num_layers))
    from moeplan.export.plan_export import model_path_for, truncation_warning

    launch_path = model_path_for(model, model_path)  # a bad --model-path fails before planning
    c: ClusterSpec = load_cluster(cluster, nodes)
    w = _workload(workload, isl, osl, batch, rate)
    fams = tuple(f.strip() for f in families.split(",") if f.strip())
    require(
        bool(fams) and all(f in FAMILIES for f in fams),
        f"families ({families!r}) must be a comma-separated subset of {','.join(FAMILIES)}",
    )
    require(rate is None or concurrency is None, "--rate and --concurrency are exclusive")
    check_int("--seed", seed, 0, 2**32 - 1)
    n_jobs = check_jobs(jobs)
    if trace is not None:  # read it whole now: a bad trace fails before planning, not after
        _check_trace(trace, m.num_experts)
    require(engine in ("sglang", "vllm"), f"--engine ({engine!r}) must be sglang or vllm")
    require(
        cost_engine in ("engine", "none"),
        f"--cost-engine ({cost_engine!r}) must be 'engine' or 'none'",
    )
    slo = SLO(ttft_s=ttft_slo / 1e3, tpot_s=tpot_slo / 1e3, percentile=slo_percentile)
    check_requests(
        requests, slo.percentile if concurrency is None else 50.0, MIN_REQUESTS, MAX_REQUESTS
    )
    sw = _serve_workload(w, requests, rate, concurrency, isl_dist, osl_dist, seed)
    check_rate(rate, 1, sw, slo)  # fed whole to one instance: the largest run of the search
    if isl_dist or osl_dist:
        w = replace(w, isl=sw.isl.mean, osl=sw.osl.mean)
    cm = engine_cost_model(c, profile, engine=None if cost_engine == "none" else engine)
    from moeplan.cli._knob_checks import check_plan_knobs

    check_plan_knobs(cm.engine, m, c, a2a=a2a, tbo=tbo, redundant=redundant_experts)
    outdir = Path(out) if out else Path("out") / f"{m.name}-{c.name}"
    from moeplan.report.plan_report import check_outdir, write_artifacts

    check_outdir(outdir)
    show = not (quiet or json_out)
    full = load_model(model)
    spec = JobSpec(
        model=m, cluster=c, workload=w, serve_workload=sw, slo=slo, families=fams,
        objective=objective, engine=engine, rate_given=rate is not None or concurrency is not None,
        requests=requests, knob_search=knob_search, any_divisor=any_divisor,
        alternatives=[load_cluster(n) for n in cluster_names()], placement=placement,
        trace=trace, trace_source=_trace_source(trace, m.num_experts), seed=seed,
        full_model=full, model_path=launch_path,
    )  # fmt: skip
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not (show and err_console.is_terminal),
    ) as prog:
        task = prog.add_task("planning", total=None)
        with workers(n_jobs, carry=[cm]):
            outcome = plan_job(spec, cm, progress=lambda t: prog.update(task, description=t))
        prog.update(task, description="writing report")
        files = write_artifacts(outdir, outcome)
    elapsed = time.perf_counter() - t_start
    truncated = truncation_warning(m.num_layers, full.num_layers)
    warnings = [x for x in (truncated, quant_sentence(outcome.quant)) if x]
    if warnings and not json_out:
        for line in warnings:
            err_console.print(f"[yellow]warning:[/] {line}")
    if json_out:
        print_json(
            {
                **_json(outcome, files, elapsed),
                **({"placement_skipped": outcome.placement_note} if outcome.placement_note else {}),
                "pricing": outcome.pricing,
                "warnings": warnings,
            }
        )
        return
    _print_human(outcome, files, elapsed)
    console.print(pricing_line(outcome.pricing))
    if outcome.pricing["stand_in_note"]:
        console.print(outcome.pricing["stand_in_note"])
    if outcome.placement_note:
        console.print(outcome.placement_note)


def _trace_source(trace: str | None, num_experts: int) -> Any:
    """The routing trace's chunks, read afresh on each call (None: no trace)."""
    if trace is None:
        return None
    from moeplan.traces.format import iter_trace

    return lambda: iter_trace(trace, num_experts=num_experts)


def _knob_search(
    redundant: int | None,
    tbo: bool | None,
    mtp: int,
    mtp_accept: float | None,
    kv_dtype: str,
    a2a: str | None,
) -> Any:
    """The instance knobs ``plan`` searches: the given ones fixed (one-line errors)."""
    from moeplan.cost.a2a import A2A_CHOICES
    from moeplan.search.ranking.rank import KnobSearch
    from moeplan.serve.iteration.instance_knobs import KV_DTYPES, InstanceKnobs

    require(redundant is None or redundant >= 0, f"--redundant-experts ({redundant}) must be >= 0")
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
            ("redundant_experts", redundant),
            ("a2a", a2a),
            ("mtp", mtp or None),
        )
        if v is not None
    }
    base = InstanceKnobs(
        tbo=bool(tbo), kv_dtype=kv_dtype, mtp=mtp, mtp_accept=float(mtp_accept or 0.0)
    )
    return KnobSearch(base=base, given=frozenset(given), redundant=redundant, a2a=a2a)


def _json(outcome: PlanOutcome, files: dict[str, str], elapsed: float) -> dict:
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
        "pareto": ranking.pareto(),
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
    return out


def _print_human(outcome: PlanOutcome, files: dict[str, str], elapsed: float) -> None:
    result, ranking, place_res = outcome.analytic, outcome.ranking, outcome.placement
    m, c = result.model, result.cluster
    sw, slo = ranking.workload, ranking.slo
    load = (
        f"{sw.rate:g} req/s"
        if sw.rate is not None and ranking.rate_given
        else f"{sw.concurrency} in flight"
        if sw.concurrency
        else "each plan's SLO capacity"
    )
    console.print(
        f"[bold]{m.name}[/] on [bold]{c.name}[/] ({c.num_gpus} × {c.gpu.name}); "
        f"requests of {describe(sw.isl)} prompt + {describe(sw.osl)} output tokens "
        f"at {load}; SLO p{slo.percentile:g}: TTFT ≤ {_ms(slo.ttft_s)}, "
        f"TPOT ≤ {_ms(slo.tpot_s)}"
    )
    _serving_table(ranking)
    for fam, why in ranking.not_served.items():
        console.print(f"[yellow]{FAMILY_NAMES[fam]} not simulated:[/] {why}")
    for line in outcome.explanation:
        console.print(line)
    _analytic_table(result)
    for fam, why in result.skipped.items():
        console.print(f"[yellow]{FAMILY_NAMES[fam]} not planned:[/] {why}")
    if place_res is not None:
        sem, base = place_res.methods["semmoe"].metrics, place_res.methods["contiguous"].metrics
        console.print(
            f"Sem-MoE placement on EP{place_res.ep}: LAR {sem['lar']:.3f} vs "
            f"{base['lar']:.3f} contiguous; MoE layer "
            f"{fmt_time(sem['moe_layer_time_s'])} vs "
            f"{fmt_time(base['moe_layer_time_s'])}."
        )
        console.print(glossary("LAR"), style="dim")
    console.print(
        f"Artifacts in [bold]{files['dir']}[/]: "
        + ", ".join(
            dict.fromkeys(
                Path(p).relative_to(files["dir"]).as_posix()
                if Path(p).is_relative_to(files["dir"])
                else Path(p).name
                for k, p in files.items()
                if k != "dir"
            )
        )
    )  # launch/<engine>/launch.sh
    console.print(f"Report: [bold]{files['report']}[/]   ({elapsed:.1f} s)")


#: the families' names in table cells (the long names, FAMILY_NAMES, head the explanations)
SHORT_NAMES = {
    "strategy": "MixServe",
    "pipeline": "SMIDT",
    "dep": "FinDEP",
    "pd": "P/D",
    "afd": "AFD",
}


def _serving_table(ranking: ServeRanking) -> None:
    """The serving ranking within 80 columns: one time unit per column, families by short
    name (explained under the table)."""
    pct = ranking.slo.percentile
    rows = ranking.ranked
    at = [s.metrics.at_percentile(pct) if s.metrics is not None else (None, None) for s in rows]
    t_unit, ttfts = fmt_times([a[0] for a in at])
    p_unit, tpots = fmt_times([a[1] for a in at])
    st = _compact_table(
        f"Serving simulation, best first ({ranking.workload.num_requests} "
        f"requests each; ranked by {ranking.objective}; per GPU = divided by "
        "the plan's GPUs)",
        (
            "deployment",
            "GPUs",
            f"TTFT\np{pct:g}\n{t_unit}",
            f"TPOT\np{pct:g}\n{p_unit}",
            "output\ntok/s\nper GPU",
            "max\nreq/s",
            "bound",
        ),
    )
    for i, s in enumerate(rows, 1):
        fam = SHORT_NAMES.get(s.entry.family, s.entry.family)
        lay, gpus = f"{fam}: {s.entry.layout_label}", str(s.entry.gpus)
        if s.metrics is None:
            st.add_row(lay, gpus, "—", "—", "—", "—", s.result.reason)
            continue
        mr = s.result.max_rate_meeting_slo_rps
        bound = s.result.bound + ("" if s.result.meets_slo else " (misses the SLOs)")
        st.add_row(
            lay,
            gpus,
            ttfts[i - 1],
            tpots[i - 1],
            f"{s.metrics.output_tokens_per_s_per_gpu:,.1f}",
            "—" if mr is None else f"{mr:.2f}",
            bound,
            style="bold green" if i == 1 else None,
        )
    console.print(st)
    fams = list(dict.fromkeys(s.entry.family for s in rows))
    console.print(
        "families: "
        + "; ".join(f"{SHORT_NAMES.get(f, f)} = {FAMILY_NAMES[f]}" for f in fams)
        + ".",
        style="dim",
    )


def _compact_table(title: str, columns: tuple[str, ...]) -> Table:
    """A table with a rule under its header and no side borders (room for 8 columns in 80):
    the text columns (``deployment``, ``plan``, ``bound``) wrap, the figures never do."""
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for col in columns:
        wraps = col in ("deployment", "plan", "bound")
        t.add_column(col, no_wrap=not wraps, justify="right" if col == "GPUs" else "left")
    return t


def _analytic_table(result: PlanResult) -> None:
    """Each family's own analytic figure (not the serving ranking), within 80 columns."""
    cands = result.candidates
    t_unit, ttfts = fmt_times([c.ttft_s for c in cands])
    i_unit, itls = fmt_times([c.itl_s or None for c in cands])
    t = _compact_table(
        "Each family's own analytic figure, best first (prefill of one "
        "batch, ranked by prompt tokens/s per GPU; not the serving ranking)",
        (
            "plan",
            "GPUs",
            "prompt\ntok/s\nper GPU",
            f"TTFT\n{t_unit}",
            f"ITL\n{i_unit}",
            "mem/GPU\nGiB",
            "bound",
        ),
    )
    for i, cand in enumerate(cands, 1):
        t.add_row(
            f"{SHORT_NAMES.get(cand.family, cand.name)}: {cand.label}",
            str(cand.gpus),
            f"{cand.per_gpu:,.0f}",
            ttfts[i - 1],
            itls[i - 1],
            f"{cand.mem_bytes_per_gpu / 2**30:.2f}",
            cand.bound,
            style="bold green" if i == 1 else None,
        )
    console.print(t)
    if any(FAMILY[c.family].layout == "groups" for c in cands if c.family in FAMILY):  # FinDEP
        console.print(glossary("ag", "eg", "ma", "r1", "r2", "ASAS", "AASS"), style="dim")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
