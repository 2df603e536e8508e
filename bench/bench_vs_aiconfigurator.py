"""moeplan plan vs NVIDIA's aiconfigurator 0.12.0 on the same question, timed in one run.

Question (DESIGN.md's first user question, and the one aiconfigurator's quick start asks):
Qwen3-30B-A3B on 8 x H100 SXM, SGLang, ISL 1024 / OSL 256, TTFT <= 2 s, TPOT <= 50 ms.

aiconfigurator is *not* a dependency: this script creates a scratch virtual environment
(``--venv``, default a temporary folder), installs ``aiconfigurator==0.12.0`` into it with
pip, and runs its ``cli default`` mode; then it runs ``moeplan plan`` on the same question in
the current interpreter. It prints one JSON object: wall-clock and CPU seconds of each, the
ratio, and both winners (aiconfigurator's table is kept as text: its format is its own).
Both run with Python's bytecode cache on (its default; pip compiled aiconfigurator's at
install, moeplan's is written by one import first: ``bench_plan_speed.warm_bytecode``).
Run: ``python bench/bench_vs_aiconfigurator.py [--venv DIR] [--requests N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_plan_speed import python_env, warm_bytecode

AIC = "aiconfigurator==0.12.0"
QUESTION = {
    "model": "qwen3-30b-a3b",
    "hf_model": "Qwen/Qwen3-30B-A3B",
    "cluster": "h100-sxm-8",
    "aic_system": "h100_sxm",
    "gpus": 8,
    "isl": 1024,
    "osl": 256,
    "ttft_ms": 2000.0,
    "tpot_ms": 50.0,
}


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    cpu0, t0 = _child_cpu(), time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return {
        "cmd": " ".join(cmd),
        "rc": p.returncode,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": _child_cpu() - cpu0,
        "stdout": p.stdout,
        "stdout_tail": p.stdout[-6000:],
        "stderr_tail": p.stderr[-2000:],
    }


def install(venv: Path) -> dict:
    """A scratch venv with aiconfigurator 0.12.0 (pip from the package index)."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    t0 = time.perf_counter()
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", AIC], capture_output=True, text=True)
    return {"rc": p.returncode, "install_s": time.perf_counter() - t0, "err": p.stderr[-2000:]}


def run_aiconfigurator(venv: Path, timeout: float) -> dict:
    q = QUESTION
    exe = str(venv / "bin" / "aiconfigurator")
    cmd = [
        exe,
        "cli",
        "default",
        "--model",
        q["hf_model"],
        "--total-gpus",
        str(q["gpus"]),
        "--system",
        q["aic_system"],
        "--backend",
        "sglang",
        "--isl",
        str(q["isl"]),
        "--osl",
        str(q["osl"]),
        "--ttft",
        str(q["ttft_ms"]),
        "--tpot",
        str(q["tpot_ms"]),
    ]
    return _timed(cmd, timeout, env=python_env())


def run_moeplan(requests: int, timeout: float, jobs: int) -> dict:
    q = QUESTION
    out = tempfile.mkdtemp(prefix="moeplan-bench-")
    cmd = [
        sys.executable,
        "-m",
        "moeplan",
        "plan",
        "--model",
        q["model"],
        "--cluster",
        q["cluster"],
        "--isl",
        str(q["isl"]),
        "--osl",
        str(q["osl"]),
        "--ttft-slo",
        str(q["ttft_ms"]),
        "--tpot-slo",
        str(q["tpot_ms"]),
        "--requests",
        str(requests),
        "--no-placement",
        "--json",
        "--out",
        out,
        "--jobs",
        str(jobs),
    ]
    r = _timed(cmd, timeout, env=python_env())
    r.pop("stdout_tail")
    try:
        d = json.loads(r.pop("stdout") if r["rc"] == 0 else "{}")
    except json.JSONDecodeError:
        d = {}
    if d:
        r["winner"] = {k: d["winner"][k] for k in ("family", "layout", "gpus")}
        r["winner_output_tokens_per_s_per_gpu"] = d["winner"]["metrics"].get(
            "output_tokens_per_s_per_gpu"
        )
        r["search"] = d.get("search")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=None, help="scratch venv folder (default: a temp dir)")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="moeplan's worker processes (default: the CPUs; --jobs 1 runs too)",
    )
    args = ap.parse_args()
    venv = Path(args.venv or tempfile.mkdtemp(prefix="aic-venv-"))
    res: dict = {"question": QUESTION, "aiconfigurator": AIC}
    res["install"] = install(venv)
    if res["install"]["rc"] == 0:
        res["aiconfigurator_run"] = run_aiconfigurator(venv, args.timeout)
        res["aiconfigurator_run"].pop("stdout")
    a = res.get("aiconfigurator_run")
    warm_bytecode()
    for jobs, key in ((1, "moeplan_run_jobs1"), (args.jobs, "moeplan_run")):
        res[key] = m = run_moeplan(args.requests, args.timeout, jobs)
        if a and a["rc"] == 0 and m["rc"] == 0:
            res[key]["speedup_wall"] = a["wall_s"] / m["wall_s"]
            res[key]["speedup_cpu"] = a["cpu_s"] / m["cpu_s"] if m["cpu_s"] else None
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
