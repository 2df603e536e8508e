"""``moeplan pipeline``: SMIDT module-level pipeline partition with DPMoE, and its baselines.

Thin: parse flags, read the routing profile (``--routing-profile`` JSON file, or ``--top-p``
through :func:`moeplan.traces.routing_profiles.synthetic_top_p_mean_k`), build specs and the
cost model, call :func:`moeplan.planners.pipeline.planner.plan_pipeline`, print a rich table or one
JSON object, and optionally write the plotly figure and ``plan.json`` (atomically).
``--engine`` picks whose measured kernels price the stages; the output and ``plan.json`` say
which, and the mix of sources.
"""

from __future__ import annotations

from typing import Annotated

import typer

from moeplan.backends import DEFAULT_ENGINE
from moeplan.cli import _common as opt
from moeplan.cli._common import (
    Table,
    check_out,
    console,
    fmt_bytes,
    fmt_time,
    fmt_times,
    print_json,
    write_outputs,
)
from moeplan.commands.flag_rules import parse_int
from moeplan.commands.glossary import PIPELINE_CHOICES
from moeplan.commands.pipeline import (
    pipeline_files,
    pipeline_price_sources,
    result_dict,
    routing_for,
    stage_choices,
)
from moeplan.kernel_tables import pricing
from moeplan.planners.pipeline import PipelineResult, plan_pipeline
from moeplan.specs import RoutingProfile, Workload, load_cluster, load_model

BASELINES = ("uniform", "time_balanced", "no_pp")


def pipeline_command(
    model: Annotated[
        str, typer.Option("--model", help="Model preset, config.json or checkpoint folder.")
    ],
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster preset (e.g. smidt-a40).")],
    pp: Annotated[str, typer.Option("--pp", help="PP degree, or 'auto' (every divisor).")] = "auto",
    routing_profile: Annotated[
        str | None,
        typer.Option(
            "--routing-profile", help="Routing profile JSON (mean_k per MoE layer) or shipped name."
        ),
    ] = None,
    routing_trace: Annotated[
        str | None,
        typer.Option(
            "--routing-trace", help="Routing trace (.parquet/.npz): mean k per MoE layer."
        ),
    ] = None,
    top_p: Annotated[
        float | None,
        typer.Option("--top-p", help="Top-P threshold in (0, 1]: synthetic dynamic top-k profile."),
    ] = None,
    isl: opt.IslOpt = opt.DEFAULT_ISL,
    osl: opt.OslOpt = opt.DEFAULT_OSL,
    batch: opt.BatchOpt = opt.DEFAULT_BATCH,
    phase: Annotated[str, typer.Option("--phase", help="prefill, decode or both.")] = "both",
    sync_pp: Annotated[
        bool,
        typer.Option("--sync-pp", help="Blocking PP sends (default: asynchronous, SMIDT §4.3)."),
    ] = False,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Exact optimum of the same problem (exhaustive when small)."),
    ] = False,
    engine: opt.EngineOpt = DEFAULT_ENGINE,
    engine_version: opt.EngineVersionOpt = None,
    out: opt.OutDirOpt = None,
    as_json: opt.JsonOpt = False,
    quiet: opt.QuietOpt = False,
) -> None:
    """Module-level pipeline partition for dynamic top-k (SMIDT), against layer-level PP."""
    check_out(out, OUTPUTS)
    spec = load_model(model)
    cl = load_cluster(cluster)
    degree = None if pp == "auto" else parse_int("--pp", pp, "or 'auto'")
    routing = routing_for(spec, routing_profile, top_p, routing_trace)
    workload = Workload(phase=phase, batch=batch, isl=isl, osl=osl, routing=routing)
    cm = opt.engine_cost(cl, None, engine, engine_version)
    work = "SMIDT: stage search over every PP degree" + (", exhaustive check" if verify else "")
    with opt.progress(not (quiet or as_json), work):
        res = plan_pipeline(spec, cl, workload, cm, pp=degree, async_pp=not sync_pp, verify=verify)
    price, ps = pricing(cm), pipeline_price_sources(spec, cl, workload, cm, res)
    write_outputs(out, OUTPUTS, pipeline_files(res, price))
    if as_json:
        print_json({**result_dict(res, routing), "engine": engine, "pricing": price,
                    "price_sources": ps})  # fmt: skip
    else:
        _print_human(res, routing)
        opt.print_pricing(price, ps, "the chosen partition's period")


