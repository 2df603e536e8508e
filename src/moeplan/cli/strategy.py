"""``moeplan strategy``: MixServe hybrid TP/EP/DP/PP analysis, baselines, Pareto, exports.

Thin: parse flags, build specs and the cost model, call
:func:`moeplan.planners.strategy.analyzer.analyze`, print (rich tables or one JSON object), and
optionally write the Pareto figure, ``plan.json`` and a launcher, all atomically. ``--engine``
picks whose measured kernels price the search; the output, ``plan.json`` and the launcher's
header say which, and the mix of sources (measured / interpolated / transferred / roofline).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box

from moeplan.backends import DEFAULT_ENGINE
from moeplan.cli._common import (
    DEFAULT_BATCH,
    DEFAULT_ISL,
    DEFAULT_OSL,
    BatchOpt,
    EngineOpt,
    EngineVersionOpt,
    IslOpt,
    OslOpt,
    OutDirOpt,
    QuietOpt,
    RacksOpt,
    Table,
    check_out,
    console,
    engine_cost,
    err_console,
    fmt_time,
    fmt_times,
    print_json,
    progress,
    write_outputs,
)
from moeplan.commands.glossary import glossary
from moeplan.commands.strategy import (
    export_for,
    fused_target,
    node_sizes,
    strategy_files,
    strategy_json,
    strategy_price_sources,
    strategy_warnings,
    strategy_workload,
    verify_fused,
)
from moeplan.errors import check_int, require, show
from moeplan.export.constraints import Target
from moeplan.export.sglang import ExportResult
from moeplan.kernel_tables import pricing, pricing_line
from moeplan.planners.strategy.analyzer import RANK_BY, Analysis, StrategyResult, analyze, gains
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.search.job.outcome import sources_line
from moeplan.specs import load_cluster, load_model


def _print_human(
    a: Analysis, top: int, export: ExportResult | None, title: str, price: dict
) -> None:
    console.print(
        f"[bold]{title}[/bold]: {a.evaluated} strategies evaluated in "
        f"{a.search_s * 1e3:.1f} ms; rejected: {a.rejected_shape} shape, "
        f"{a.rejected_memory} memory, {a.rejected_slo} SLO"
    )
    console.print(pricing_line(price))
    if not a.strategies:
        console.print("no strategy meets the SLOs")
        return
    rows = a.strategies[:top]
    t_unit, ttfts = fmt_times([r.ttft_s for r in rows])
    i_unit, itls = fmt_times([r.itl_s for r in rows])
    fused = any(r.strategy.fused for r in rows)  # the column only when a fused one is listed
    f_unit, saved = fmt_times(
        [r.prefill.comm_unfused_s - r.prefill.comm_s if r.strategy.fused else None for r in rows]
    )
    t = Table(
        title="Top strategies (tokens/s per GPU: prompt + output; comm share: of the prefill time)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    cols = [
        "#",
        "strategy",
        "GPUs",
        f"TTFT\n{t_unit}",
        f"ITL\n{i_unit}",
        "tok/s\nper GPU",
        "mem/GPU\nGiB",
        "comm\nshare",
    ] + ([f"fused\nsaves\n{f_unit}"] if fused else [])
    for c in cols:
        t.add_column(c, no_wrap=c != "strategy")
    for i, r in enumerate(rows, 1):
        t.add_row(
            str(i),
            r.strategy.label,
            str(r.num_gpus),
            ttfts[i - 1],
            itls[i - 1],
            f"{r.throughput_per_gpu:,.1f}",
            f"{r.mem_bytes_per_gpu / 2**30:.2f}",
            f"{r.prefill.comm_share:.0%}",
            *([saved[i - 1] if r.strategy.fused else "-"] if fused else []),
        )
    console.print(t)
    console.print(glossary("TP", "DP", "EP", "PP", *(["fused"] if fused else [])), style="dim")
    console.print(_baselines_table(a, a.strategies[0]))
    if export is not None:
        console.print(f"[bold]{export.engine} launch[/bold]: " + (" ".join(export.args) or "-"))
        for w in export.warnings:
            console.print(f"warning: {w}")


def _baselines_table(a: Analysis, best: StrategyResult) -> Table:
    """The named baselines and the #1 strategy's gains over each."""
    bases = list(a.baselines.items())
    t_unit, ttfts = fmt_times([None if v is None else v.ttft_s for _, v in bases])
    i_unit, itls = fmt_times([None if v is None else v.itl_s for _, v in bases])
    b = Table(
        title="Gains of #1 over the named baselines (x > 1 = #1 better)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    for c in ("baseline: its strategy", f"TTFT\n{t_unit}", f"ITL\n{i_unit}", "tokens/s",
              "TTFT\nx", "ITL\nx", "tokens/s\nx"):  # fmt: skip
        b.add_column(c, no_wrap=not c.startswith("baseline"))
    for j, (name, base) in enumerate(bases):
        if base is None:
            b.add_row(f"{name}: no strategy of this shape", *["-"] * 6)
            continue
        g = gains(best, base) or {}
        fits = "" if base.fits else " (does not fit in memory)"
        b.add_row(
            f"{name}: {base.strategy.label}{fits}",
            ttfts[j],
            itls[j],
            f"{base.throughput_tokens_per_s:,.0f}",
            *(f"{g[k]:.2f}" if g.get(k) else "-" for k in ("ttft", "itl", "throughput")),
        )
    return b


