"""``moeplan bench --json`` end to end: wall and CPU seconds of a 1,000-prompt burst on one node,
process start included (the target: 2 s wall on 2 cores).

The cases are the lab's common shapes on one 8-GPU node: gpt-oss-120b on H100 with vLLM TP2,
1,000 prompts of 1,000 tokens asking 1,000 (``long``) and of ShareGPT's mean
lengths (214 / 200, ``chat``); Qwen3-235B-A22B-FP8 TP8 EP8 with SGLang, 1,000 prompts of
2,000 / 100 (``qwen``). Each run is a fresh process (``python -m moeplan bench``) with
Python's bytecode cache warm (:func:`warm_bytecode`).

The kernel-variant cache (``MOEPLAN_CACHE_DIR``) is a new empty folder per source tree: each
tree's first run of a case builds the variants it needs and keeps the prices it asked
(a user's first run: ``cold``), the timed runs after it read both (a user's second run of
the same command: ``warm``, what the target means). With
``--against SRC`` (the ``src`` folder of another checkout, e.g. ``git worktree add`` of the
parent commit) the runs alternate reference, this tree, reference, this tree (A, B, A, B), so
both see the same machine: this box is shared, its load moves wall times by several times,
so each summary line gives the ratio of the medians (reference / this tree) beside the
figures, the load average and the machine's speed in the same window
(:func:`machine_speed_s`), and whether both trees printed the same metrics.

Prints one JSON line per run and a summary line per case and tree.

Run: ``python bench/bench_bench_speed.py [--cases chat long qwen] [--repeat K] [--against SRC]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "chat": ["--launch", "vllm serve openai/gpt-oss-120b -tp 2", "--cluster", "h100-sxm-8",
             "--random-input-len", "214", "--random-output-len", "200"],
    "long": ["--launch", "vllm serve openai/gpt-oss-120b -tp 2", "--cluster", "h100-sxm-8",
             "--random-input-len", "1000", "--random-output-len", "1000"],
    "qwen": ["--launch", "python3 -m sglang.launch_server --model "
             "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 --tp 8 --ep 8", "--cluster", "h100-sxm-8",
             "--random-input-len", "2000", "--random-output-len", "100"],
}  # fmt: skip
THIS = str(Path(__file__).resolve().parent.parent / "src")


def python_env(src: str, cache: str) -> dict[str, str]:
    """This process's environment with Python's bytecode cache on (its default), ``src``
    first on the import path and ``cache`` as the kernel-variant cache."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": src, "MOEPLAN_CACHE_DIR": cache}


def warm_bytecode(src: str) -> None:
    """Import the CLI once with the bytecode cache on, so the timed runs read it."""
    env = python_env(src, tempfile.gettempdir())
    subprocess.run([sys.executable, "-c", "import moeplan.cli.bench"], check=True, env=env)


def machine_speed_s() -> float:
    """CPU seconds of a fixed pure-Python loop (20 million additions): the machine's speed
    in the same window (``bench_plan_speed.machine_speed_s``)."""
    t0, s = time.process_time(), 0
    for i in range(20_000_000):
        s += i
    return time.process_time() - t0


def one(case: str, src: str, cache: str) -> dict:
    """One run of ``case`` with the moeplan of ``src``: wall and CPU seconds (children's user
    + system), the load average at its end and the answer."""
    args = [sys.executable, "-m", "moeplan", "bench", *CASES[case], "--num-prompts", "1000",
            "--request-rate", "inf", "--json"]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=python_env(src, cache),
                         check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{case} ({src}): exit {out.returncode}: {out.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "load": os.getloadavg()[0],
        "answer": json.loads(out.stdout),
    }


def same_metrics(a: dict, b: dict) -> bool:
    """The benchmark's own keys (all but ``moeplan``'s provenance) equal, floats to 1e-9."""
    keys = (set(a) | set(b)) - {"moeplan"}
    for k in keys:
        x, y = a.get(k), b.get(k)
        if isinstance(x, float) and isinstance(y, float):
            if not math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0):
                return False
        elif x != y:
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--repeat", type=int, default=1, help="timed (warm) runs per case and tree")
    ap.add_argument("--against", help="the src folder of a reference checkout (A/B runs)")
    a = ap.parse_args()
    trees = {"this": THIS} if a.against is None else {"reference": a.against, "this": THIS}
    for src in trees.values():
        warm_bytecode(src)
    speed = machine_speed_s()
    with tempfile.TemporaryDirectory() as tmp:
        caches = {t: str(Path(tmp) / t) for t in trees}
        for case in a.cases:
            runs: dict[str, list[dict]] = {t: [] for t in trees}
            for rep in range(a.repeat + 1):  # the first of each tree is its cold run
                for t, src in trees.items():
                    r = one(case, src, caches[t])
                    r["cache"] = "cold" if rep == 0 else "warm"
                    runs[t].append(r)
                    print(json.dumps({"case": case, "tree": t, "cache": r["cache"],
                                      "wall_s": round(r["wall_s"], 3), "cpu_s": round(r["cpu_s"], 3),
                                      "load": round(r["load"], 2),
                                      "duration_s": r["answer"]["duration"]}), flush=True)  # fmt: skip
            med = {}
            for t, rs in runs.items():
                warm = [r for r in rs if r["cache"] == "warm"]
                med[t] = {
                    "case": case, "tree": t, "cold_wall_s": round(rs[0]["wall_s"], 3),
                    "cold_cpu_s": round(rs[0]["cpu_s"], 3),
                    "median_wall_s": round(statistics.median(r["wall_s"] for r in warm), 3),
                    "median_cpu_s": round(statistics.median(r["cpu_s"] for r in warm), 3),
                    "load": round(statistics.median(r["load"] for r in warm), 2), "target_s": 2.0,
                }  # fmt: skip
                print(json.dumps(med[t]), flush=True)
            if a.against is not None:
                ref, new = med["reference"], med["this"]
                same = all(same_metrics(x["answer"], y["answer"])
                           for x, y in zip(runs["reference"], runs["this"], strict=True))  # fmt: skip
                print(json.dumps({
                    "case": case,
                    "wall_ratio": round(ref["median_wall_s"] / new["median_wall_s"], 2),
                    "cpu_ratio": round(ref["median_cpu_s"] / new["median_cpu_s"], 2),
                    "same_metrics": same, "machine_speed_s": round(speed, 2),
                    "note": "ratio = reference / this tree, warm-cache medians of alternating runs",
                }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
