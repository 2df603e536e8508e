"""Fuzz generators for `bench/fuzz_all.py`: the kernel-variant cache's values, plan files and
ModelOpt quantisation files, each with the contract its reader promises.

Each generator returns cases ``(what, argv, expected, extra environment)`` run through the
real CLI by :func:`fuzz_all.run_case`; ``expected`` is an exit code (``"0"``, ``"2"``,
``"any"``) or ``"same:PATH"`` (exit 0 and the very answer saved in PATH). Every case also
keeps the general contract: no traceback, one stderr line when refused, valid JSON on
stdout under ``--json``.

- cache values: each file of a built kernel-variant cache rewritten, well packed, to hold the
  wrong thing (an int, an empty list, a string, a dict, another variant's file, a variant
  missing an attribute or holding one of the wrong type, NaN or infinite numbers; the counts
  file negative, boolean or a list): a miss, rebuilt, the same answer as the clean cache
  (``same:``);
- plan files: a real ``pipeline``, ``strategy`` and served ``plan`` plan.json, each with one
  field tampered — the reader's known-bad values (a module ``layer`` of -1 or 10^12, a
  ``world_size`` of 64 on 8 GPUs, ``knobs.tbo = []``, ``micro_batches = 10^12``, ``gpus =
  -1``) through ``serve-sim --plan`` and ``run --plan``: exit 2; and seeded random leaves set
  to wrong types and sizes: exit 0 or 2 under the general contract;
- quantisation files: the two shipped NVFP4 folders' ``hf_quant_config.json`` with
  ``kv_cache_quant_algo``, ``quant_algo``, ``group_size`` or ``exclude_modules`` set to a value
  of the wrong type or an unpriced one, through ``inspect --json``: exit 2 naming the field.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
Case = tuple[str, list[str], str, dict[str, str]]
COST = ["cost", "allreduce", "--message-size", "1048576", "--num-gpus", "8", "--json"]
LITE = ["--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8"]
WRONG: list[Any] = [-1, 0, 10**12, 2**63, 1.5, "x", "", True, None, [], [1], {}, {"a": 1}]


def _moeplan(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "moeplan", *argv], env=full,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


# --- the kernel-variant cache ---------------------------------------------------------------


def _tampered(kind: str, variant: bytes, counts: bytes) -> tuple[bytes | None, bytes | None]:
    """New bytes for the variant file and the counts file (None: unchanged)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "src"))
    from moeplan.kernel_store import _pack, _unpack

    real = _unpack(variant)
    plain = {"int": 7, "empty list": [], "string": "x", "dict": {"a": 1}, "none": None}
    if kind in plain:
        return _pack(plain[kind]), None
    if kind == "another variant's file":
        return counts, None
    if kind == "missing attribute":
        del vars(real)["field"]
        return _pack(real), None
    if kind == "wrong attribute type":
        vars(real)["model"] = 3.5
        return _pack(real), None
    if kind in ("NaN", "inf"):
        bad = float("nan") if kind == "NaN" else float("inf")
        real.y = real.y * bad
        real.exact = dict.fromkeys(real.exact, bad)
        return _pack(real), None
    known = _unpack(counts)
    key = next(iter(known))
    counts_kinds = {"counts negative": {key: -1}, "counts bool": {key: True},
                    "counts list": [1, 2], "counts NaN": {key: np.float64("nan")}}  # fmt: skip
    return None, _pack(counts_kinds[kind])


CACHE_KINDS = ["int", "empty list", "string", "dict", "none", "another variant's file",
               "missing attribute", "wrong attribute type", "NaN", "inf", "counts negative",
               "counts bool", "counts list", "counts NaN"]  # fmt: skip


def cache_value_cases(tmp: Path) -> list[Case]:
    """A clean cache built once, then one copy per way of holding the wrong value."""
    clean = tmp / "cache_clean"
    r = _moeplan(COST, {"MOEPLAN_CACHE_DIR": str(clean)})
    if r.returncode != 0:
        raise RuntimeError(f"the clean cache was not built: {r.stderr[-300:]}")
    answer = tmp / "cache_clean.out"
    answer.write_text(r.stdout)
    src = clean / "kerneldb"
    (variant,) = src.glob("*-variant-*.npz")
    (counts,) = src.glob("*-variants-*.npz")
    out: list[Case] = []
    for i, kind in enumerate(CACHE_KINDS):
        root = tmp / f"cache_value_{i}"
        shutil.copytree(clean, root)
        os.chmod(root, 0o700)
        os.chmod(root / "kerneldb", 0o700)
        v, c = _tampered(kind, variant.read_bytes(), counts.read_bytes())
        for name, blob in ((variant.name, v), (counts.name, c)):
            if blob is not None:
                (root / "kerneldb" / name).write_bytes(blob)
                os.chmod(root / "kerneldb" / name, 0o600)
        out.append((f"cache value: {kind}", COST, f"same:{answer}",
                    {"MOEPLAN_CACHE_DIR": str(root)}))  # fmt: skip
    return out


# --- plan files -----------------------------------------------------------------------------