OUTPUTS = {"plan.json", "stages.html"}


def _print_human(res: PipelineResult, routing: RoutingProfile) -> None:
    p = res.plan
    console.print(
        f"[bold]SMIDT[/bold] {res.model} on {res.cluster} ({res.world_size} GPUs), "
        f"routing: {routing.source}, mean k {routing.mean_over_layers():.2f}; "
        f"PP {p.pp} x {p.r} GPUs, {'async' if res.async_pp else 'sync'} sends"
    )
    t = Table(
        title=f"stages (modules [start, end), parallel choice per run of layers; memory "
        f"limit {fmt_bytes(res.mem_limit_bytes)} per GPU)"
    )
    t_unit, times = fmt_times([s.time_s for s in p.stages])
    p_unit, p2ps = fmt_times([s.p2p_s for s in p.stages])
    for col in ("stage", "modules", "choices", f"time ({t_unit})", f"p2p ({p_unit})", "mem/GPU"):
        t.add_column(col)
    for j, s in enumerate(p.stages):
        t.add_row(
            str(j),
            f"[{s.start_module}, {s.end_module})",
            stage_choices(s),
            times[j],
            p2ps[j],
            fmt_bytes(s.mem_bytes_per_gpu),
        )
    console.print(t)
    _print_baselines(res)
    console.print(PIPELINE_CHOICES)
    console.print(
        f"search (incl. cost tables): {res.search_s * 1e3:.1f} ms over PP degrees "
        f"{sorted(res.per_pp)}"
    )
    if res.certificate is not None:
        c = res.certificate
        gap = "an unknown gap" if c["gap_bound"] is None else f"{c['gap_bound']:.2%}"
        low = "-" if c["lower_bound_s"] is None else fmt_time(c["lower_bound_s"])
        console.print(
            f"bottleneck {'certified' if c['certified'] else 'NOT certified'}: within {gap} "
            f"of the byte-level optimum (lower bound {low}; {c['certificate']})"
        )
    if res.verify is not None:
        v = res.verify
        console.print(
            f"verify ({v['method']}): optimum bottleneck "
            f"{fmt_time(v['exhaustive_bottleneck_s'])}, gap {fmt_time(v['gap_s'])}"
        )


def _print_baselines(res: PipelineResult) -> None:
    """SMIDT beside each baseline; the last column is SMIDT's throughput over that row's."""
    p = res.plan
    rows = [("smidt", p), *((k, res.baselines.get(k)) for k in BASELINES)]
    unit, bottlenecks = fmt_times([None if q is None else q.bottleneck_s for _, q in rows])
    b = Table(title="SMIDT vs baselines (same cost model)")
    for col in (
        "plan",
        "pp",
        f"bottleneck ({unit})",
        "tokens/s",
        "SMIDT vs it",
        "mem/GPU max / min (GiB)",
    ):
        b.add_column(col)
    for (name, plan), bott in zip(rows, bottlenecks, strict=True):
        if plan is None:
            b.add_row(name, "-", "-", "no plan fits", "-", "-")
            continue
        hi, lo = plan.mem_spread()
        r = p.throughput_tokens_per_s / plan.throughput_tokens_per_s
        vs = "—" if plan is p else f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"
        b.add_row(
            name,
            str(plan.pp),
            bott,
            f"{plan.throughput_tokens_per_s:,.0f}",
            vs,
            f"{hi / 2**30:.2f} / {lo / 2**30:.2f}",
        )
    console.print(b)


def register(app: typer.Typer) -> None:
    app.command("pipeline")(pipeline_command)
