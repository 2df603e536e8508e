"""The measured columns of the shipped lab CSV are each run's own measurement.

Oracles: two benchmark runs on different GPUs cannot report the same total-token throughput,
mean TTFT and duration to the hundredth, so no measurement may appear under two GPUs; and the
GLM-4.5-Air H100 random-dataset rows carry the figures of the H100 report's own Conclusion
table (gpustack/gpustack @ 47277d79, ``docs/performance-lab/glm-4.5-air/h100.md``, the
"baseline (vLLM without any optimizations)" and "Optimized" columns), because that report's
"Other Benchmark Cases" blocks repeat the A100 report's runs verbatim (6435.97 tok/s,
248013.29 ms mean TTFT, 498.76 s for random 32K input under both GPUs)."""

from __future__ import annotations

import csv
from collections import defaultdict

import pytest

from moeplan.commands.validate import shipped_csv

#: (case_id): (total TPS, mean TPOT ms) from the GLM-4.5-Air H100 report's Conclusion table;
#: its baseline ShareGPT cell (7909.53 / 134.47) is the report's own vLLM TP4 run
#: glm-4.5-air/h100#01, so the table holds the runs' raw figures
H100_CONCLUSION = {
    "glm-4.5-air/h100#08": (20732.85, 176.99),  # Very Long Prompt, baseline
    "glm-4.5-air/h100#09": (21705.53, 82.53),  # Long Prompt, baseline
    "glm-4.5-air/h100#10": (22582.76, 125.44),  # Medium Prompt, baseline
    "glm-4.5-air/h100#11": (7066.67, 214.38),  # Short Prompt, baseline
    "glm-4.5-air/h100#12": (26683.88, 200.08),  # Very Long Prompt, optimized
    "glm-4.5-air/h100#13": (33207.02, 71.49),  # Long Prompt, optimized
    "glm-4.5-air/h100#14": (35741.37, 106.94),  # Medium Prompt, optimized
    "glm-4.5-air/h100#15": (28621.61, 327.73),  # Short Prompt, optimized
}


def _rows() -> list[dict[str, str]]:
    with shipped_csv().open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_no_measurement_appears_under_two_gpus():
    seen: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for r in _rows():
        if r["duration_s"]:
            seen[(r["total_tok_s"], r["mean_ttft_ms"], r["duration_s"])].add(r["gpu"])
    assert not [k for k, gpus in seen.items() if len(gpus) > 1]


def test_rows_without_a_published_block_keep_only_the_conclusion_figures():
    by_id = {r["case_id"]: r for r in _rows()}
    for case, (tps, tpot) in H100_CONCLUSION.items():
        r = by_id[case]
        assert (r["gpu"], r["dataset"]) == ("H100", "random")
        assert float(r["total_tok_s"]) == pytest.approx(tps, abs=0.005)
        assert float(r["mean_tpot_ms"]) == pytest.approx(tpot, abs=0.005)
        assert r["mean_ttft_ms"] == r["duration_s"] == ""
        if r["label"] == "optimized":
            # the report's Conclusion "Serving Command", its optimized configuration
            assert "GLM-4.5-Air-FP8" in r["serve_flags"] and "--ep-size 4" in r["serve_flags"]
            assert r["quant"] == "fp8"
