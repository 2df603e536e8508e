"""Measured vs predicted: one MoE layer (routed experts) of each preset model on this device.

Each preset's expert shapes (hidden size, expert width, top-k; widths divided by ``--scale``
on CPU) run with ``--experts`` local experts at several token counts through
``moeplan.runtime.kernels.grouped_moe`` (permute, gather, grouped SwiGLU, combine). The prediction is
the cost model's ``CostModel.expert_ffn`` formula (two grouped GEMMs; permutation is not priced)
from a calibrated profile: ``--profile FILE`` (HardwareProfile JSON, e.g. from
``moeplan calibrate --device cuda --out``), else a ``--quick`` calibration run first.
Prints every row and the median absolute percentage error.

    .venv/bin/python bench/gpu_moe_layer.py --device cpu              # CPU figure (tiny sizes)
    python bench/gpu_moe_layer.py --device cuda --profile h100.json   # the GPU figure
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from moeplan.cost import CostModel, HardwareProfile
from moeplan.profiling import microbench as mb
from moeplan.profiling.calibrate import Measurements, local_cluster, run_calibration
from moeplan.profiling.timing import resolve_device
from moeplan.specs import load_model, model_names


def compare(
    device: str,
    profile: HardwareProfile,
    *,
    experts: int,
    scale: int,
    tokens: list[int],
    repeats: int,
) -> list[dict]:
    dev = resolve_device(device)
    gen = torch.Generator().manual_seed(0)
    meas = Measurements(
        copy_bw=mb.copy_bandwidth(16 << 20, device=dev, gen=gen),
        gemm_flops=mb.gemm_ceiling(256, device=dev, gen=gen),
    )
    cm = CostModel(local_cluster(dev, meas), profile)
    rows = []
    for name in model_names():
        model = load_model(name)
        h, i = -(-model.hidden_size // scale), -(-model.moe_intermediate_size // scale)
        e, k = min(experts, model.num_experts), min(model.top_k, experts)
        for t in tokens:
            measured = mb.bench_moe(t, k, e, h, i, device=dev, gen=gen, repeats=repeats)
            m = t * k / e
            pred = cm.grouped_gemm(m, 2 * i, h, e) + cm.grouped_gemm(m, h, i, e)
            rows.append(
                {
                    "model": name,
                    "tokens": t,
                    "experts": e,
                    "top_k": k,
                    "hidden": h,
                    "inter": i,
                    "measured_s": measured,
                    "predicted_s": pred,
                    "ape": abs(pred - measured) / measured,
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--profile", help="HardwareProfile JSON; default: quick calibration now")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cpu = a.device == "cpu"
    if a.profile:
        profile = HardwareProfile.from_dict(json.loads(Path(a.profile).read_text()))
    else:
        profile = run_calibration(a.device, quick=True)[0]
    rows = compare(
        a.device,
        profile,
        experts=a.experts,
        scale=8 if cpu else 1,
        tokens=[64, 256, 1024] if cpu else [1024, 4096, 16384, 65536],
        repeats=3 if cpu else 20,
    )
    med = float(np.median([r["ape"] for r in rows]))
    if a.json:
        print(
            json.dumps(
                {"device": a.device, "profile": profile.name, "rows": rows, "median_ape": med},
                indent=1,
            )
        )
        return
    for r in rows:
        print(
            f"{r['model']:16s} T={r['tokens']:6d} E={r['experts']} k={r['top_k']} "
            f"measured {r['measured_s'] * 1e3:9.3f} ms  predicted {r['predicted_s'] * 1e3:9.3f} ms "
            f" APE {100 * r['ape']:6.1f}%"
        )
    print(
        f"median absolute percentage error: {100 * med:.1f}% ({a.device}, profile {profile.name})"
    )


if __name__ == "__main__":
    main()
