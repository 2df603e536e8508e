"""Does a kernel model learned on one GPU transfer to another? H100 -> H200, same kernels.

The kernel database's NVIDIA tables exist for H100 and A100 only; every other GPU (H200, H800,
H20, B200, ...) is priced by *transferring* a table GPU's model by the datasheet
(:meth:`moeplan.cost.kerneldb.fit.Analytic.scaled`). Its leave-one-GPU-out figure (A100 <-> H100)
mixes three changes at once: the GPU, the engine version (e.g. vLLM 0.14 vs 0.24) and often
the kernel (FA2 vs FA3). This check isolates the GPU: moeplan's *own* kernels (grouped MoE,
SDPA), the same code and software, timed by ``bench/gpu_session.py --steps calibrate`` on an
H100 (``bench/data/gpu_h100_2026-11-22``) and an H200 (``bench/data/gpu_h200_2026-11-23``) at
the same 776 shapes of NVIDIA's tables (CUDA-graph replay = kernel time).

The H100 rows are fitted (:func:`moeplan.cost.kernel_fits.fit_rows`), the fits are moved to
the H200 by one of the scalings below and every H200 row is predicted:

- ``none``: the H100 times as they are;
- ``kerneldb``: the kernel database's rule (:meth:`~moeplan.cost.kerneldb.fit.Analytic.scaled`)
  — rates x the datasheet peak ratio (FLOP/s 989 / 989 TFLOP/s, HBM 4.8 / 3.35 TB/s), the
  floor x the SM clock ratio (1980 / 1980 MHz), per-token / per-sequence costs x the
  bandwidth ratio;
- ``sqrt floor``: the rule it replaced — the floor x sqrt(bandwidth ratio) instead;
- ``rates``: rates x the datasheet ratio, floor and per-work costs kept (launch and setup
  times do not follow HBM bandwidth);
- ``ceilings``: as ``rates`` but with the ceilings measured on each card in the same session
  (copy 2.96 / 4.18 TB/s, GEMM 742 / 753 TFLOP/s);
- ``h200 fit``: the reference — the H200's own fit, whole shapes held out (5 folds), as
  ``moeplan calibrate`` reports it.

Prints median / p90 |predicted / measured - 1| per operation. Then the runtime's MoE layer and
attention layer (``--steps runtime``: 4 models at full width, one GPU, bf16; the MoE layer
CUDA-graph replayed) on each card against the cost model with that card's own profile, with
the H100 profile as it is, and with NVIDIA's SGLang tables (transferred to the H200).
CPU only, from committed data: ``.venv/bin/python bench/gpu_transfer.py`` (``--json``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost.kernel_fits import (
    KernelFits,
    attn_shape_of,
    cross_validate,
    fit_attention,
    fit_moe,
    fit_rows,
    moe_shape_of,
)
from moeplan.specs import load_cluster

DATA = Path(__file__).parent / "data"
SRC, DST = DATA / "gpu_h100_2026-11-22", DATA / "gpu_h200_2026-11-23"
KEYS = (("moe", "moe"), ("prefill", "context_attention"), ("decode", "generation_attention"))


def load_rows(folder: Path) -> dict[str, list[dict[str, Any]]]:
    return json.loads((folder / "calibrate_rows.json").read_text())


def ceilings(folder: Path) -> tuple[float, float]:
    """(GEMM FLOP/s, copy bytes/s) measured in that session."""
    c = json.loads((folder / "session.json").read_text())["ceilings"]
    return float(c["gemm_flops"]), float(c["copy_Bps"])


def scaled(fits: KernelFits, flops: float, bw: float, floor: float, work: float) -> KernelFits:
    """``fits`` with rates x (``flops``, ``bw``), floors x ``floor``, per-work x ``work``."""

    def one(f: Any) -> Any:
        if f is None:
            return None
        per = {"per_token": f.per_token * work} if hasattr(f, "per_token") else {}
        if hasattr(f, "per_seq"):
            per = {"per_seq": f.per_seq * work}
        return replace(f, floor=f.floor * floor, flops=f.flops * flops, bw=f.bw * bw, **per)

    return replace(fits, moe=one(fits.moe), prefill=one(fits.prefill), decode=one(fits.decode))


def scalings(src: KernelFits) -> dict[str, KernelFits]:
    h100, h200 = load_cluster("h100-sxm-8").gpu, load_cluster("h200-sxm-8").gpu
    fr, br = h200.flops_bf16 / h100.flops_bf16, h200.mem_bw / h100.mem_bw
    (g1, c1), (g2, c2) = ceilings(SRC), ceilings(DST)
    return {
        "none": src,
        "kerneldb": scaled(
            src, fr, br, 1.0, 1 / br
        ),  # SM clocks equal (the GPU records' sm_clock_mhz)
        "sqrt floor": scaled(src, fr, br, br**-0.5, 1 / br),
        "rates": scaled(src, fr, br, 1.0, 1.0),
        "ceilings": scaled(src, g2 / g1, c2 / c1, 1.0, 1.0),
    }


def _shapes(op: str) -> Callable[[dict[str, Any]], Any]:
    return moe_shape_of if op == "moe" else (lambda r: attn_shape_of(r, op))


def errors(fits: KernelFits, rows: dict[str, list[dict[str, Any]]]) -> dict[str, np.ndarray]:
    """|predicted / measured - 1| per row of each operation."""
    out = {}
    for key, op in KEYS:
        model = getattr(fits, key)
        shape = _shapes(op)
        pred = np.array([model(shape(r)) for r in rows[op]])
        out[key] = np.abs(pred / np.array([r["ours_s"] for r in rows[op]]) - 1)
    return out


def reference(rows: dict[str, list[dict[str, Any]]]) -> dict[str, tuple[float, float]]:
    """The destination's own fit, whole shapes held out: (median, p90)."""
    from moeplan.cost.kernel_fits import _group

    out = {}
    for key, op in KEYS:
        rs = rows[op]
        fitter: Callable[[Any, Any], Any] = (
            fit_moe if op == "moe" else (lambda s, y, d=key == "decode": fit_attention(s, y, d))
        )
        q = cross_validate(
            fitter,
            [_shapes(op)(r) for r in rs],
            [r["ours_s"] for r in rs],
            [_group(r, op) for r in rs],
        )
        out[key] = (q.heldout_median_ape, q.heldout_p90_ape)
    return out


