"""``moeplan run``: execute a plan.json on local processes (gloo on CPU, NCCL on CUDA).

Spawns one process per rank itself (no torchrun needed), runs the plan's engine, checks every
rank against the single-process reference and, with ``--timeline``, writes the measured
per-rank timeline (Chrome trace JSON) — for DEP plans also the simulator's prediction beside it
(``<timeline>.predicted.json``). torch is imported only when the command runs.

Robustness: ``--timeout`` (finite, > 0, <= ``MAX_TIMEOUT_S``), ``--nproc``,
``--tokens``, ``--isl`` and ``--micro-batches`` are checked and the plan is read with the bounded
JSON reader and validated before any process starts; a malformed plan is one line. The spawner
bounds every wait (other ranks get RUN_GRACE_S to report after one fails), stops its
children with SIGTERM then SIGKILL, and forwards a SIGTERM/SIGINT it receives to them. Exit 2
when every failing rank failed on user input, 1 for a fault.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from moeplan.cli._common import QuietOpt, console, fmt_time, fmt_times, print_json, progress
from moeplan.commands.run import check_capacity, check_gpus, check_sizes, read_run_plan, run_summary


def run_command(
    plan: Annotated[
        str,
        typer.Option("--plan", help="plan.json (schema moeplan.plan/1), or a folder holding one."),
    ],
    nproc: Annotated[
        int | None,
        typer.Option("--nproc", help="Processes to start; default: the plan's world_size."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Model preset, config.json or checkpoint folder (default: the plan's model).",
        ),
    ] = None,
    scale: Annotated[str, typer.Option("--scale", help="small (CPU-sized) or full.")] = "small",
    tokens: Annotated[
        int | None,
        typer.Option(
            "--tokens",
            help="Tokens in the global batch (default: 64, or one sequence when --isl / the "
            "plan's seq_len is longer).",
        ),
    ] = None,
    seq: Annotated[
        int | None,
        typer.Option("--isl", help="Tokens per sequence (default: the plan's seq_len, else 8)."),
    ] = None,
    weights: Annotated[
        list[str] | None,
        typer.Option("--weights", help="safetensors file(s) with the model's weights (repeat)."),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            "--timeline",
            help="Write the measured Chrome trace here (DEP: also .predicted.json).",
        ),
    ] = None,
    unfused: Annotated[
        bool,
        typer.Option(
            "--unfused", help="Hybrid TP-EP: unfused collectives instead of MixServe's fused ones."
        ),
    ] = False,
    sync_send: Annotated[bool, typer.Option("--sync-send", help="PP: blocking sends.")] = False,
    micro_batches: Annotated[
        int | None, typer.Option("--micro-batches", help="PP micro-batches (default pp).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Collective timeout in seconds.")
    ] = 60.0,
    no_check: Annotated[bool, typer.Option("--no-check", help="Skip the reference check.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Run a plan on local processes and check it against a single-process reference."""
    from moeplan.runtime.launch import validate_plan
    from moeplan.runtime.runner import RunOptions, spawned_rank
    from moeplan.runtime.spawn import RUN_GRACE_S, check_timeout, spawn_world

    timeout = check_timeout(timeout)
    for w in weights or ():  # regular files (a FIFO would block every rank)
        from moeplan.io import check_regular_file

        check_regular_file(w, "--weights")
    if trace is not None:  # not a device, FIFO or folder: refused before any process starts
        from moeplan.io import check_target
        from moeplan.runtime.runner import predicted_path

        check_target(trace)
        check_target(predicted_path(trace))
    check_sizes(tokens, seq, micro_batches)
    plan, doc, world = read_run_plan(plan, nproc)
    opts = RunOptions(
        model=model,
        scale=scale,
        tokens=tokens,
        seq=seq,
        check=not no_check,
        fused=False if unfused else None,
        async_send=False if sync_send else None,
        micro_batches=micro_batches,
        timeout_s=timeout,
        trace=trace,
        warmup=1,
        weights=tuple(weights or ()),
    )
    validate_plan(plan, doc, world, opts)  # user errors before any process starts
    check_gpus(world)
    check_capacity(doc, world, opts)
    with progress(not (quiet or as_json), f"running the plan on {world} processes"):
        reports = spawn_world(
            spawned_rank, world, (doc, opts), deadline_s=4 * timeout + 60, grace_s=RUN_GRACE_S
        )
    _finish(reports, world, as_json)


def _finish(reports: list[dict[str, Any]], world: int, as_json: bool) -> None:
    summary = run_summary(reports, world)
    failed = [(r, rep) for r, rep in enumerate(reports) if not rep["ok"]]
    if as_json:
        print_json(summary)
    else:
        _print_human(summary)
    if failed:
        for r, rep in failed:
            from moeplan.textsafe import escape_controls

            print(
                f"moeplan: error: rank {r}: {escape_controls(str(rep['error']))}", file=sys.stderr
            )
        # sys.exit, not typer.Exit: click returns (drops) Exit codes when standalone_mode=False
        sys.exit(2 if all(rep["kind"] == "user" for _, rep in failed) else 1)


def _print_human(s: dict[str, Any]) -> None:
    from moeplan.cli._common import Table

    t = Table(title=f"moeplan run: {s.get('family', '?')} on {s['world_size']} ranks")
    unit, walls = fmt_times([r["wall_s"] for r in s["ranks"]])
    for col in ("rank", "role", f"wall ({unit})", "max abs err"):
        t.add_column(col)
    for r, wall in zip(s["ranks"], walls, strict=True):
        err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
        t.add_row(str(r["rank"]), r["role"], wall, err)
    console.print(t)
    if s.get("trace"):
        console.print(
            f"measured timeline: {s['trace']} (makespan {fmt_time(s['measured_makespan_s'])})"
        )
    if s.get("predicted_trace"):
        console.print(
            f"simulated timeline: {s['predicted_trace']} "
            f"(makespan {fmt_time(s['predicted_makespan_s'])})"
        )


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