def strategy(
    model: Annotated[str, typer.Option(help="Model preset, config.json or checkpoint folder.")],
    cluster: Annotated[str, typer.Option(help="Cluster preset.")],
    isl: IslOpt = DEFAULT_ISL,
    osl: OslOpt = DEFAULT_OSL,
    batch: BatchOpt = DEFAULT_BATCH,
    rate: Annotated[float | None, typer.Option(help="Arrival rate (req/s) for M/M/1.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Override the preset's node count.")] = None,
    racks: RacksOpt = None,
    ttft_slo: Annotated[float | None, typer.Option(help="TTFT SLO (ms).")] = None,
    itl_slo: Annotated[float | None, typer.Option(help="ITL SLO (ms).")] = None,
    rank_by: Annotated[str, typer.Option(help=f"One of {RANK_BY}.")] = "throughput",
    expert_skew: Annotated[
        float, typer.Option(help="Zipf skew of expert load (0 = balanced).")
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the expert shuffle for --expert-skew.")] = 0,
    all_sizes: Annotated[
        bool, typer.Option(help="Also rank deployments on fewer nodes (1, 2, 4, ... of them).")
    ] = False,
    any_divisor: Annotated[bool, typer.Option(help="Allow any divisor, not only 2^k.")] = False,
    profile: Annotated[str | None, typer.Option(help="Hardware profile name.")] = None,
    engine: EngineOpt = DEFAULT_ENGINE,
    engine_version: EngineVersionOpt = None,
    top: Annotated[int, typer.Option(help="How many strategies to show.")] = 10,
    export: Annotated[str | None, typer.Option(help="sglang, vllm or trtllm.")] = None,
    model_path: Annotated[str | None, typer.Option(help="Checkpoint path for exports.")] = None,
    out: OutDirOpt = None,
    verify: Annotated[
        bool, typer.Option(help="Replay the fused rounds on the simulator and print the gap.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Rank hybrid TP/EP/DP/PP strategies (MixServe) and compare with the named baselines."""
    require(top >= 1, f"--top ({top}) must be >= 1")
    require(ttft_slo is None or ttft_slo > 0, f"--ttft-slo ({ttft_slo}) must be > 0 ms")
    require(itl_slo is None or itl_slo > 0, f"--itl-slo ({itl_slo}) must be > 0 ms")
    require(
        model_path is None or export is not None,
        f"--model-path ({show(model_path)}) names the checkpoint of an --export launch command; "
        "give --export sglang|vllm with it",
    )
    check_out(out, OUTPUTS)
    check_int("--seed", seed, 0, 2**32 - 1)
    m = load_model(model)
    c = load_cluster(cluster, nodes, racks)
    w = strategy_workload(m, batch=batch, isl=isl, osl=osl, rate=rate, skew=expert_skew, seed=seed)
    cm = engine_cost(c, profile, engine, engine_version)
    sizes = node_sizes(c)
    with progress(not (quiet or json_out), "MixServe: enumerating TP/EP/DP/PP strategies"):
        a = analyze(
            m, c, w, cm, any_divisor=any_divisor, node_counts=sizes if all_sizes else None,
            ttft_slo_s=None if ttft_slo is None else ttft_slo / 1e3,
            itl_slo_s=None if itl_slo is None else itl_slo / 1e3, rank_by=rank_by,
        )  # fmt: skip
    price = pricing(cm)  # what priced the ranking (before the figures add lookups)
    best = a.best
    exp = None
    if export is not None and best is not None:
        exp = export_for(export, best, model, model_path, c.num_nodes, Target.of(m, c))
    ev = StrategyEvaluator(m, c, w, cm)
    target = fused_target(a, c)
    files = strategy_files(a, ev, target, exp, price, model=model, isl=isl)
    write_outputs(out, OUTPUTS, files)
    checked = verify_fused(ev, target, isl) if verify and target is not None else None
    title = f"{m.name} on {c.name} ({c.num_gpus} GPUs), b={batch} L_in={isl} L_out={osl}"
    warnings, ps = strategy_warnings(cm, m, best), strategy_price_sources(m, c, w, cm, best)
    if json_out:
        obj = {
            **strategy_json(a, top, exp, model, c.name, best, price),
            "engine": engine,
            "pricing": price,
            "price_sources": ps,
            "warnings": warnings,
        }
        if verify:
            obj["verify"] = checked
        print_json(obj)
        return
    _print_human(a, top, exp, title, price)
    if ps is not None:
        console.print(sources_line(ps, "the #1 strategy's prefill and decode steps per batch"))
    if verify:
        _print_verify(checked)
    for line in warnings:
        err_console.print(f"[yellow]warning:[/] {line}")


OUTPUTS = {"plan.json", "pareto.html", "gantt.html", "sglang.sh", "vllm.sh"}


def _print_verify(checked: dict | None) -> None:
    if checked is None:
        console.print("verify: no fused layout on this cluster (one node)")
        return
    console.print(
        f"verify (exhaustive enumeration; fused rounds replayed on moeplan.sim) "
        f"for {checked['strategy']}:"
    )
    for key, v in checked.items():
        if key != "strategy":
            console.print(
                f"  {key}: closed form {fmt_time(v['closed_form_s'])}, simulated "
                f"{fmt_time(v['simulated_s'])}, gap {v['gap']:.2e}"
            )


def register(app: typer.Typer) -> None:
    app.command("strategy")(strategy)
