"""Fuzz generators for `bench/fuzz_all.py`: numbers, locales, NUL bytes, special files, sizes.

Each generator returns cases ``(what, argv, expected exit, extra environment)`` run through
the real CLI by :func:`fuzz_all.run_case`:

- every numeric flag of every command (found by walking the CLI) given a huge integer
  (40 digits, 10^16), a non-finite float (``inf``, ``-inf``, ``nan``, ``1e999``) or ``1e308``,
  each command otherwise valid, so the flag is what is refused: exit 2;
- the length grammar (``--isl-dist``/``--osl-dist``) and power-law loads
  (``--distribution power_law_<alpha>``) with the same numbers: exit 2;
- commands under ``LC_ALL=C`` / ``PYTHONIOENCODING=ascii`` / ``latin-1`` (their ``--help``
  and a real run): exit 0 (or 2 for a refused input), never an encoding error;
- NUL bytes where a command reads a name or path from a file (a plan's ``model``, a config's
  ``architectures``), and ESC sequences in a config: exit 0 or 2;
- special files (FIFO, folder, ``/dev/null``) at every path moeplan reads — configs, plans,
  traces, SGLang dumps, routing profiles, cost tables, weights, and every file of the
  kernel-variant cache (its folder a FIFO, ``/dev/null`` or a file too): never a hang;
- tampered plan sizes (a world of 10^6, a model config of 2^20 hidden units, huge layouts)
  through ``run --plan`` and ``serve-sim --plan``: exit 2 before anything is allocated.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HUGE = ["1" * 40, "10000000000000000", "inf", "-inf", "nan", "1e999", "1e308"]
M = ["--model", "mixtral-8x7b"]
C = ["--cluster", "h100-sxm-8"]
#: A valid invocation of each command (cheap where possible); the fuzzed flag is appended.
BASE: dict[str, list[str]] = {
    "calibrate": ["calibrate", "--measured", "h100_sxm"],
    "cost": ["cost", "allreduce", "--message-size", "1048576", "--num-gpus", "8"],
    "dep": ["dep", "--model", "deepseek-v2-lite", "--cluster", "findep-a", "--layers", "2"],
    "inspect": ["inspect", "mixtral-8x7b"],
    "pipeline": ["pipeline", *M, *C],
    "place": ["place", "--trace", "{tmp}/valid.npz", "--model", "deepseek-v2-lite", "--ep", "8"],
    "plan": ["plan", *M, *C, "--families", "strategy", "--requests", "20", "--no-placement"],
    "run": ["run", "--plan", "{tmp}/dep_plan.json", "--no-check"],
    "serve-sim": ["serve-sim", *M, *C, "--attn-tp", "8", "--moe-tp", "8", "--requests", "5"],
    "strategy": ["strategy", *M, *C],
    "trace synth": ["trace", "synth", *M, "--requests", "2", "--out", "{tmp}/s.npz"],
    "trace import": [
        "trace",
        "import",
        "{tmp}/stat.pt",
        "--from",
        "sglang-stat",
        "--out",
        "{tmp}/l.json",
    ],  # fmt: skip
    "trace stats": ["trace", "stats", "{tmp}/valid.npz"],
}
Case = tuple[str, list[str], str, dict[str, str]]


def numeric_flags() -> dict[str, list[str]]:
    """{command: its numeric flags}, read from the CLI itself."""
    sys.path.insert(0, str(ROOT / "src"))
    import typer.main

    from moeplan.cli import _bounds, app

    out: dict[str, list[str]] = {}

    def walk(c: Any, prefix: list[str]) -> None:
        for name, sub in getattr(c, "commands", {}).items():
            walk(sub, [*prefix, name])
        flags = [max(p.opts, key=len) for p in getattr(c, "params", [])
                 if getattr(p, "type_descriptor", None) is not None
                 and _bounds._numeric_kind(p.type_descriptor.annotation) is not None]  # fmt: skip
        if prefix and flags:
            out[" ".join(prefix)] = [f for f in flags if f.startswith("--")]

    walk(typer.main.get_command(app), [])
    return out


def _fill(argv: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in argv]


def number_cases(rng: random.Random, tmp: Path, n: int) -> list[Case]:
    """``n`` (command, numeric flag, hostile number) triples, plus the grammars."""
    flags = numeric_flags()
    pairs = [(c, f) for c, fs in sorted(flags.items()) for f in fs if c in BASE]
    out: list[Case] = []
    for i in range(n):
        command, flag = pairs[i % len(pairs)] if i < len(pairs) else rng.choice(pairs)
        value = rng.choice(HUGE)
        argv = _fill(BASE[command], tmp) + [f"{flag}={value}"]
        out.append((f"{command} {flag}={value[:12]}", argv, "2", {}))
    grammar = ["fixed:1e999", "uniform:nan:5", "uniform:1:1e40", "lognormal:512:1e308",
               "lognormal:inf:1", "fixed:-5", "uniform:9:3", "fixed:1.5", "1" * 400]  # fmt: skip
    for g in grammar:
        for flag in ("--isl-dist", "--osl-dist"):
            argv = _fill(BASE["serve-sim"], tmp) + [flag, g]
            out.append((f"serve-sim {flag} {g[:16]}", argv, "2", {}))
    for alpha in ("1e308", "inf", "nan", "-1", "1", "0", "-1e-320", "101"):
        argv = ["cost", "moe", "--num-tokens", "64", "--hidden-size", "2048", "--inter-size",
                "768", "--topk", "8", "--num-experts", "128", "--distribution",
                f"power_law_{alpha}"]  # fmt: skip
        out.append((f"cost moe power_law_{alpha}", argv, "2", {}))
    return out


LOCALES = [
    {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"},
    {"PYTHONIOENCODING": "ascii"},
    {"PYTHONIOENCODING": "latin-1", "LC_ALL": "C"},
]


def locale_cases(tmp: Path) -> list[Case]:
    out: list[Case] = []
    for i, (command, argv) in enumerate(sorted(BASE.items())):
        env = LOCALES[i % len(LOCALES)]
        tag = ",".join(f"{k}={v}" for k, v in env.items())
        out.append((f"{command} --help [{tag}]", [*command.split(), "--help"], "0", env))
        out.append((f"{command} [{tag}]", _fill(argv, tmp), "any", env))
    return out


def _config(tmp: Path, name: str, **changes: Any) -> Path:
    sys.path.insert(0, str(ROOT / "src"))
    from moeplan.specs.presets import model_config

    folder = tmp / name
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({**model_config("mixtral-8x7b"), **changes}))
    return path


def nul_cases(tmp: Path) -> list[Case]:
    out: list[Case] = []
    for what, arch in (
        ("NUL", "Mixtral\u0000ForCausalLM"),
        ("ESC", "Mix\u001b]0;T\u0007\u001b[2J"),
    ):
        p = _config(tmp, f"cfg_{what}", architectures=[arch])
        out.append((f"config architectures with {what}", ["inspect", str(p)], "any", {}))
        out.append((f"plan with {what} in architectures", ["strategy", "--model", str(p), *C],
                    "any", {}))  # fmt: skip
    for model in ("mix\u0000tral-8x7b", str(tmp) + "/a\u0000/config.json"):
        plan = {"schema": "moeplan.plan/1", "family": "strategy", "model": model,
                "layout": {"world_size": 2, "attn": {"tp": 1, "dp": 2},
                           "moe": {"tp": 1, "ep": 2}, "pp": 1}}  # fmt: skip
        p = tmp / f"plan_nul{len(out)}.json"
        p.write_text(json.dumps(plan))
        out.append(("plan model with NUL (run)", ["run", "--plan", str(p)], "2", {}))
        out.append(("plan model with NUL (serve-sim)", ["serve-sim", "--plan", str(p)], "2", {}))
    return out


def _specials(tmp: Path, name: str) -> dict[str, Path]:
    """A FIFO, a folder and a symlink to /dev/null, each named ``name``, in their own folders."""
    out = {}
    for kind in ("fifo", "dir", "devnull"):
        folder = tmp / f"special_{kind}"
        folder.mkdir(exist_ok=True)
        p = folder / name
        if not os.path.lexists(p):
            if kind == "fifo":
                os.mkfifo(p)
            elif kind == "dir":
                p.mkdir()
            else:
                p.symlink_to("/dev/null")
        out[kind] = p
    return out


def special_file_cases(tmp: Path, cache_names: list[str]) -> list[Case]:
    """Special files wherever a command reads one, and in the kernel-variant cache."""
    readers = {
        "config.json": lambda p: ["inspect", str(p)],
        "plan.json": lambda p: ["run", "--plan", str(p)],
        "trace.npz": lambda p: ["trace", "stats", str(p)],
        "trace.parquet": lambda p: ["place", "--trace", str(p), *M, "--ep", "2"],
        "dump.pt": lambda p: [
            "trace",
            "import",
            str(p),
            "--from",
            "sglang-stat",
            "--out",
            str(tmp / "x.json"),
        ],  # fmt: skip
        "profile.json": lambda p: ["pipeline", *M, *C, "--routing-profile", str(p)],
        "table.parquet": lambda p: ["cost", "allreduce", "--table", str(p)],
        "counts.json": lambda p: [
            "cost",
            "moe",
            "--num-tokens",
            "64",
            "--hidden-size",
            "2048",
            "--inter-size",
            "768",
            "--topk",
            "8",
            "--num-experts",
            "8",
            "--expert-counts",
            str(p),
        ],  # fmt: skip
        "plan2.json": lambda p: ["serve-sim", "--plan", str(p)],
        "w.safetensors": lambda p: [
            "run",
            "--plan",
            str(tmp / "dep_plan.json"),
            "--weights",
            str(p),
        ],  # fmt: skip
    }
    out: list[Case] = []
    for name, argv in readers.items():
        for kind, p in _specials(tmp, name).items():
            out.append((f"{kind} as {name}", argv(p), "2", {}))
    cost = ["cost", "allreduce", "--message-size", "1048576", "--num-gpus", "8"]
    for kind in ("fifo", "dir", "devnull"):  # every cached variant's name taken by one
        root = tmp / f"cache_{kind}" / "kerneldb"
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        for name in cache_names:
            p = root / name
            if kind == "fifo":
                os.mkfifo(p, 0o600)
            elif kind == "dir":
                p.mkdir()
            else:
                p.symlink_to("/dev/null")
        env = {"MOEPLAN_CACHE_DIR": str(root.parent)}
        out.append((f"cache files are {kind}s", cost, "0", env))
    for kind, p in _specials(tmp, "cache").items():  # the cache folder itself
        out.append((f"cache folder is a {kind}", cost, "0", {"MOEPLAN_CACHE_DIR": str(p)}))
    return out


def size_cases(tmp: Path) -> list[Case]:
    """Tampered plan sizes: refused before anything is spawned or allocated."""
    big = _config(tmp, "cfg_big", hidden_size=2**20, num_attention_heads=1024,
                  num_key_value_heads=1024)  # fmt: skip
    out: list[Case] = []
    layouts = {
        "world 10^6": {"world_size": 10**6, "attn": {"tp": 1, "dp": 10**6},
                       "moe": {"tp": 1, "ep": 10**6}, "pp": 1},
        "tp 2^40": {"world_size": 2**40, "attn": {"tp": 2**40, "dp": 1},
                    "moe": {"tp": 2**40, "ep": 1}, "pp": 1},
        "pp 10^9": {"world_size": 10**9, "attn": {"tp": 1, "dp": 1}, "moe": {"tp": 1, "ep": 1},
                    "pp": 10**9},
    }  # fmt: skip
    for what, layout in layouts.items():
        p = tmp / f"plan_{what.replace(' ', '_').replace('^', '')}.json"
        p.write_text(json.dumps({"schema": "moeplan.plan/1", "family": "strategy",
                                 "model": "mixtral-8x7b", "cluster": "h100-sxm-8",
                                 "layout": layout}))  # fmt: skip
        out.append((f"run plan {what}", ["run", "--plan", str(p)], "2", {}))
        out.append((f"serve-sim plan {what}", ["serve-sim", "--plan", str(p)], "2", {}))
    p = tmp / "plan_big_model.json"
    p.write_text(json.dumps({"schema": "moeplan.plan/1", "family": "strategy", "model": str(big),
                             "layout": {"world_size": 2, "attn": {"tp": 1, "dp": 2},
                                        "moe": {"tp": 1, "ep": 2}, "pp": 1}}))  # fmt: skip
    out.append(("run plan 2^20 hidden (full)", ["run", "--plan", str(p), "--scale", "full"],
                "2", {}))  # fmt: skip
    return out


def prepare(tmp: Path) -> list[str]:
    """Shared inputs (a valid trace, a stat dump, a dep plan); the kernel cache's file names
    for ``cost allreduce`` (built once here, in a cache of its own)."""
    import subprocess

    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from fuzz_all import _trace_cols

    np.savez(tmp / "valid.npz", **_trace_cols(random.Random(1)))
    import torch

    torch.save({"logical_count": torch.ones((2, 3, 8), dtype=torch.int64)}, tmp / "stat.pt")
    (tmp / "dep_plan.json").write_text(json.dumps({
        "schema": "moeplan.plan/1", "family": "dep", "layout": {"world_size": 2, "ag": 1, "eg": 1},
        "details": {"ma": 2, "r1": 2, "r2": 2, "order": "ASAS"}}))  # fmt: skip
    cache = tmp / "cache_names"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MOEPLAN_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-m", "moeplan", "cost", "allreduce", "--message-size",
                    "1048576", "--num-gpus", "8"], env=env, capture_output=True, timeout=300)  # fmt: skip
    return sorted(p.name for p in (cache / "kerneldb").glob("*") if not p.name.startswith("."))


def kind_cases(rng: random.Random, tmp: Path, n: int) -> list[Case]:
    """Every generator of this module (``n``: how many numeric-flag cases)."""
    names = prepare(tmp)
    return (
        number_cases(rng, tmp, n)
        + locale_cases(tmp)
        + nul_cases(tmp)
        + special_file_cases(tmp, names)
        + size_cases(tmp)
    )
