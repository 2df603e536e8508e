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
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from moeplan.cli import _common as opt
from moeplan.cli._common import Table, console, err_console, fmt_time, fmt_times, print_json
from moeplan.commands.glossary import FAMILY_SHORT_NAMES, PLAN_TRACE_HELP, family_legend, glossary
from moeplan.commands.plan import job_spec, plan_json, plan_warnings
from moeplan.commands.serve_inputs import DEFAULT_TPOT_SLO_MS, DEFAULT_TTFT_SLO_MS
from moeplan.commands.workers import workers
from moeplan.kernel_tables import pricing_line
from moeplan.planners.families import FAMILY
from moeplan.planners.rank import FAMILY_NAMES, PROPOSING_FAMILIES, PlanResult
from moeplan.search.capacity.slo import DEFAULT_REQUESTS
from moeplan.search.job.outcome import PlanOutcome, graphs_line, interval_line, sources_line
from moeplan.search.job.run import plan_job
from moeplan.search.ranking.rank import ServeRanking, describe


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
    nodes: opt.NodesOpt = None,
    racks: opt.RacksOpt = None,
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
        typer.Option(help="Refused: plan ranks on open probes (serve-sim --concurrency)."),
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
    ttft_slo: opt.TtftSloOpt = DEFAULT_TTFT_SLO_MS,
    tpot_slo: opt.TpotSloOpt = DEFAULT_TPOT_SLO_MS,
    slo_percentile: opt.SloPercentileOpt = 90.0,
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
            help="Engine modelled: sglang, vllm or trtllm — its scheduler and, unless "
            "--cost-engine none, its measured kernels (moeplan.cost.kerneldb)."
        ),
    ] = "sglang",
    cost_engine: opt.CostEngineOpt = "engine",
    engine_version: opt.EngineVersionOpt = None,
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
    trace: Annotated[
        str | None, typer.Option("--routing-trace", "--trace", help=PLAN_TRACE_HELP)
    ] = None,
    families: Annotated[
        str,
        typer.Option(
            help="Comma-separated: strategy,pipeline,dep. Served with them: prefill/decode pools "
            "(pd) with strategy, attention-FFN disaggregated decode (afd) with dep."
        ),
    ] = ",".join(PROPOSING_FAMILIES),
    profile: opt.ProfileOpt = None,
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
            help="Refused: the deployment search sets no redundant experts (serve-sim "
            "--redundant-experts)."
        ),
    ] = None,
    tbo: Annotated[
        bool | None,
        typer.Option(
            "--tbo/--no-tbo", help="Two-batch overlap (default: searched where DeepEP runs)."
        ),
    ] = None,
    mtp: opt.MtpOpt = 0,
    mtp_accept: opt.MtpAcceptOpt = None,
    kv_dtype: opt.KvDtypeOpt = "auto",
    mem_fraction: opt.MemFractionOpt = None,
    a2a: Annotated[
        str | None, typer.Option(help="MoE all-to-all: auto, deepep or nccl (default: searched).")
    ] = None,
    routing: opt.RoutingOpt = "random",
    json_out: opt.JsonOpt = False,
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
    spec, cm, n_jobs, outdir = job_spec(
        model=model, model_path=model_path, cluster=cluster, nodes=nodes, racks=racks, layers=layers,
        workload=workload, isl=isl, osl=osl, batch=batch, rate=rate, concurrency=concurrency,
        isl_dist=isl_dist, osl_dist=osl_dist, slo_ms=(ttft_slo, tpot_slo, slo_percentile),
        objective=objective, engine=(engine, engine_version), cost_engine=cost_engine,
        requests=requests,
        trace=trace, families=families, profile=profile, any_divisor=any_divisor,
        placement=placement, seed=seed, out=out, jobs=jobs,
        knobs=(redundant_experts, tbo, mtp, mtp_accept, kv_dtype, a2a, mem_fraction, routing),
    )  # fmt: skip
    show = not (quiet or json_out)
    from moeplan.report.plan_report import write_artifacts

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
    warnings = plan_warnings(spec, outcome)
    if json_out:
        print_json(plan_json(outcome, files, elapsed, warnings))
        return
    for line in warnings:
        err_console.print(f"[yellow]warning:[/] {line}")
    _print_human(outcome, files, elapsed)
    console.print(pricing_line(outcome.pricing))
    if outcome.price_sources:
        console.print(sources_line(outcome.price_sources, "the winner's run"))
        console.print(interval_line(outcome.interval))
    graphs = graphs_line(outcome.cuda_graphs)
    if graphs:
        console.print(graphs)
    if outcome.pricing["stand_in_note"]:
        console.print(outcome.pricing["stand_in_note"])
    if outcome.placement_note:
        console.print(outcome.placement_note)


def _ms(seconds: float | None) -> str:
    return "none" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _print_human(outcome: PlanOutcome, files: dict[str, str], elapsed: float) -> None:
    result, ranking, place_res = outcome.analytic, outcome.ranking, outcome.placement
    m, c = result.model, result.cluster
    sw, slo = ranking.workload, ranking.slo
    load = (
        f"{sw.rate:g} req/s"
        if sw.rate is not None and ranking.rate_given
        else "each plan's SLO capacity"
    )
    console.print(
        f"[bold]{m.name}[/] on [bold]{c.name}[/] ({c.num_gpus} × {c.gpu.name}); "
        f"requests of {describe(sw.isl)} prompt + {describe(sw.osl)} output tokens "
        f"at {load}; SLO p{slo.percentile:g}: TTFT ≤ {_ms(slo.ttft_s)}, "
        f"TPOT ≤ {_ms(slo.tpot_s)}"
    )
    console.print(outcome.explanation[0], style="bold", markup=False)  # the answer first
    _serving_table(ranking)
    for fam, why in ranking.not_served.items():
        console.print(f"[yellow]{FAMILY_NAMES[fam]} not simulated:[/] {why}")
    for line in outcome.explanation[1:]:
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
            "limited by",
        ),
    )
    for i, s in enumerate(rows, 1):
        fam = FAMILY_SHORT_NAMES.get(s.entry.family, s.entry.family)
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
    console.print(family_legend(s.entry.family for s in rows), style="dim")


def _compact_table(title: str, columns: tuple[str, ...]) -> Table:
    """A table with a rule under its header and no side borders (room for 8 columns in 80):
    the text columns (deployment, plan, bound, limited by) wrap, the figures never do."""
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for col in columns:
        wraps = col in ("deployment", "plan", "bound", "limited by")
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
            f"{FAMILY_SHORT_NAMES.get(cand.family, cand.name)}: {cand.label}",
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
