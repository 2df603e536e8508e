"""Cost-model error against NVIDIA's measured tables: the held-out errors of
``moeplan calibrate --measured GPU`` (seed 0, a random 20 % of rows held out) for the three
measured GPUs, as the rows of ``docs/BENCHMARKS.md``'s calibration table — the bf16 GEMM
roofline on large shapes and on all shapes, and the worst NCCL (op, GPUs) fit.

Not a timing: the figures are errors, the same on every machine. ``reference`` is the bar
(``tests/test_cost_calibration.py`` pins it) and ``ratio`` the error over the bar.
"""

from __future__ import annotations

from moeplan.commands.calibrate import fit_measured, fit_rows

GPUS = ("h100_sxm", "a100_sxm", "h200_sxm")
GEMM_BAR, NCCL_BAR = 0.15, 0.10  # the bars of tests/test_cost_calibration.py


def run() -> list[dict]:
    out: list[dict] = []
    for gpu in GPUS:
        _, report = fit_measured(gpu, 0)
        fits = fit_rows(report)
        gemm = {f["scope"]: f for f in fits if f["op"] == "gemm"}
        nccl = [f for f in fits if f["op"] != "gemm"]
        worst = max(nccl, key=lambda f: f["heldout_median_ape"])
        big, every = gemm["m*n*k >= 2^30"], gemm["all shapes"]
        out += [
            {"name": f"{gpu} bf16 GEMM, m*n*k >= 2^30, held-out median APE",
             "value": big["heldout_median_ape"], "unit": "relative", "reference": GEMM_BAR,
             "ratio": big["heldout_median_ape"] / GEMM_BAR, "target": "<= 0.15",
             "note": f"R2 {big['r2']:.3f}, {big['n_heldout']} rows held out"},
            {"name": f"{gpu} bf16 GEMM, all shapes, held-out median APE",
             "value": every["heldout_median_ape"], "unit": "relative", "reference": GEMM_BAR,
             "ratio": every["heldout_median_ape"] / GEMM_BAR, "target": "",
             "note": f"R2 {every['r2']:.3f}, {every['n_heldout']} rows held out"},
            {"name": f"{gpu} NCCL, worst (op, GPUs) of {len(nccl)}, held-out median APE",
             "value": worst["heldout_median_ape"], "unit": "relative", "reference": NCCL_BAR,
             "ratio": worst["heldout_median_ape"] / NCCL_BAR, "target": "<= 0.10",
             "note": f"{worst['op']}/{worst['num_gpus']}"},
        ]  # fmt: skip
    return out


if __name__ == "__main__":
    for row in run():
        print(row)
