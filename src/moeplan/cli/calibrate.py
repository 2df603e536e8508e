"""``moeplan calibrate``: fit the cost models to measured latencies and report their error."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from moeplan.cli._common import console, print_json, write_atomic
from moeplan.cost.calibrate import calibrate as fit_all
from moeplan.measured import MEASURED, read_gemm, read_nccl


def calibrate(
    measured: Annotated[str, typer.Option(
        help=f"Measurement set: one of {', '.join(MEASURED)}, or a folder with "
             "gemm_perf.parquet and nccl_perf.parquet.")] = "h100_sxm",
    seed: Annotated[int, typer.Option(help="Seed of the 20% held-out split.")] = 0,
    out: Annotated[str | None, typer.Option(help="Write the fitted HardwareProfile JSON here.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fit GEMM (roofline) and NCCL (piecewise α-β) models; R² and held-out error per fit."""
    profile, report = fit_all(measured, f"moeplan calibrate --measured {measured} --seed {seed}",
                              read_gemm(measured), read_nccl(measured), seed=seed)
    if out:
        write_atomic(out, json.dumps(profile.to_dict(), indent=1))
    fits = [{"op": r.op, "num_gpus": r.num_gpus, "scope": r.scope or "all sizes",
             "r2": r.quality.r2, "heldout_median_ape": r.quality.heldout_median_ape,
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
        t.add_row(f["op"], str(f["num_gpus"]), f["scope"], f"{f['r2']:.4f}",
                  f"{100 * f['heldout_median_ape']:.1f}%", f"{100 * f['heldout_p90_ape']:.1f}%",
                  f"{f['n_fit']}+{f['n_heldout']}")
    console.print(t)
    g = profile.gemm
    console.print(f"GEMM roofline: {g.flops / 1e12:.0f} TFLOP/s effective, "  # type: ignore[union-attr]
                  f"{g.bw / 1e12:.2f} TB/s, {g.alpha * 1e6:.1f} µs launch")  # type: ignore[union-attr]
    if out:
        console.print(f"profile written to {out}")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