def runtime_layers() -> dict[str, dict[str, tuple[float, float]]]:
    """Median / max |predicted / measured - 1| of the runtime layers per GPU x cost model."""
    from gpu_vs_tables import runtime_prediction
    from moeplan.cost import CostModel, load_profile
    from moeplan.kernel_tables import kernel_db

    out = {}
    for gpu, cluster, data in (("H100", "h100-sxm-8", SRC), ("H200", "h200-sxm-8", DST)):
        cl = load_cluster(cluster)
        models = {
            "own profile": CostModel(cl, load_profile(f"{gpu.lower()}-measured")),
            "h100 profile": CostModel(cl, load_profile("h100-measured")),
            "sglang tables": CostModel(cl, None, engine="sglang", kernels=kernel_db()),
        }
        rows = json.loads((data / "runtime.json").read_text())
        for label, cm in models.items():
            errs: dict[str, list[float]] = {"moe_layer": [], "attention": []}
            for r in rows:
                meas = (
                    r.get("graph_s", r["measured_s"]) if r["op"] == "moe_layer" else r["measured_s"]
                )
                errs[r["op"]].append(abs(runtime_prediction(cm, r) / meas - 1))
            out[f"{gpu} {label}"] = {k: (float(np.median(v)), max(v)) for k, v in errs.items()}
    return out


def run() -> dict[str, dict[str, tuple[float, float]]]:
    src_rows, dst_rows = load_rows(SRC), load_rows(DST)
    fits = fit_rows(src_rows, lambda op, r: r["ours_s"])
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for name, f in scalings(fits).items():
        e = errors(f, dst_rows)
        table[name] = {k: (float(np.median(v)), float(np.percentile(v, 90))) for k, v in e.items()}
    table["h200 fit"] = reference(dst_rows)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    table, layers = run(), runtime_layers()
    if a.json:
        print(json.dumps({"transfer": table, "runtime_layers": layers}, indent=1))
        return
    print("H100 own-kernel fits moved to the H200, error against the H200's measured rows")
    print("(median / p90 of |predicted / measured - 1|)\n")
    print(f"{'scaling':12s}" + "".join(f"{k:>18s}" for k, _ in KEYS))
    for name, cells in table.items():
        print(f"{name:12s}" + "".join(f"{m:>9.1%} / {p:<6.1%}" for m, p in cells.values()))
    print("\nruntime layers vs the cost model (median / max |predicted / measured - 1|)\n")
    print(f"{'GPU, cost model':22s}{'MoE layer':>18s}{'attention layer':>18s}")
    for name, cells in layers.items():
        print(f"{name:22s}" + "".join(f"{m:>9.1%} / {p:<6.1%}" for m, p in cells.values()))


if __name__ == "__main__":
    main()
