"""``moeplan pipeline``: SMIDT module-level pipeline partition with DPMoE, and its baselines.

Thin: parse flags, read the routing profile (``--routing-profile`` JSON file, or ``--top-p``
through :func:`moeplan.traces.routing_profiles.synthetic_top_p_mean_k`), build specs and the
cost model, call :func:`moeplan.planners.pipeline.planner.plan_pipeline`, print a rich table or one
JSON object, and optionally write the plotly figure and ``plan.json`` (atomically).
``--engine`` picks whose measured kernels price the stages; the output and ``plan.json`` say
which, and the mix of sources.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from moeplan.backends import DEFAULT_ENGINE
from moeplan.cli import _common as opt
from moeplan.cli._bounds import parse_int
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
from moeplan.cli.strategy import load_model_arg
from moeplan.errors import MoeplanError, require
from moeplan.planners.pipeline import PipelinePlan, PipelineResult, plan_pipeline
from moeplan.specs import ModelSpec, RoutingProfile, Workload, load_cluster
from moeplan.traces.routing_profiles import (
    mean_k_from_trace,
    profile_from_dict,
    synthetic_top_p_mean_k,
)

BASELINES = ("uniform", "time_balanced", "no_pp")


def read_routing_profile(path: str, model: ModelSpec) -> RoutingProfile:
    """A profile JSON file, or the name of a shipped one (``presets/routing/<name>.json``)."""
    file = Path(path)
    if not file.is_file():
        shipped = resources.files("moeplan.specs.presets").joinpath("routing", f"{path}.json")
        require(shipped.is_file(), f"--routing-profile ({path}) is not a file or a shipped profile")
        text = shipped.read_text(encoding="utf-8")
    else:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise MoeplanError(f"--routing-profile ({path}) cannot be read: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise MoeplanError(f"--routing-profile ({path}) is not valid JSON: {err}") from None
    return profile_from_dict(data, num_moe_layers=model.num_moe_layers, top_k=model.top_k)


def routing_for(
    model: ModelSpec, profile: str | None, top_p: float | None, trace: str | None = None
) -> RoutingProfile:
    given = sum(x is not None for x in (profile, top_p, trace))
    require(given <= 1, "--routing-profile, --routing-trace and --top-p are exclusive")
    if profile is not None:
        return read_routing_profile(profile, model)
    if trace is not None:
        from moeplan.traces.format import load_trace

        mean_k = mean_k_from_trace(load_trace(trace).experts)
        require(
            len(mean_k) == model.num_moe_layers,
            f"--routing-trace layers ({len(mean_k)}) must equal the model's MoE layers "
            f"({model.num_moe_layers})",
        )
        return RoutingProfile(top_k=model.top_k, mean_k=mean_k, source=f"trace {trace}")
    if top_p is not None:
        mean_k = synthetic_top_p_mean_k(
            model.num_moe_layers, model.num_experts, top_p, k_max=model.top_k
        )
        return RoutingProfile(
            top_k=model.top_k, mean_k=mean_k, source=f"synthetic top-p {top_p} (seed 0)"
        )
    return RoutingProfile.static(model.top_k)


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
    out: opt.OutDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: opt.QuietOpt = False,
) -> None:
    """Module-level pipeline partition for dynamic top-k (SMIDT), against layer-level PP."""
    check_out(out, OUTPUTS)
    spec = load_model_arg(model)
    cl = load_cluster(cluster)
    degree = None if pp == "auto" else parse_int("--pp", pp, "or 'auto'")
    routing = routing_for(spec, routing_profile, top_p, routing_trace)
    workload = Workload(phase=phase, batch=batch, isl=isl, osl=osl, routing=routing)
    cm = opt.engine_cost(cl, None, engine)
    work = "SMIDT: stage search over every PP degree" + (", exhaustive check" if verify else "")
    with opt.progress(not (quiet or as_json), work):
        res = plan_pipeline(spec, cl, workload, cm, pp=degree, async_pp=not sync_pp, verify=verify)
    price = opt.pricing_of(cm)
    write_outputs(
        out,
        OUTPUTS,
        {
            "plan.json": opt.with_pricing(res.to_plan(), price).to_json(),
            "stages.html": lambda: figure_html(res),
        },
    )
    if as_json:
        print_json({**result_dict(res, routing), "engine": engine, "pricing": price})
    else:
        _print_human(res, routing)
        opt.print_pricing(price)


OUTPUTS = {"plan.json", "stages.html"}


def _plan_dict(p: PipelinePlan) -> dict:
    return {
        "pp": p.pp,
        "throughput_tokens_per_s": p.throughput_tokens_per_s,
        "throughput_sync_tokens_per_s": p.throughput_sync_tokens_per_s,
        "bottleneck_s": p.bottleneck_s,
        "period_s": p.period_s,
        "stages": [s.to_dict() for s in p.stages],
    }


def result_dict(res: PipelineResult, routing: RoutingProfile) -> dict:
    """The ``--json`` object (keys per the SMIDT issue)."""
    d = _plan_dict(res.plan)
    d.update(
        {
            "model": res.model,
            "cluster": res.cluster,
            "world_size": res.world_size,
            "async_pp": res.async_pp,
            "mem_limit_bytes": res.mem_limit_bytes,
            "routing": {"source": routing.source, "mean_k": list(routing.mean_k or ())},
            "baselines": {
                k: None if v is None else _plan_dict(v) for k, v in res.baselines.items()
            },
            "speedup_vs_uniform": res.speedup("uniform"),
            "speedup_vs_time_balanced": res.speedup("time_balanced"),
            "speedup_vs_no_pp": res.speedup("no_pp"),
            "per_pp": {
                str(s): None
                if p is None
                else {
                    "bottleneck_s": p.bottleneck_s,
                    "throughput_tokens_per_s": p.throughput_tokens_per_s,
                }
                for s, p in res.per_pp.items()
            },
            "search_ms": res.search_s * 1e3,
        }
    )
    if res.certificate is not None:
        d.update(res.certificate)
    if res.verify is not None:
        d.update(res.verify)
    return d


def _compact(stage) -> str:
    """Per module kind, runs of consecutive layers with one choice: ``attn0-11:t1d4 moe0-8:t2d2``."""
    runs: list[list] = []
    for kind in ("attn", "mlp", "moe"):
        for m, c in stage.modules:
            if m.kind != kind:
                continue
            label = (
                f"t{c.tp}"
                + (f"e{c.ep}" if c.ep > 1 else "")
                + (f"d{c.dpmoe}" if c.dpmoe > 1 else "")
            )
            if runs and runs[-1][0] == (kind, label) and runs[-1][2] == m.layer - 1:
                runs[-1][2] = m.layer
            else:
                runs.append([(kind, label), m.layer, m.layer])
    return " ".join(f"{k}{a}{'' if a == b else f'-{b}'}:{lab}" for (k, lab), a, b in runs)


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
            _compact(s),
            times[j],
            p2ps[j],
            fmt_bytes(s.mem_bytes_per_gpu),
        )
    console.print(t)
    _print_baselines(res)
    console.print(GLOSSARY_LINE)
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


#: what the ``choices`` column's letters mean (SMIDT's module choice, Section 3)
GLOSSARY_LINE = (
    "choices: per run of layers, t = tensor-parallel degree inside the module, e = expert-"
    "parallel degree (MoE), d = data-parallel copies (attention DP; for an MoE module "
    "SMIDT's DPMoE: replicas kept in spare memory, shrinking its all-to-all); bottleneck = "
    "the slowest stage's time, which sets the pipeline's pace."
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


def figure_html(res: PipelineResult) -> str:
    """Plotly page: stage time (compute + P2P) and memory per GPU, SMIDT vs baselines."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("stage time (ms)", "memory per GPU (GiB)"))
    plans = [("smidt", res.plan)] + [(k, v) for k, v in res.baselines.items() if v is not None]
    for name, plan in plans:
        x = [f"{name} PP{plan.pp} s{j}" for j in range(plan.pp)]
        fig.add_bar(
            x=x, y=[s.time_s * 1e3 for s in plan.stages], name=f"{name} compute", row=1, col=1
        )
        fig.add_bar(x=x, y=[s.p2p_s * 1e3 for s in plan.stages], name=f"{name} p2p", row=1, col=1)
        fig.add_bar(
            x=x,
            y=[s.mem_bytes_per_gpu / 2**30 for s in plan.stages],
            name=f"{name} memory",
            row=1,
            col=2,
        )
    fig.add_hline(
        y=res.mem_limit_bytes / 2**30, line_dash="dash", row=1, col=2, annotation_text="GPU memory"
    )
    fig.update_layout(
        barmode="stack", title=f"SMIDT plan: {res.model} on {res.cluster}", height=520
    )
    return fig.to_html(include_plotlyjs=True, full_html=True)


def register(app: typer.Typer) -> None:
    app.command("pipeline")(pipeline_command)
