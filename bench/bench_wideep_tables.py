"""The wide-EP tables a DeepSeek-V3 deployment is priced from, against a second source.

- The shared expert on the DeepEP path (attention DP) is SGLang's measured MLP module of a
  wide-EP deployment (``mlp/sglang/0.5.6.post2/wideep_{context,generation}_mlp_perf``, 7168 x
  2048 fp8_block): its price against the fp8 GEMM price it replaces at every token count of
  those tables, and the roofline error ``heldout_errors.json`` holds for it.
- H800 has no NVIDIA tables: its wide-EP grouped GEMM is transferred from H100's. InferSim's
  DeepGEMM measurements on H800 (``bench/data/infersim_grouped_gemm``, SOURCE.md there) time
  the grouped GEMMs alone (up + down projection, EP4-EP256 rows); moeplan's price (``h800-sxm-8``, SGLang, a
  rank's balanced load as the table rows measure it) over InferSim's time, per row.

    python bench/bench_wideep_tables.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from moeplan.kernel_tables import engine_cost_model, kernels_dir, read_errors
from moeplan.specs import load_cluster, load_model

INFERSIM = Path(__file__).parent / "data" / "infersim_grouped_gemm"
MLP = ("h100_sxm", "mlp", "sglang", "0.5.6.post2")


def shared_expert_rows() -> list[dict]:
    """The wide-EP MLP module's price over the fp8 GEMM price, per phase (min, max, at 8,192
    tokens), and its roofline held-out error."""
    dsv3 = load_model("deepseek-v3")
    cm = engine_cost_model(load_cluster("h100-sxm-8", 12), engine="sglang")
    rows = []
    for phase in ("context", "generation"):
        table = pq.read_table(kernels_dir().joinpath(*MLP) / f"wideep_{phase}_mlp_perf.parquet")
        tokens = sorted({int(r["num_token"]) for r in table.to_pylist()})
        decode = phase == "generation"
        ratio = {
            n: cm.wide_shared_expert(dsv3, n, decode) / cm.shared_expert(dsv3, n) for n in tokens
        }
        at = 8192 if 8192 in ratio else tokens[-1]
        rows.append({
            "name": f"shared expert, wide-EP MLP module / fp8 GEMM price ({phase})",
            "value": ratio[at], "unit": f"ratio at {at} tokens",
            "module_ms": cm.wide_shared_expert(dsv3, at, decode) * 1e3,
            "gemm_ms": cm.shared_expert(dsv3, at) * 1e3,
            "ratio_min": min(ratio.values()), "ratio_max": max(ratio.values()),
            "above_min": min(ratio.values()) - 1, "above_max": max(ratio.values()) - 1,
            "tokens_min": tokens[0], "tokens_max": tokens[-1],
            "note": "over the table's token counts: ratio and share above the GEMM, min / max",
        })  # fmt: skip
    for (gpu, engine, op, source), (median, p90) in sorted(read_errors().items()):
        if (gpu, engine, source) == ("h100_sxm", "sglang", "roofline") and op.endswith("_mlp"):
            rows.append({
                "name": f"{op} roofline held-out error (heldout_errors.json)",
                "value": median, "unit": "median relative error", "p90": p90,
            })  # fmt: skip
    return rows


def infersim_rows() -> list[dict]:
    """moeplan's wide-EP grouped GEMM on H800 over InferSim's DeepGEMM time, per phase:
    median, p10, p90 and the row count."""
    dsv3 = load_model("deepseek-v3")
    cm = engine_cost_model(load_cluster("h800-sxm-8", 32), engine="sglang")
    rows = []
    for phase, per_gpu in (("decode", "batch_size_per_gpu"), ("prefill", "seq_len_per_gpu")):
        with (INFERSIM / f"{phase}_h800.csv").open(encoding="utf-8") as fh:
            table = list(csv.DictReader(fh))
        ratios = []
        for r in table:
            ep, n = int(r["num_gpus"]), float(r[per_gpu])
            if ep == 1:  # one GPU holds every expert: no expert parallelism to compare
                continue
            got = cm.wide_ep.moe(
                dsv3, n, ep, phase="generation" if phase == "decode" else "context",
                batch_spread=False,
            ).gemm  # fmt: skip
            ratios.append(got / ((float(r["up_proj_us"]) + float(r["down_proj_us"])) * 1e-6))
        p10, med, p90 = np.percentile(ratios, [10, 50, 90])
        rows.append({
            "name": f"h800 wide-EP grouped GEMM / InferSim DeepGEMM ({phase})",
            "value": float(med), "unit": "median ratio", "p10": float(p10), "p90": float(p90),
            "rows": len(ratios),
        })  # fmt: skip
    return rows


def run() -> list[dict]:
    return shared_expert_rows() + infersim_rows()


def main() -> None:
    for r in run():
        print(r)


if __name__ == "__main__":
    main()
