"""``moeplan bench --json`` end to end: wall and CPU seconds of a 1,000-prompt burst on one node,
process start included (the target: 2 s wall on 2 cores).

The cases are the lab's common shapes on one 8-GPU node: gpt-oss-120b on H100 with vLLM TP2
(``gpt``), 1,000 prompts of 1,000 tokens asking 1,000 (``long``) and of ShareGPT's mean
lengths (214 / 200, ``chat``); Qwen3-235B-A22B-FP8 TP8 EP8 with SGLang, 1,000 prompts of
2,000 / 100 (``qwen``). Each run is a fresh process (``python -m moeplan bench``) with
Python's bytecode cache warm; the kernel-table cache (``MOEPLAN_CACHE_DIR``) is as the
environment has it. Prints one JSON line per run and the median per case.

Run: ``python bench/bench_bench_speed.py [--cases chat long qwen] [--repeat K]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CASES = {
    "chat": ["--launch", "vllm serve openai/gpt-oss-120b -tp 2", "--cluster", "h100-sxm-8",
             "--random-input-len", "214", "--random-output-len", "200"],
    "long": ["--launch", "vllm serve openai/gpt-oss-120b -tp 2", "--cluster", "h100-sxm-8",
             "--random-input-len", "1000", "--random-output-len", "1000"],
    "qwen": ["--launch", "python3 -m sglang.launch_server --model "
             "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 --tp 8 --ep 8", "--cluster", "h100-sxm-8",
             "--random-input-len", "2000", "--random-output-len", "100"],
}  # fmt: skip


def python_env() -> dict[str, str]:
    """This process's environment with Python's bytecode cache on (its default)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def one(case: str) -> dict[str, float | str]:
    """One run of ``case``: wall and CPU seconds (children's user + system)."""
    args = [sys.executable, "-m", "moeplan", "bench", *CASES[case], "--num-prompts", "1000",
            "--request-rate", "inf", "--json"]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=python_env(), check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{case}: exit {out.returncode}: {out.stderr.strip()}")
    ans = json.loads(out.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"case": case, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "duration_s": ans["duration"], "completed": ans["completed"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    subprocess.run([sys.executable, "-c", "import moeplan.cli.bench"], check=True,
                   env=python_env())  # fmt: skip
    walls: dict[str, list[float]] = {c: [] for c in a.cases}
    for _ in range(a.repeat):
        for c in a.cases:
            r = one(c)
            walls[c].append(float(r["wall_s"]))
            print(json.dumps(r), flush=True)
    for c, w in walls.items():
        print(json.dumps({"case": c, "median_wall_s": statistics.median(w), "target_s": 2.0}))


if __name__ == "__main__":
    main()
