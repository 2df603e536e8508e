"""``moeplan calibrate``: fit the cost models to measured latencies and report their error.

``--measured NAME`` fits NVIDIA's shipped tables; ``--device cuda|cpu`` instead runs this
machine's micro-benchmarks (:mod:`moeplan.profiling`, ``--quick`` for small sizes) and fits
the same models. Both print R² and held-out error per fit; ``--out`` writes the profile JSON.
"""

from __future__ import annotations

import json
import math
from typing import Annotated

import typer
from rich.table import Table

from moeplan.cli._common import console, err_console, print_json, write_atomic
from moeplan.cost.calibrate import calibrate as fit_all
from moeplan.measured import MEASURED, read_gemm, read_nccl


def calibrate(
    measured: Annotated[str, typer.Option(
        help=f"Measurement set: one of {', '.join(MEASURED)}, or a folder with "
             "gemm_perf.parquet and nccl_perf.parquet.")] = "h100_sxm",
    seed: Annotated[int, typer.Option(help="Seed of the 20% held-out split.")] = 0,
    out: Annotated[str | None, typer.Option(help="Write the fitted HardwareProfile JSON here.")] = None,
    device: Annotated[str | None, typer.Option(
        help="Measure this machine instead: cuda or cpu (micro-benchmarks, then the same fits).")] = None,
    quick: Annotated[bool, typer.Option(help="With --device: small sizes, few repeats.")] = False,
    name: Annotated[str | None, typer.Option(
        help="With --device: profile name (e.g. h100-measured).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fit GEMM (roofline) and NCCL (piecewise α-β) models; R² and held-out error per fit."""
    if device is not None:
        profile, report = _measure(device, quick, seed, name, progress=not json_out)
        measured = f"device:{device}"
    else:
        profile, report = fit_all(measured, f"moeplan calibrate --measured {measured} --seed {seed}",
                                  read_gemm(measured), read_nccl(measured), seed=seed)
    if out:
        write_atomic(out, json.dumps(profile.to_dict(), indent=1))
    fits = [{"op": r.op, "num_gpus": r.num_gpus, "scope": r.scope or "all sizes",
             "r2": _num(r.quality.r2), "heldout_median_ape": r.quality.heldout_median_ape,
             "heldout_p90_ape": r.quality.heldout_p90_ape, "n_fit": r.quality.n_fit,
             "n_heldout": r.quality.n_heldout} for r in report]
    if json_out:
        print_json({"measured": measured, "seed": seed, "profile": out or profile.to_dict(),
                    "fits": fits})
        return
    t = Table(title=f"Calibration on {measured} (20% of rows held out, seed {seed})")
    for c in ("op", "GPUs", "scope", "R²", "held-out median APE", "held-out p90 APE", "rows"):
        t.add_column(c)
    for f in fits:
        t.add_row(f["op"], str(f["num_gpus"]), f["scope"], _pct(f["r2"], 1, ".4f"),
                  _pct(f["heldout_median_ape"]), _pct(f["heldout_p90_ape"]),
                  f"{f['n_fit']}+{f['n_heldout']}")
    console.print(t)
    g = profile.gemm
    console.print(f"GEMM roofline: {g.flops / 1e12:.3g} TFLOP/s effective, "  # type: ignore[union-attr]
                  f"{g.bw / 1e12:.3g} TB/s, {g.alpha * 1e6:.1f} µs launch")  # type: ignore[union-attr]
    if out:
        console.print(f"profile written to {out}")


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _pct(x: float | None, scale: float = 100, fmt: str = ".1f") -> str:
    if x is None:
        return "—"
    return f"{scale * x:{fmt}}" + ("%" if scale == 100 else "")


def _measure(device: str, quick: bool, seed: int, name: str | None, *, progress: bool):
    """Run :func:`moeplan.profiling.calibrate.run_calibration` under a rich progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from moeplan.profiling.calibrate import run_calibration

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, disable=not progress,
                  transient=True) as bar:
        task = bar.add_task("measuring", total=None)
        profile, report, _, _ = run_calibration(
            device, quick=quick, seed=seed, name=name,
            on_plan=lambda n: bar.update(task, total=n),
            on_job=lambda label: bar.update(task, advance=1, description=label))
    return profile, report


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