PLANS = {
    "pipeline": ["pipeline", *LITE, "--pp", "2"],
    "strategy": ["strategy", *LITE],
    "served": ["plan", *LITE, "--requests", "50", "--families", "strategy", "--no-placement"],
}
#: (plan, paths of the field, value): refused by every reader (the plan's schema and
#: model); the first path the plan has is tampered (a served plan's winner may be colocated
#: or disaggregated).
KNOWN_BAD: list[tuple[str, list[tuple[Any, ...]], Any]] = [
    ("pipeline", [("layout", "stages", 0, "modules", 0, "layer")], -1),
    ("pipeline", [("layout", "stages", 0, "modules", 0, "layer")], 10**12),
    ("pipeline", [("layout", "world_size")], 64),
    ("strategy", [("layout", "world_size")], 64),
    ("strategy", [("layout", "attn", "dp")], -1),
    ("served", [("layout", "world_size")], 64),
    ("served", [("predicted", "serving", "knobs", "tbo"),
                ("details", "disaggregation", "decode", "knobs", "tbo")], []),
    ("served", [("predicted", "serving", "serve_layout", "micro_batches"),
                ("details", "disaggregation", "prefill", "micro_batches")], 10**12),
    ("served", [("predicted", "serving", "gpus")], -1),
    ("served", [("details", "disaggregation", "gpus"), ("predicted", "serving", "gpus")], 64),
]  # fmt: skip
PHASE = ["--phase", "decode", "--batch-per-gpu", "8", "--context", "1024", "--json"]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> bool:
    for p in path[:-1]:
        try:
            doc = doc[p]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(doc, dict) and path[-1] in doc or isinstance(doc, list) and path[-1] < len(doc):
        doc[path[-1]] = value
        return True
    return False


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(doc, dict):
        return [q for k, v in doc.items() for q in _leaves(v, (*path, k))]
    if isinstance(doc, list):
        return [q for i, v in enumerate(doc) for q in _leaves(v, (*path, i))]
    return [path]


def plan_file_cases(rng: random.Random, tmp: Path, n: int) -> list[Case]:
    """The known-bad fields (exit 2) and ``n`` random leaves of the plans' layouts and
    serving sections set to a wrong value (exit 0 or 2)."""
    plans: dict[str, Any] = {}
    for name, argv in PLANS.items():
        r = _moeplan([*argv, "--out", str(tmp / f"plan_src_{name}"), "--quiet"])
        if r.returncode != 0:
            raise RuntimeError(f"{name} plan not written: {r.stderr[-300:]}")
        plans[name] = json.loads((tmp / f"plan_src_{name}" / "plan.json").read_text())
    out: list[Case] = []

    def write(tag: str, doc: Any) -> Path:
        p = tmp / f"plan_tampered_{len(out)}_{tag}.json"
        p.write_text(json.dumps(doc))
        return p

    for name, paths, value in KNOWN_BAD:
        doc = copy.deepcopy(plans[name])
        path = next((q for q in paths if _set(doc, q, value)), None)
        if path is None:
            raise RuntimeError(f"{name} plan has none of the fields {paths}")
        p = write(name, doc)
        what = f"{name} plan {'.'.join(map(str, path))} = {value!r}"
        out.append((f"serve-sim {what}", ["serve-sim", "--plan", str(p), *PHASE], "2", {}))
        out.append((f"run {what}", ["run", "--plan", str(p), "--no-check"], "2", {}))
    for _ in range(n):
        name = rng.choice(sorted(plans))
        doc = copy.deepcopy(plans[name])
        paths = [q for q in _leaves(doc) if q[0] in ("layout", "predicted", "details", "model")]
        path, value = rng.choice(paths), rng.choice(WRONG)
        _set(doc, path, value)
        p = write(name, doc)
        what = f"{name} plan {'.'.join(map(str, path))} = {value!r}"
        out.append((f"serve-sim {what}", ["serve-sim", "--plan", str(p), *PHASE], "any", {}))
    return out


# --- quantisation files ---------------------------------------------------------------------

QUANT_FOLDERS = ["nvidia--DeepSeek-V3.1-NVFP4", "nvidia--Qwen3.5-122B-A10B-NVFP4"]
#: field -> values every reader refuses, naming the field (the file's own values are valid).
QUANT_BAD: dict[str, list[Any]] = {
    "kv_cache_quant_algo": ["BOGUS", 7, "", "NVFP4", [], {}, True],
    "quant_algo": ["BOGUS", 5, "", []],
    "group_size": ["x", 0, -1, 10**12, 7.5, True, [], "16"],
    "exclude_modules": [5, "lm_head", [1, 2], {"a": 1}],
}


def quant_file_cases(tmp: Path) -> list[Case]:
    """One folder per (shipped folder, field, bad value), through ``inspect --json``."""
    out: list[Case] = []
    for folder in QUANT_FOLDERS:
        src = ROOT / "tests" / "data" / "configs" / folder
        for field, values in QUANT_BAD.items():
            for value in values:
                d = tmp / f"quant_{len(out)}" / folder
                shutil.copytree(src, d)
                q = json.loads((d / "hf_quant_config.json").read_text())
                q["quantization"][field] = value
                (d / "hf_quant_config.json").write_text(json.dumps(q))
                what = f"{folder} hf_quant_config {field} = {value!r}"
                out.append((what, ["inspect", str(d), "--json"], "2", {}))
    return out


def surface_cases(rng: random.Random, tmp: Path, n: int) -> list[Case]:
    """Every generator of this module (``n``: how many random plan leaves)."""
    return cache_value_cases(tmp) + plan_file_cases(rng, tmp, n) + quant_file_cases(tmp)
