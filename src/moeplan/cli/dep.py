"""``moeplan dep``: FinDEP schedule for disaggregated attention/expert GPUs, with baselines.

Thin: parse flags, build specs and the cost model, call :func:`moeplan.planners.dep.plan_dep`,
print (rich tables or one JSON object). ``--out DIR`` writes ``plan.json``, ``timeline.json``
(Chrome trace of the FinDEP and PPPipe schedules, opens in Perfetto) and ``gantt.html`` as one set.
``--engine`` picks whose measured kernels price attention and experts (with the profile's
α-β fits for the rest); the output and ``plan.json`` say which, and the mix of sources.
"""

from __future__ import annotations

from typing import Annotated

import typer

from moeplan.backends import DEFAULT_ENGINE
from moeplan.cli import _common as opt
from moeplan.cli._common import (
    DEFAULT_ISL,
    IslOpt,
    OutDirOpt,
    Table,
    check_out,
    console,
    fmt_bytes,
    fmt_time,
    print_json,
    write_outputs,
)
from moeplan.commands.dep import dep_files, dep_price_sources
from moeplan.commands.glossary import glossary
from moeplan.errors import require
from moeplan.kernel_tables import pricing
from moeplan.planners import dep
from moeplan.specs import load_cluster, load_model


def dep_command(
    model: Annotated[
        str, typer.Option("--model", help="Model preset, config.json or checkpoint folder.")
    ],
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster preset (e.g. findep-a).")],
    isl: IslOpt = DEFAULT_ISL,
    ag: Annotated[int | None, typer.Option("--ag", help="Attention-group GPUs.")] = None,
    eg: Annotated[int | None, typer.Option("--eg", help="Expert-group GPUs.")] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus", help="GPU budget: search every (ag, eg) split (default: the whole cluster)."
        ),
    ] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers", help="Keep only the first L decoder layers (the paper's reduced models)."
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help="HardwareProfile name (default: the cluster's; 'roofline' forces datasheet).",
        ),
    ] = None,
    engine: opt.EngineOpt = DEFAULT_ENGINE,
    engine_version: opt.EngineVersionOpt = None,
    max_batch: Annotated[
        int,
        typer.Option(
            "--max-batch", help="Max prompts per AG GPU per iteration (r1*ma), Algorithm 1's B."
        ),
    ] = 64,
    imbalance: Annotated[
        float,
        typer.Option("--imbalance", help="Routing imbalance (max/mean expert load) on the EG."),
    ] = 1.0,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Brute force over (ma, r1, r2, order) and the CP-SAT optimum."
        ),
    ] = False,
    timeline_layers: Annotated[
        int,
        typer.Option(
            "--timeline-layers", help="MoE layers drawn in timeline.json / gantt.html (0 = all)."
        ),
    ] = 4,
    out: OutDirOpt = None,
    as_json: opt.JsonOpt = False,
    quiet: opt.QuietOpt = False,
) -> None:
    """Plan FinDEP (Algorithm 1) and compare it with PPPipe and naive DEP on one simulator."""
    require(timeline_layers >= 0, f"--timeline-layers ({timeline_layers}) must be >= 0")
    check_out(out, OUTPUTS)
    spec = load_model(model)
    cl = load_cluster(cluster)
    cm = opt.engine_cost(cl, profile, engine, engine_version)
    work = "FinDEP: Algorithm 1 and the baselines" + (", brute force, CP-SAT" if verify else "")
    with opt.progress(not (quiet or as_json), work):
        report = dep.plan_dep(
            spec, cl, cm, seq_len=isl, ag=ag, eg=eg, gpus=gpus, layers=layers, batch=max_batch,
            imbalance=imbalance, verify=verify,
        )  # fmt: skip
    price, ps = pricing(cm), dep_price_sources(spec, cl, cm, report, layers, max_batch, imbalance)
    if out:
        write_outputs(out, OUTPUTS, dep_files(report, price, timeline_layers or None))
    if as_json:
        print_json({**dep.report_dict(report), "engine": engine, "pricing": price,
                    "price_sources": ps})  # fmt: skip
    else:
        _print_human(report)
        opt.print_pricing(price, ps, "the FinDEP iteration")


OUTPUTS = {"plan.json", "timeline.json", "gantt.html"}


def _config_text(cfg: dict) -> str:
    return (
        f"ag={cfg['ag']} eg={cfg['eg']} ma={cfg['ma']} r1={cfg['r1']} r2={cfg['r2']} "
        f"me={cfg['me']:.1f} {cfg['order']}"
    )


def _print_human(report) -> None:
    d = dep.report_dict(report)
    console.print(
        f"[bold]FinDEP[/bold] {d['model']} ({d['layers']} layers, {d['moe_layers']} MoE)"
        f" on {d['cluster']} (profile {d['profile']}), prompts of {d['seq_len']} tokens"
    )
    console.print(f"chosen: {_config_text(d['config'])}")
    console.print(
        f"throughput: {d['throughput_tokens_per_s']:,.0f} tokens/s "
        f"(iteration {fmt_time(d['iteration_s'])}, {d['tokens_per_iteration']:,} tokens)"
    )
    console.print(
        f"speedup: {d['speedup_vs_pppipe']:.3f}x vs best PPPipe, "
        f"{d['speedup_vs_naive']:.3f}x vs best naive DEP"
    )
    console.print(
        f"solve: {d['solve_ms']:.2f} ms ({d['evaluations']} schedule evaluations); "
        f"whole search incl. baselines {d['search_ms']:.0f} ms; loading the kernel tables "
        f"first {d['warmup_ms']:.0f} ms; planning in all (what you waited for, without "
        f"start-up) {d['wall_ms']:.0f} ms"
    )
    t = Table(title="where the time goes (busy fraction of the iteration)")
    for col in ("schedule", "config", "tokens/s", "AG", "A→E link", "EG", "E→A link"):
        t.add_column(col)
    rows = [("FinDEP", d), *((k, v) for k, v in d["baselines"].items())]
    for name, r in rows:
        u = r["utilization"]
        t.add_row(
            name,
            _config_text(r["config"]),
            f"{r['throughput_tokens_per_s']:,.0f}",
            *(f"{u[k]:.0%}" for k in ("AG", "A2E", "EG", "E2A")),
        )
    console.print(t)
    console.print(
        glossary("ag", "eg", "ma", "r1", "r2", "me", "ASAS", "AASS", "PPPipe"), style="dim"
    )
    if d.get("memory_per_gpu"):
        m = d["memory_per_gpu"]
        console.print(
            f"memory per GPU: AG {fmt_bytes(m['ag_bytes'])}, EG {fmt_bytes(m['eg_bytes'])}"
        )
    if "bruteforce" in d:
        bf = d["bruteforce"]
        console.print(
            f"verify: brute force {bf['throughput_tokens_per_s']:,.0f} tokens/s "
            f"({bf['evaluations']} configs, {bf['ms']:.0f} ms); Algorithm 1 gap "
            f"{d['gap_vs_bruteforce']:.3%}"
        )
    if "cpsat" in d:
        c = d["cpsat"]
        clip = " (clipped instance)" if c["clipped"] else ""
        console.print(
            f"verify: CP-SAT {c['status']} on {c['layers']} layers, ma={c['ma']} "
            f"r1={c['r1']} r2={c['r2']}{clip}: ASAS {c['gap_asas']:+.2%}, "
            f"AASS {c['gap_aass']:+.2%} above the free-order optimum"
        )


def register(app: typer.Typer) -> None:
    app.command("dep")(dep_command)
