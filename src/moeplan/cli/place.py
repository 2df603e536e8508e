"""``moeplan place``: Sem-MoE expert placement and data scheduling vs baselines.

Thin: build the model, cluster and cost model, stream the trace file into
:func:`moeplan.planners.placement.planner.place`, print a methods table (or one JSON object), and
optionally write the SGLang ``--init-expert-location`` JSON, the scheduling tables and a
plotly heatmap, all atomically (mode 0666 less the umask, like any file the user writes). With
``--export-sglang`` it prints the SGLang flags that go with the file: ``--init-expert-location``,
``--ep-size`` and, when ``--redundant`` replicated experts, ``--ep-num-redundant-experts``.
``--engine`` picks whose measured kernels price the MoE layer time of every method; the
output says which, and the mix of sources.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from moeplan.backends import DEFAULT_ENGINE
from moeplan.cli import _common as opt
from moeplan.cli._common import (
    Table,
    console,
    fmt_bytes,
    fmt_time,
    fmt_times,
    print_json,
    write_atomic,
)
from moeplan.commands.glossary import PLACE_TRACE_HELP, glossary
from moeplan.commands.place import (
    expert_location,
    place_json,
    place_price_sources,
    place_setup,
    run_place,
    schedule_tables,
    sglang_flags,
)
from moeplan.errors import require
from moeplan.export.expert_location import write_sglang_expert_location, write_tables
from moeplan.kernel_tables import pricing
from moeplan.planners.placement.planner import PlacementResult
from moeplan.report.command_figures import heatmap_html


def _print_table(res: PlacementResult) -> None:
    t = Table(title=f"expert placement, EP{res.ep}, attention-{res.mode.upper()} (held-out split)")
    unit, times = fmt_times([m.metrics["moe_layer_time_s"] for m in res.methods.values()])
    for col in ("method", "LAR", "imbalance", "balancedness", "a2a / layer", f"MoE layer ({unit})"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for (name, m), time_text in zip(res.methods.items(), times, strict=True):
        x = m.metrics
        t.add_row(
            name,
            f"{x['lar']:.3f}",
            f"{x['imbalance']:.3f}",
            f"{x['balancedness']:.3f}",
            fmt_bytes(x["a2a_bytes_per_layer"]),
            time_text,
        )
    console.print(t)
    console.print(glossary("LAR", "imbalance", "balancedness", "a2a"), style="dim")
    console.print(
        f"solve {fmt_time(res.solve_s)}; co-clustering objective "
        f"{res.objective['cocluster']:.3f} vs paper greedy {res.objective['greedy']:.3f}"
    )
    g = res.extra.get("guard")
    if g is not None:
        lo, hi = g["time_ratio_interval_90"]
        console.print(
            f"validation guard ({g['requests']} held-out requests, paired bootstrap): "
            f"{g['decision']}; Sem-MoE / contiguous MoE-layer time {lo:.3f}-{hi:.3f} "
            f"(90 % interval), P(slower) {g['p_slower']:.2f}, P(more local) "
            f"{g['p_more_local']:.2f}"
        )


def place_cmd(
    trace: Annotated[Path, typer.Option("--routing-trace", "--trace", help=PLACE_TRACE_HELP)],
    model: Annotated[str, typer.Option(help="Model preset, config.json or checkpoint folder.")],
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (devices)")],
    mode: Annotated[str, typer.Option(help="Attention parallelism: dp or tp")] = "dp",
    baselines: Annotated[
        bool, typer.Option("--baselines/--no-baselines", help="Also plan EPLB and transition")
    ] = True,
    cluster: Annotated[str, typer.Option(help="Cluster preset for the cost model")] = "h100-sxm-8",
    step_tokens: Annotated[int, typer.Option(help="Tokens per step for bytes/time")] = 8192,
    redundant: Annotated[
        int, typer.Option(help="Redundant expert slots per GPU (Sem-MoE and EPLB)")
    ] = 0,
    seed: Annotated[int, typer.Option(help="Split seed")] = 0,
    engine: opt.EngineOpt = DEFAULT_ENGINE,
    engine_version: opt.EngineVersionOpt = None,
    export_sglang: Annotated[
        Path | None,
        typer.Option("--export-sglang", help="Write SGLang --init-expert-location JSON"),
    ] = None,
    tables: Annotated[
        Path | None, typer.Option("--tables", help="Write token/request scheduling tables (.npz)")
    ] = None,
    heatmap: Annotated[Path | None, typer.Option("--heatmap", help="Write heatmap HTML")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout")] = False,
    quiet: opt.QuietOpt = False,
) -> None:
    """Plan Sem-MoE expert placement + scheduling and compare it with baselines."""

    m, cl, nodes, cfg = place_setup(
        model, ep, cluster, mode=mode, baselines=baselines, seed=seed, step_tokens=step_tokens,
        redundant=redundant,
    )  # fmt: skip
    require(trace.exists(), f"--routing-trace ({trace}) does not exist")
    cm = opt.engine_cost(cl, None, engine, engine_version)
    work = "Sem-MoE: co-clustering the trace" + (" and the baselines" if baselines else "")
    with opt.progress(not (quiet or as_json), work) as step:
        res, calls = run_place(trace, m, cm, nodes, cfg)
        step("writing the requested files")
        flags = _write_outputs(res, m, export_sglang, tables, heatmap)
    price, ps = pricing(cm), place_price_sources(m, cm, nodes, cfg, res, calls)
    if as_json:
        print_json(place_json(res, model, cluster, str(trace), engine, price, flags, ps))
        return
    _print_table(res)
    opt.print_pricing(price, ps, "Sem-MoE's MoE layer")
    if flags:
        console.print(
            f"SGLang launch flags for this file (one EP group of {res.ep} GPUs): "
            f"[bold]{shlex.join(flags)}[/]"
        )


def _write_outputs(
    res: PlacementResult,
    m: Any,
    export_sglang: Path | None,
    tables: Path | None,
    heatmap: Path | None,
) -> list[str]:
    """Write the requested files; the SGLang flags for the expert-location file, if written."""
    flags: list[str] = []
    if export_sglang is not None:
        p2l = expert_location(res)
        write_sglang_expert_location(
            export_sglang, p2l, ep=res.ep, num_hidden_layers=m.num_layers, moe_layers=m.moe_layers
        )
        flags = sglang_flags(export_sglang, res.ep, int(p2l.shape[1]), m.num_experts)
    if tables is not None:
        write_tables(tables, **schedule_tables(res))
    if heatmap is not None:
        write_atomic(heatmap, heatmap_html(res, f"Sem-MoE placement, EP{res.ep}"))
    return flags


def register(app: typer.Typer) -> None:
    app.command("place")(place_cmd)
