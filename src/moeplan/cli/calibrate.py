"""``moeplan calibrate``: fit the cost models to measured latencies and report their error.

``--measured NAME`` fits NVIDIA's shipped tables; ``--device cuda|cpu`` instead runs this
machine's micro-benchmarks (:mod:`moeplan.profiling`, ``--quick`` for small sizes) and fits
the same models. Both print R² and held-out error per fit; ``--out`` writes the profile JSON.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from moeplan.cli._common import QuietOpt, Table, console, err_console, print_json, write_atomic
from moeplan.commands.calibrate import (
    check_mode,
    fit_measured,
    fit_rows,
    fold_test_errors,
    fold_test_tables,
    kernel_errors,
)
from moeplan.measured import MEASURED

DEFAULT_MEASURED = "h100_sxm"  # the measurement set fitted when none is named


def calibrate(
    measured: Annotated[
        str,
        typer.Option(
            help=f"Measurement set: one of {', '.join(MEASURED)}, or a folder with "
            "gemm_perf.parquet and nccl_perf.parquet."
        ),
    ] = DEFAULT_MEASURED,
    seed: Annotated[int, typer.Option(help="Seed of the 20% held-out split.")] = 0,
    out: Annotated[
        str | None, typer.Option(help="Write the fitted HardwareProfile JSON here.")
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            help="Measure this machine instead: cuda or cpu (micro-benchmarks, then the same fits)."
        ),
    ] = None,
    quick: Annotated[bool, typer.Option(help="With --device: small sizes, few repeats.")] = False,
    name: Annotated[
        str | None, typer.Option(help="With --device: profile name (e.g. h100-measured).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: QuietOpt = False,
    kernels: Annotated[
        bool,
        typer.Option(
            help="Evaluate the kernel database instead: held-out whole shapes, leave-one-GPU-out "
            "and roofline error per GPU x engine x op x regime."
        ),
    ] = False,
    op: Annotated[
        list[str] | None, typer.Option(help="With --kernels: only these operations (repeatable).")
    ] = None,
    folds: Annotated[
        int | None,
        typer.Option(help="With --kernels: evaluate only this many of the 5 shape folds (faster)."),
    ] = None,
    errors_out: Annotated[
        str | None,
        typer.Option(
            help="With --kernels: write the per-source error table (heldout_errors.json)."
        ),
    ] = None,
    test_fold: Annotated[
        bool,
        typer.Option(
            help="With --kernels: the final error on the frozen test fold of the B200 / GB200 "
            "tables per GPU x engine x op x dtype, and the stated leave-one-GPU-out errors."
        ),
    ] = False,
    rows_out: Annotated[
        str | None,
        typer.Option(
            help="With --device: also write the own-kernel rows measured at the kernel tables' "
            "shapes (JSON {op: [row]}, the tables' columns plus ours_s)."
        ),
    ] = None,
) -> None:
    """Fit GEMM (roofline) and NCCL (piecewise α-β) models; R² and held-out error per fit."""
    check_mode(kernels, device, {"--quick": quick, "--name": name, "--out": out,
               "--measured": measured != DEFAULT_MEASURED, "--rows-out": rows_out,
               "--op": op, "--folds": folds is not None, "--errors-out": errors_out,
               "--test-fold": test_fold})  # fmt: skip
    if kernels and test_fold:
        _test_fold(op, errors_out, json_out)
        return
    if kernels:
        _kernels(op, seed, folds, errors_out, json_out)
        return
    skipped: list[list[str]] = []
    if device is not None:
        profile, report, rows, skipped = _measure(
            device, quick, seed, name, progress=not (json_out or quiet)
        )
        measured = f"device:{device}"
        if rows_out:
            write_atomic(rows_out, json.dumps(rows))
    else:
        profile, report = fit_measured(measured, seed)
    if out:
        write_atomic(out, json.dumps(profile.to_dict(), indent=1))
    fits = fit_rows(report)
    if json_out:
        print_json(
            {
                "measured": measured,
                "seed": seed,
                "profile": out or profile.to_dict(),
                "fits": fits,
                "skipped": skipped,
            }
        )
        return
    t = Table(title=f"Calibration on {measured} (20% of rows held out, seed {seed})")
    for c in ("op", "GPUs", "scope", "R²", "held-out median APE", "held-out p90 APE", "rows"):
        t.add_column(c)
    for f in fits:
        t.add_row(
            f["op"],
            str(f["num_gpus"]),
            f["scope"],
            _pct(f["r2"], 1, ".4f"),
            _pct(f["heldout_median_ape"]),
            _pct(f["heldout_p90_ape"]),
            f"{f['n_fit']}+{f['n_heldout']}",
        )
    console.print(t)
    g = profile.gemm
    console.print(
        f"GEMM roofline: {g.flops / 1e12:.3g} TFLOP/s effective, "  # type: ignore[union-attr]
        f"{g.bw / 1e12:.3g} TB/s, {g.alpha * 1e6:.1f} µs launch"
    )  # type: ignore[union-attr]
    if out:
        console.print(f"profile written to {out}")


def _kernels(
    ops: list[str] | None, seed: int, folds: int | None, errors_out: str | None, json_out: bool
) -> None:
    """``--kernels``: held-out evaluation of the kernel database, per regime."""
    rows, errors = kernel_errors(ops, seed, folds)
    if errors_out:
        write_atomic(
            errors_out, json.dumps({"seed": seed, "folds": folds or 5, "errors": errors}, indent=1)
        )
    if json_out:
        out = {"seed": seed, "folds": folds or 5, "rows": [r.to_dict() for r in rows]}
        print_json({**out, "errors": errors, "errors_out": errors_out})
        return
    t = Table(
        title="Kernel database error (|predicted/measured - 1|): held-out whole shapes "
        "(interpolated), leave-one-GPU-out (transferred), datasheet roofline"
    )
    for c in ("GPU", "engine", "op", "method", "regime", "load", "rows", "median", "p90"):
        t.add_column(c)
    for r in rows:
        cells = (r.gpu, r.engine, r.op, r.method, r.regime, r.load, str(r.n))
        t.add_row(*cells, f"{r.median:.1%}", f"{r.p90:.1%}")
    console.print(t)
    if errors_out:
        console.print(f"error table written to {errors_out}")


def _test_fold(ops: list[str] | None, errors_out: str | None, json_out: bool) -> None:
    """``--kernels --test-fold``: the final test error cells and the stated transfer errors."""
    cells, transfer, stated = fold_test_errors(ops)
    rows = [c.to_dict() for c in cells]
    if errors_out:
        body = {"method": "frozen_test", "cells": rows, "errors": stated}
        write_atomic(errors_out, json.dumps(body, indent=1))
    if json_out:
        print_json({"test_fold": rows, "gpu_transfer": transfer.get("stated", []),
                    "errors_out": errors_out})  # fmt: skip
        return
    for title, head, body in fold_test_tables(cells, transfer):
        t = Table(title=title)
        for c in head:
            t.add_column(c)
        for r in body:
            t.add_row(*r)
        console.print(t)


def _pct(x: float | None, scale: float = 100, fmt: str = ".1f") -> str:
    if x is None:
        return "—"
    return f"{scale * x:{fmt}}" + ("%" if scale == 100 else "")


def _measure(device: str, quick: bool, seed: int, name: str | None, *, progress: bool):
    """Run :func:`moeplan.profiling.calibrate.run_calibration` under a rich progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from moeplan.profiling.calibrate import run_calibration

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=not progress,
        transient=True,
    ) as bar:
        task = bar.add_task("measuring", total=None)
        profile, report, meas, _ = run_calibration(
            device,
            quick=quick,
            seed=seed,
            name=name,
            on_plan=lambda n: bar.update(task, total=n),
            on_job=lambda label: bar.update(task, advance=1, description=label),
        )
    if meas.skipped:
        err_console.print(
            f"skipped {len(meas.skipped)} measurements: "
            + "; ".join(f"{label} ({why})" for label, why in meas.skipped[:5])
            + (" ..." if len(meas.skipped) > 5 else "")
        )
    return profile, report, meas.tables, [list(x) for x in meas.skipped]


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
