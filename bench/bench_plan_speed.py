"""``moeplan plan`` end to end: wall and CPU seconds, one after another, serial and with workers.

The questions are the issue's: Qwen3-30B-A3B, ISL 1024 / OSL 256, TTFT 2 s / TPOT 50 ms p90,
500 measured requests, no expert placement, on one 8-GPU H100 node (``one``) and on 16 of
them (``16n``). Each case runs ``--jobs 1`` (every simulation in the planning process, the
reference) and ``--jobs N`` (N = the CPUs this process may use) in the same run, and checks
that both print the same plan (the JSON less timings, temporary paths and kernel-lookup
counts: ``tests/test_fanout.py``). CPU seconds are the process's and its workers' user +
system time. Prints one JSON line per run (with the plan's own ``timings_s``) and a summary
line per case (with ``--repeat``, the runs alternate and the summary gives each ``--jobs``'s
median, lowest and highest wall time: this kind of shared machine varies by 10 % and more from
run to run), and the machine's speed in the same window: the CPU seconds of a fixed loop
(:func:`machine_speed_s`).

Python's bytecode cache is on, as it is by default: the runs go without
``PYTHONDONTWRITEBYTECODE`` (set on some sandboxes; with it, every run compiles moeplan's
modules again, 0.26 s here) after one import that writes the cache (:func:`warm_bytecode`).

The rack cases are the Blackwell issue's questions, DeepSeek-V3 with ``plan``'s default
question (ISL 2048 / OSL 256, TTFT 2 s / TPOT 100 ms p90, 1,000 measured requests) on one
GB200 NVL72 rack (``gb200``) and on nine DGX B200 nodes (``b200x9``), placement and curves
included as the command runs them.

``--ref COMMIT``: each run of this tree alternates with a run of ``COMMIT``'s ``src`` (taken
with ``git archive`` into a temporary folder), both at ``--jobs`` N, instead of ``--jobs 1``
against ``--jobs N``; the summary gives both medians of wall and CPU seconds and checks that
both print the same plan.

Run: ``python bench/bench_plan_speed.py [--cases one 16n gb200 b200x9] [--jobs N]
[--repeat K] [--ref COMMIT]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

QUESTION = ["--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--isl", "1024", "--osl",
            "256", "--ttft-slo", "2000", "--tpot-slo", "50", "--requests", "500",
            "--no-placement", "--json", "--quiet"]  # fmt: skip
RACK = ["--model", "deepseek-v3", "--json", "--quiet"]  # plan's default question
CASES = {
    "one": QUESTION,
    "16n": [*QUESTION, "--nodes", "16"],
    "gb200": [*RACK, "--cluster", "gb200-nvl72"],
    "b200x9": [*RACK, "--cluster", "b200-sxm-8", "--nodes", "9"],
}
DEFAULT_CASES = ["one", "16n"]
VARIES = {"timings_s", "elapsed_s", "pricing", "seconds", "search_ms", "launch", "artifacts",
          "solve_s"}  # fmt: skip


def python_env(src: str | None = None) -> dict[str, str]:
    """This process's environment with Python's bytecode cache on (its default); ``src``: a
    source folder put first on ``PYTHONPATH`` (another commit's ``moeplan``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def warm_bytecode(src: str | None = None) -> None:
    """Import the CLI once with the bytecode cache on, so the timed runs read it."""
    subprocess.run([sys.executable, "-c", "import moeplan.cli.plan"], check=True,
                   env=python_env(src))  # fmt: skip


def checkout_src(commit: str, into: str) -> str:
    """``commit``'s ``src`` folder written under ``into`` (``git archive``); its path."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, text=True,
                         capture_output=True, cwd=os.path.dirname(os.path.abspath(__file__)))  # fmt: skip
    tar = subprocess.run(["git", "archive", commit, "src"], check=True, capture_output=True,
                         cwd=top.stdout.strip())  # fmt: skip
    subprocess.run(["tar", "-x", "-C", into], input=tar.stdout, check=True)
    return os.path.join(into, "src")


def machine_speed_s() -> float:
    """CPU seconds of a fixed pure-Python loop (20 million additions), the machine's speed
    in the same window: this shared box's runs at the same load differ by up to 1.4x
    between windows (1.84-2.44 s for this loop), so a wall time is read beside it."""
    t0, s = time.process_time(), 0
    for i in range(20_000_000):
        s += i
    return time.process_time() - t0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _plan(args: list[str], jobs: int, src: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "moeplan", "plan", *args, "--jobs", str(jobs), "--out", out]
        cpu0, t0 = _cpu(), time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                           env=python_env(src))  # fmt: skip
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    if p.returncode != 0:
        raise SystemExit(f"plan failed ({p.returncode}): {p.stderr[-2000:]}")
    return {"jobs": jobs, "wall_s": wall, "cpu_s": cpu, "plan": json.loads(p.stdout),
            "load_average": os.getloadavg()}  # fmt: skip


def _same(x: object, y: object) -> bool:
    if isinstance(x, dict) and isinstance(y, dict):
        keys = (set(x) | set(y)) - VARIES
        return all(_same(x.get(k), y.get(k)) for k in keys)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    return x == y


def run() -> list[dict]:
    """The ``bench/run_all.py`` row: one node, one run with workers against one without."""
    warm_bytecode()
    speed = machine_speed_s()
    one, many = _plan(CASES["one"], 1), _plan(CASES["one"], len(os.sched_getaffinity(0)))
    return [{
        "name": "moeplan plan, one 8-GPU node (Qwen3-30B-A3B, 1024/256, 500 requests)",
        "value": many["wall_s"], "unit": "s wall", "reference": one["wall_s"],
        "ratio": one["wall_s"] / many["wall_s"], "target": "<= 10 s",
        "note": f"reference = --jobs 1 in the same run; same plan: "
                f"{_same(one['plan'], many['plan'])}; CPU {many['cpu_s']:.1f} s; machine "
                f"speed loop {speed:.2f} s (machine_speed_s)",
    }]  # fmt: skip


def _summary(r: dict) -> dict:
    s = r["plan"]["search"]["winner_capacity"]
    return {"wall_s": round(r["wall_s"], 2), "cpu_s": round(r["cpu_s"], 2),
            "load_average": [round(x, 2) for x in r["load_average"]], "winner": s["layout"],
            "out_tok_s_per_gpu": s["output_tokens_per_s_per_gpu"],
            "ci95_half_width_rel": s["ci95_half_width_rel"]}  # fmt: skip


def _median_min_max(xs: list[float]) -> list[float]:
    xs = sorted(xs)
    return [round(statistics.median(xs), 2), round(xs[0], 2), round(xs[-1], 2)]


def against(commit: str, cases: list[str], jobs: int, repeat: int) -> None:
    """Each case's runs of this tree alternating with ``commit``'s, at ``jobs`` workers."""
    with tempfile.TemporaryDirectory() as tmp:
        ref = checkout_src(commit, tmp)
        tree = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        warm_bytecode(ref)
        warm_bytecode(tree)
        speed = [machine_speed_s()]
        for case in cases:
            runs: dict[str, list[dict]] = {"ref": [], "tree": []}
            for _ in range(repeat):
                for name, src in (("ref", ref), ("tree", tree)):
                    runs[name].append(_plan(CASES[case], jobs, src))
                    print(json.dumps({"case": case, "code": name, "commit": commit,
                                      "jobs": jobs, **_summary(runs[name][-1])}), flush=True)  # fmt: skip
            speed.append(machine_speed_s())
            first = runs["ref"][0]["plan"]
            print(json.dumps({
                "case": case, "jobs": jobs, "ref": commit,
                "same_plan": all(_same(first, r["plan"]) for rs in runs.values() for r in rs),
                **{f"{k}_wall_s_median_min_max": _median_min_max([r["wall_s"] for r in rs])
                   for k, rs in runs.items()},
                **{f"{k}_cpu_s_median_min_max": _median_min_max([r["cpu_s"] for r in rs])
                   for k, rs in runs.items()},
                "load_average": os.getloadavg(),
                "machine_speed_s_before_after": [round(x, 2) for x in speed[-2:]],
            }), flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES, choices=list(CASES))
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeat", type=int, default=1, help="runs of each --jobs, alternating")
    ap.add_argument("--ref", help="a commit whose src runs alternate with this tree's")
    a = ap.parse_args()
    if a.ref:
        against(a.ref, a.cases, a.jobs, a.repeat)
        return
    warm_bytecode()
    speed = [machine_speed_s()]
    for case in a.cases:
        runs = []
        for _ in range(a.repeat):
            runs += [_plan(CASES[case], 1), _plan(CASES[case], a.jobs)]
        for r in runs:
            s = r["plan"]["search"]["winner_capacity"]
            print(json.dumps({"case": case, "jobs": r["jobs"], "wall_s": round(r["wall_s"], 2),
                              "cpu_s": round(r["cpu_s"], 2), "winner": s["layout"],
                              "out_tok_s_per_gpu": s["output_tokens_per_s_per_gpu"],
                              "ci95_half_width_rel": s["ci95_half_width_rel"],
                              "timings_s": r["plan"].get("timings_s")}))  # fmt: skip
        walls = {j: sorted(r["wall_s"] for r in runs if r["jobs"] == j) for j in (1, a.jobs)}
        speed.append(machine_speed_s())
        print(json.dumps({
            "case": case, "same_plan": all(_same(runs[0]["plan"], r["plan"]) for r in runs),
            "wall_s_median_min_max": {
                f"jobs{j}": [round(statistics.median(w), 2), round(w[0], 2), round(w[-1], 2)]
                for j, w in walls.items()
            },
            "wall_ratio_serial_over_workers": statistics.median(walls[1])
            / statistics.median(walls[a.jobs]),
            "load_average": os.getloadavg(),
            "machine_speed_s_before_after": [round(x, 2) for x in speed[-2:]],
        }))  # fmt: skip


if __name__ == "__main__":
    main()
