"""Every sample config under tests/data/configs: ``inspect`` time and a short ``plan`` run.

``python bench/bench_configs.py inspect``: wall time of ``moeplan inspect --json`` on each
config in-process, best of 3 — the command's own work (read the file, quantization patterns,
per-layer records, the inspect JSON; :func:`moeplan.cli.models.inspect` called directly) and,
beside it, through the whole CLI parser (typer builds every command's signature on each call,
~0.4 s here, the same for every config). The target is <= 1 s per config. ``python bench/bench_configs.py plan``: ``moeplan plan``
(colocated family, 50 requests, no placement) of each sample on a preset cluster whose memory
holds its stored weights (:data:`CLUSTER`), printing the exit code, wall time and the winner.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from moeplan.cli import main
from moeplan.cli.models import inspect

ROOT = Path(__file__).parents[1] / "tests" / "data" / "configs"
#: the smallest shipped 8-GPU preset whose memory holds the checkpoint as stored
BIG = {
    "Qwen--Qwen3-Coder-480B-A35B-Instruct": "b200-sxm-8",  # 960 GB bf16
    "MiniMaxAI--MiniMax-M3": "h200-sxm-8",  # 852 GB bf16
    "deepseek-ai--DeepSeek-V3.2": "h200-sxm-8",  # 674 GB fp8
    "zai-org--GLM-5-FP8": "h200-sxm-8",  # 746 GB fp8
    "moonshotai--Kimi-K2.5": "h200-sxm-8",  # 595 GB int4 experts
}
CLUSTER = {p.name: BIG.get(p.name, "h100-sxm-8") for p in ROOT.iterdir() if p.is_dir()}


def _best(fn) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            fn()
        best = min(best, time.perf_counter() - t)
    return best


def big_modelopt(folder: Path) -> Path:
    """DeepSeek-V3.1-NVFP4 with every routed expert's projections listed by name in its
    ``hf_quant_config.json`` ``exclude_modules`` (both the ``model.layers`` and the VLM
    ``model.language_model.layers`` spelling): a 5.7 MB ModelOpt config (the same file as
    ``tests/test_specs_configs.py`` builds)."""
    src = ROOT / "nvidia--DeepSeek-V3.1-NVFP4"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg))
    q = json.loads((src / "hf_quant_config.json").read_text())
    names = q["quantization"]["exclude_modules"]
    for prefix in ("model.layers", "model.language_model.layers"):
        for layer in range(cfg["first_k_dense_replace"], cfg["num_hidden_layers"]):
            for e in range(cfg["n_routed_experts"]):
                names += [f"{prefix}.{layer}.mlp.experts.{e}.{p}"
                          for p in ("gate_proj", "up_proj", "down_proj")]  # fmt: skip
    (folder / "hf_quant_config.json").write_text(json.dumps(q, indent=4))
    return folder / "config.json"


def bench_inspect(record: bool = False) -> None:
    """Print each config's ``inspect`` times; ``record``: also write them, with the command,
    date and load average, to docs/benchmarks/data/bench_configs.json (the record
    docs/benchmarks/kerneldb-layers.md's figures are checked against)."""
    paths = {folder: str(ROOT / folder / "config.json") for folder in sorted(CLUSTER)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        big = big_modelopt(Path(tmp) / "big")
        mb = (big.parent / "hf_quant_config.json").stat().st_size / 1e6
        paths[f"DeepSeek-V3.1-NVFP4 + {mb:.1f} MB exclude list"] = str(big)
        for label, path in paths.items():
            own = _best(lambda p=path: inspect(p, json_out=True))
            cli = _best(lambda p=path: main(["inspect", p, "--json"]))
            print(
                f"{label:48s} inspect {own:6.3f} s (command's work), {cli:6.3f} s (through "
                "the CLI parser); best of 3, in-process"
            )
            rows.append({"config": label, "command_s": own, "cli_s": cli})
    if record:
        doc = {
            "command": "python bench/bench_configs.py inspect --record",
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "kind": "bench",
            "load_average": round(os.getloadavg()[0], 2),
            "rows": rows,
        }
        out = Path(__file__).parents[1] / "docs" / "benchmarks" / "data" / "bench_configs.json"
        out.write_text(json.dumps(doc, indent=1) + "\n")


def bench_plan(only: list[str]) -> None:
    for folder in sorted(CLUSTER):
        if only and not any(o in folder for o in only):
            continue
        cmd = [sys.executable, "-m", "moeplan", "plan", "--model",
               str(ROOT / folder / "config.json"), "--cluster", CLUSTER[folder],
               "--families", "strategy", "--requests", "50", "--no-placement", "--quiet",
               "--json", "--out", f"/tmp/moeplan-bench-configs/{folder}"]  # fmt: skip
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
        wall = time.perf_counter() - t
        if r.returncode == 0:
            out = json.loads(r.stdout)
            win = out.get("winner") or out.get("ranking", [{}])[0]
            label = json.dumps(win)[:100]
        else:
            label = r.stderr.strip().splitlines()[-1][:160] if r.stderr.strip() else ""
        print(
            f"{folder:48s} {CLUSTER[folder]:11s} rc={r.returncode} {wall:6.1f} s  {label}",
            flush=True,
        )


if __name__ == "__main__":  # plan [substring ...]: only the folders naming one of them
    if len(sys.argv) > 1 and sys.argv[1] == "plan":
        bench_plan(sys.argv[2:])
    else:
        bench_inspect(record="--record" in sys.argv)
