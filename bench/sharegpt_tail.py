"""How much a ShareGPT burst's predicted duration depends on the output lengths' tail.

The lab's gpt-oss-20b / vLLM 0.11.0 / H100 ShareGPT burst (``moeplan validate``'s row
``gpt-oss-20b/h100#01``: 1,000 prompts at ``--request-rate inf``, measured 24.81 s) is run
through ``moeplan bench`` three times with the same prompts: the shipped trace's outputs
scaled to the run's mean (what ``validate`` sends), and log-normal outputs of the same mean
(sigma 0.6 and 1.0, at least 4 tokens, prompt + output at most 2,048 as vLLM's filter
keeps them). The log-normal draws are a sensitivity probe, not a claim about ShareGPT.

Run: ``python bench/sharegpt_tail.py``; prints one JSON line per draw.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from moeplan.commands.bench_workload import sharegpt_lengths

MEANS = (215.31, 193.98)  # the row's mean_in / mean_out (lab_a100_h100_moe.csv)
BENCH = ["bench", "--launch", "vllm serve openai/gpt-oss-20b", "--cluster", "h100-sxm-8",
         "--engine-version", "0.11.0", "--json"]  # fmt: skip


def run(isl: np.ndarray, osl: np.ndarray, label: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "lengths.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["input_len", "output_len"])
            w.writerows(zip(isl.tolist(), osl.tolist(), strict=True))
        out = subprocess.run([sys.executable, "-m", "moeplan", *BENCH, "--dataset-path",
                              str(path)], capture_output=True, text=True, check=True)  # fmt: skip
    ans = json.loads(out.stdout)
    return {"draw": label, "longest_output": int(osl.max()), "mean_output": float(osl.mean()),
            "duration_s": ans["duration"], "mean_ttft_ms": ans["mean_ttft_ms"],
            "mean_tpot_ms": ans["mean_tpot_ms"]}  # fmt: skip


def main() -> None:
    p = sharegpt_lengths(1000, 0, MEANS)
    print(json.dumps(run(p.isl, p.osl, "shipped trace, scaled")))
    rng = np.random.default_rng(0)
    for sigma in (0.6, 1.0):
        o = rng.lognormal(0.0, sigma, len(p.osl))
        o = np.minimum(np.maximum(np.rint(o / o.mean() * MEANS[1]), 4), 2048 - p.isl)
        print(json.dumps(run(p.isl, o.astype(np.int64), f"log-normal sigma {sigma}")))


if __name__ == "__main__":
    main()
