"""The six comparison questions: ``moeplan plan --json`` on each, checked against committed outputs.

A change that must leave moeplan's answers unchanged (a refactor, a speed-up) is checked by
running these six plans and comparing every key of their JSON with the outputs committed in
``bench/baseline/`` (:func:`compare_plans.diff`: floats exactly; timings, temporary paths and
kernel-lookup counts skipped). The questions cover one node serially and with workers, a
given request rate, sixteen nodes, an MLA model on A100 and a small-expert-count model on H200.

Run: ``python bench/compare_questions.py`` (check; exit 1 on any difference) or
``python bench/compare_questions.py --write`` (record the current code's outputs as the
baseline: only for an intended change of answers, stated in its commit).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_plans import diff, leaves  # noqa: E402

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baseline"
#: top-level keys the baseline predates, allowed only in the new output: ``price_sources``
#: (each price source's share of the priced seconds), ``aggregated_vs_disaggregated`` (the
#: best colocated and disaggregated deployments side by side) and ``interval`` (the headline's
#: simulation noise beside the kernel prices' band), added after the baseline was recorded
ADDED = frozenset({"price_sources", "aggregated_vs_disaggregated", "interval"})

QWEN = ["--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--isl", "1024", "--osl", "256",
        "--ttft-slo", "2000", "--tpot-slo", "50", "--requests", "500", "--no-placement"]  # fmt: skip
QUESTIONS: dict[str, list[str]] = {
    "qwen3-30b-h100-jobs1": [*QWEN, "--jobs", "1"],
    "qwen3-30b-h100-jobs2": [*QWEN, "--jobs", "2"],
    "qwen3-30b-h100-rate40": [*QWEN, "--rate", "40"],
    "qwen3-30b-h100-16n": [*QWEN, "--nodes", "16"],
    "deepseek-v2-lite-a100": [
        "--model",
        "deepseek-v2-lite",
        "--cluster",
        "a100-sxm-8",
        "--requests",
        "500",
        "--no-placement",
    ],  # fmt: skip
    "mixtral-8x7b-h200": [
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "h200-sxm-8",
        "--requests",
        "500",
        "--no-placement",
    ],  # fmt: skip
}


def run(args: list[str]) -> dict:
    """The plan JSON of one question, from the ``moeplan`` of this interpreter."""
    cmd = [sys.executable, "-m", "moeplan", "plan", *args, "--json", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ.copy())
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record the outputs as the baseline")
    ap.add_argument("--only", nargs="*", choices=sorted(QUESTIONS), help="a subset of questions")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="folder of the outputs")
    ns = ap.parse_args()
    ns.baseline.mkdir(exist_ok=True)
    bad = 0
    for name in ns.only or QUESTIONS:
        got = run(QUESTIONS[name])
        path = ns.baseline / f"{name}.json"
        if ns.write:
            path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"{name}: written ({leaves(got)} values)")
            continue
        before = json.loads(path.read_text(encoding="utf-8"))
        d = diff(before, {k: v for k, v in got.items() if k not in ADDED or k in before})
        bad += bool(d)
        print(f"{name}: {leaves(got)} values compared, {len(d)} differ")
        for line in d[:20]:
            print("  " + line)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
