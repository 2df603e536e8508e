"""Larger fuzz run: malformed inputs to every reader, through the real CLI.

Each case is one ``python -m moeplan ...`` subprocess under a wall-clock limit. A case passes
when the command exits 0 or 2 (user error) without a traceback, prints at most one stderr line
when it fails, prints valid JSON (no bare ``NaN``) under ``--json``, and ends before the
limit. Inputs are seeded mutations of:

- model configs (every key of four presets → wrong types, huge/negative/zero/non-finite numbers,
  4,300-digit integers, deletions; plus byte-level damage: non-UTF-8, truncation, deep nesting,
  a FIFO and a directory as the path) → ``inspect --json`` and ``plan``;
- npz traces (float/bool/NaN/huge expert ids, wrong shapes, strings, scalars, 10^12 claimed
  experts) → ``trace stats``, ``place``;
- SGLang dumps (``torch.save`` dicts with wrong types/shapes/maps) → ``trace import``;
- tampered ``plan.json`` and bad ``--timeout`` → ``run --plan``;
- out-of-range flags;
- the surfaces of ``bench/fuzz_surfaces.py``: kernel-variant cache files holding the wrong
  value (a miss, rebuilt: the same answer as a clean cache), tampered plan files (refused by
  ``serve-sim --plan`` and ``run --plan``), ``hf_quant_config.json`` fields of the wrong type
  or unpriced (refused naming the field);
- the kinds of ``bench/fuzz_kinds.py``: huge and non-finite numbers in every numeric flag and
  in the grammars, non-UTF-8 locales, NUL bytes and ESC sequences from files, special files
  (FIFO, folder, ``/dev/null``) at every path moeplan reads and in the kernel-variant cache,
  tampered plan sizes.

The limit is 30 s per case (``plan``: 120 s, a valid full-size plan is slow on 2 cores).

``python bench/fuzz_all.py [--cases N] [--kinds all|configs|new|surfaces] [--root CHECKOUT]
[--limit S] [--workers W]``
prints one JSON line
per failing case and a summary (cases run ``W`` at a time, 2 by default; 1 on a machine other
jobs share, so that a case's limit measures the case and not its neighbour); ``--root`` runs another checkout's ``src`` (for before/after
figures). ``run()`` returns the summary rows for ``bench/run_all.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BAD_VALUES: list[Any] = [
    -1,
    0,
    10**30,
    10**12,
    2**31,
    1e308,
    4.5,
    "12",
    "",
    True,
    False,
    None,
    [],
    [1, 2],
    {},
    {"a": 1},
    "inf",
    -(10**9),
    65541,
]
RAW_VALUES = ["Infinity", "-Infinity", "NaN", "1" * 4300, "1e999"]
PRESETS = ("deepseek-v2-lite", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b")
PLAN_LIMIT_FACTOR = 4  # a valid full-model `plan` takes ~40 s on a loaded 2-core machine
Case = tuple[str, list[str], str]  # (what, argv, expected exit: "0", "2" or "any")


def _presets() -> dict[str, dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "src"))
    from moeplan.specs.presets import model_config

    return {p: model_config(p) for p in PRESETS}


def config_cases(rng: random.Random, tmp: Path, n: int) -> list[Case]:
    """Mutated config files, each run through ``inspect --json`` (some also through plan)."""
    base = _presets()
    out: list[Case] = []
    for i in range(n):
        name = rng.choice(PRESETS)
        cfg = dict(base[name])
        key = rng.choice(sorted(cfg))
        path = tmp / f"cfg{i}.json"
        r = rng.random()
        if r < 0.55:
            cfg[key] = rng.choice(BAD_VALUES)
            text = json.dumps(cfg)
            what = f"{name}.{key}={cfg[key]!r}"[:80]
        elif r < 0.75:
            raw = rng.choice(RAW_VALUES)
            text = json.dumps({**cfg, key: "@@"}).replace('"@@"', raw)
            what = f"{name}.{key}=<{raw[:12]}>"
        elif r < 0.85:
            del cfg[key]
            text = json.dumps(cfg)
            what = f"{name} without {key}"
        else:
            text = json.dumps(cfg)
            cut = rng.randrange(len(text))
            text = text[:cut]
            what = f"{name} truncated at {cut}"
        path.write_text(text)
        cmd = (
            ["inspect", str(path), "--json"]
            if i % 8
            else [
                "plan",
                "--model",
                str(path),
                "--cluster",
                "h100-sxm-8",
                "--out",
                str(tmp / f"o{i}"),
            ]
        )
        out.append((what, cmd, "any"))
    special = {
        "non-utf8": b'{"hidden_size": "\xff\xfe"}',
        "deep": b"[" * 5000 + b"]" * 5000,
        "bigint": b'{"num_hidden_layers": ' + b"9" * 4300 + b"}",
        "surrogate": json.dumps(
            {**base["deepseek-v2-lite"], "architectures": ["\ud800Deepseek"]}
        ).encode(),
        "layers-1e8": json.dumps({**base["deepseek-v2-lite"], "num_hidden_layers": 10**8}).encode(),
        "layers-1e5": json.dumps(
            {**base["deepseek-v2-lite"], "num_hidden_layers": 100000}
        ).encode(),
        "mlp-only-range": json.dumps(
            {**base["qwen3-30b-a3b"], "mlp_only_layers": [1000, -5]}
        ).encode(),
    }
    for what, data in special.items():
        p = tmp / f"{what}.json"
        p.write_bytes(data)
        out.append((what, ["inspect", str(p), "--json"], "2"))
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)
    out.append(("fifo as config", ["inspect", str(fifo), "--json"], "2"))
    (tmp / "dir.json").mkdir()
    out.append(("dir as config", ["inspect", str(tmp / "dir.json"), "--json"], "2"))
    return out


def _trace_cols(rng: random.Random) -> dict[str, Any]:
    import numpy as np

    n, num_l, k = 24, 26, 6
    rid = np.repeat(np.arange(6), 4)
    cols = {
        "request_id": np.repeat(rid, num_l),
        "position": np.repeat(np.tile(np.arange(4), 6), num_l),
        "token_id": np.repeat(np.arange(n) % 7, num_l),
        "layer": np.tile(np.arange(num_l, dtype=np.int16), n),
        "experts": np.stack([rng.sample(range(64), k) for _ in range(n * num_l)]).astype(np.int16),
        "num_experts": np.int64(64),
    }
    return cols


def _put(a: Any, index: Any, value: int) -> Any:
    """A widened copy of ``a`` with one element set (so the value is not wrapped)."""
    import numpy as np

    b = np.asarray(a).astype(np.int64)
    b[index] = value
    return b


def trace_cases(rng: random.Random, tmp: Path, n: int) -> list[Case]:
    import numpy as np

    muts = {
        "experts 65541": lambda c: c.__setitem__("experts", _put(c["experts"], (0, 0), 65541)),
        "experts float": lambda c: c.__setitem__("experts", c["experts"] + 0.5),
        "experts nan": lambda c: c.__setitem__("experts", np.full(c["experts"].shape, np.nan)),
        "experts bool": lambda c: c.__setitem__("experts", c["experts"] > 3),
        "experts 1d": lambda c: c.__setitem__("experts", c["experts"][:, 0]),
        "k=0": lambda c: c.__setitem__("experts", c["experts"][:, :0]),
        "weights shape": lambda c: c.__setitem__("weights", np.ones((3, 2), np.float32)),
        "request_id str": lambda c: c.__setitem__("request_id", c["request_id"].astype(str)),
        "layer str": lambda c: c.__setitem__("layer", c["layer"].astype(str)),
        "scalar request_id": lambda c: c.__setitem__("request_id", np.int64(3)),
        "token_id 2^62": lambda c: c["token_id"].__setitem__(0, 2**62),
        "num_experts 1e12": lambda c: c.__setitem__("num_experts", np.int64(10**12)),
        "num_experts 0": lambda c: c.__setitem__("num_experts", np.int64(0)),
        "layer 10^9": lambda c: c.__setitem__("layer", _put(c["layer"], -1, 10**9)),
        "short position": lambda c: c.__setitem__("position", c["position"][:5]),
        "no experts": lambda c: c.pop("experts"),
        "empty": lambda c: [c.__setitem__(k, v[:0]) for k, v in list(c.items()) if np.ndim(v)],
        "negative experts": lambda c: c["experts"].__setitem__((1, 1), -7),
    }
    out: list[Case] = []
    names = sorted(muts)
    for i in range(n):
        what = names[i % len(names)]
        cols = _trace_cols(rng)
        muts[what](cols)
        path = tmp / f"t{i}.npz"
        np.savez(path, **cols)
        cmd = [
            ["trace", "stats", str(path), "--json"],
            ["place", "--trace", str(path), "--model", "deepseek-v2-lite", "--ep", "8", "--json"],
        ][i % 2]
        out.append((f"trace {what}", cmd, "2"))
    raw = tmp / "garbage.npz"
    raw.write_bytes(bytes(rng.randrange(256) for _ in range(4000)))
    out.append(("garbage npz", ["trace", "stats", str(raw)], "2"))
    return out


def sglang_cases(tmp: Path) -> list[Case]:
    import torch

    ok_rec = {
        "input_ids": [1, 2, 3],
        "positions": [0, 1, 2],
        "extend_seq_lens": [3],
        "topk_ids_of_layer": torch.randint(0, 8, (2, 3, 2)),
    }
    dumps: dict[str, Any] = {
        "p2l small": {
            "records": [ok_rec],
            "last_physical_to_logical_map": torch.zeros((2, 3), dtype=torch.int64),
        },
        "records int": {"records": 5},
        "input_ids str": {"records": [{**ok_rec, "input_ids": ["a", "b", "c"]}]},
        "different k": {
            "records": [ok_rec, {**ok_rec, "topk_ids_of_layer": torch.randint(0, 8, (2, 3, 3))}]
        },
        "topk 70000": {"records": [{**ok_rec, "topk_ids_of_layer": torch.full((2, 3, 2), 70000)}]},
        "topk float": {"records": [{**ok_rec, "topk_ids_of_layer": torch.rand(2, 3, 2)}]},
        "record not dict": {"records": [1, 2]},
        "list top": [1, 2, 3],
    }
    out = []
    for what, obj in dumps.items():
        p = tmp / f"expert_distribution_recorder_{what.replace(' ', '_')}.pt"
        torch.save(obj, p)
        out.append(
            (f"sglang {what}", ["trace", "import", str(p), "--out", str(tmp / "x.npz")], "2")
        )
    stats = {
        "stat nan": torch.full((2, 3, 8), float("nan")),
        "stat 1d": torch.ones(8),
        "stat str": "x",
    }
    for what, val in stats.items():
        p = tmp / f"{what.replace(' ', '_')}.pt"
        torch.save({"logical_count": val}, p)
        out.append(
            (
                what,
                ["trace", "import", str(p), "--from", "sglang-stat", "--out", str(tmp / "x.json")],
                "2",
            )
        )
    a, b = tmp / "sa.pt", tmp / "sb.pt"
    torch.save({"logical_count": torch.ones((2, 3, 8), dtype=torch.int64)}, a)
    torch.save({"logical_count": torch.ones((2, 3, 16), dtype=torch.int64)}, b)
    out.append(
        (
            "stat different E",
            [
                "trace",
                "import",
                str(a),
                str(b),
                "--from",
                "sglang-stat",
                "--out",
                str(tmp / "y.json"),
            ],
            "2",
        )
    )
    return out


def plan_cases(tmp: Path) -> list[Case]:
    good = {
        "schema": "moeplan.plan/1",
        "family": "dep",
        "layout": {"world_size": 2, "ag": 1, "eg": 1},
        "details": {"ma": 2, "r1": 2, "r2": 2, "order": "ASAS"},
    }
    tampered: dict[str, Any] = {
        "details list": {**good, "details": [1]},
        "layout list": {**good, "layout": [1]},
        "model int": {**good, "model": 5},
        "ma str": {**good, "details": {**good["details"], "ma": "x"}},
        "ma -1": {**good, "details": {**good["details"], "ma": -1}},
        "world 10^9": {**good, "layout": {"world_size": 10**9, "ag": 1, "eg": 1}},
        "top list": [good],
        "family int": {**good, "family": 3},
    }
    out = []
    for what, doc in tampered.items():
        p = tmp / f"plan_{what.replace(' ', '_')}.json"
        p.write_text(json.dumps(doc))
        out.append((f"plan {what}", ["run", "--plan", str(p), "--no-check", "--tokens", "16"], "2"))
    goodp = tmp / "good_plan.json"
    goodp.write_text(json.dumps(good))
    for t in ("nan", "inf", "1e12", "0", "-1"):
        out.append(
            (
                f"run --timeout {t}",
                ["run", "--plan", str(goodp), "--no-check", "--tokens", "16", "--timeout", t],
                "2",
            )
        )
    binp = tmp / "bin.json"
    binp.write_bytes(b"\x00\xff\x80" * 100)
    out.append(("plan binary", ["run", "--plan", str(binp)], "2"))
    out.append(("plan dir", ["run", "--plan", str(tmp)], "2"))
    return out


def flag_cases(tmp: Path) -> list[Case]:
    import numpy as np

    d = tmp / "exists"
    d.mkdir(exist_ok=True)
    m = ["--model", "deepseek-v2-lite"]
    np.savez(tmp / "valid.npz", **_trace_cols(random.Random(1)))
    return [
        (
            "dep --out dir",
            [
                "dep",
                *m,
                "--cluster",
                "findep-c",
                "--ag",
                "1",
                "--eg",
                "1",
                "--isl",
                "128",
                "--out",
                str(d),
            ],
            "any",
        ),
        ("inspect --gpus 0", ["inspect", "deepseek-v2-lite", "--gpus", "0", "--json"], "2"),
        ("inspect --gpus -3", ["inspect", "deepseek-v2-lite", "--gpus", "-3"], "2"),
        ("inspect --context -1", ["inspect", "deepseek-v2-lite", "--context", "-1"], "2"),
        (
            "plan --nodes 1000000",
            ["plan", *m, "--cluster", "h100-sxm-8", "--nodes", "1000000", "--out", str(tmp / "pn")],
            "2",
        ),
        (
            "plan --nodes 0",
            ["plan", *m, "--cluster", "h100-sxm-8", "--nodes", "0", "--out", str(tmp / "pn0")],
            "2",
        ),
        (
            "place --step-tokens -1",
            ["place", "--trace", str(tmp / "valid.npz"), *m, "--ep", "8", "--step-tokens", "-1"],
            "2",
        ),
        ("trace stats --ep 0", ["trace", "stats", str(tmp / "valid.npz"), "--ep", "0"], "2"),
        (
            "trace synth --requests 0",
            ["trace", "synth", "--out", str(tmp / "s.npz"), "--requests", "0"],
            "2",
        ),
        (
            "trace synth bad suffix",
            ["trace", "synth", "--out", str(tmp / "s.txt"), "--requests", "2"],
            "2",
        ),
        (
            "trace synth --seed -1",
            ["trace", "synth", "--out", str(tmp / "s2.npz"), "--requests", "2", "--seed", "-1"],
            "2",
        ),
        ("bare moeplan", [], "0"),
    ]


def run_case(
    argv: list[str], root: Path, limit: float, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "PYTHONWARNINGS": "default"}
    env.update(extra or {})
    env.pop("MOEPLAN_DEBUG", None)
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "moeplan", *argv],
            capture_output=True,
            text=True,
            timeout=limit,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"stdout": "", "rc": None, "hang": True, "traceback": False, "internal": False, "lines": 0,
                "err": "", "s": limit}  # fmt: skip
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    return {
        "stdout": p.stdout,
        "rc": p.returncode,
        "hang": False,
        "traceback": "Traceback" in p.stderr,
        "internal": "internal error" in p.stderr,
        "lines": len(err),
        "err": err[-1][:200] if err else "",
        "s": round(time.monotonic() - t0, 2),
    }


def _limit(argv: list[str], limit: float) -> float:
    """``plan`` searches every family of a full-size model: give it PLAN_LIMIT_FACTOR x."""
    return limit * PLAN_LIMIT_FACTOR if argv[:1] == ["plan"] else limit


def all_cases(
    seed: int, n: int, tmp: Path, kinds: str = "all"
) -> list[tuple[str, list[str], str, dict[str, str]]]:
    """``kinds``: ``configs`` (the generators above), ``new`` (``bench/fuzz_kinds.py``),
    ``surfaces`` (``bench/fuzz_surfaces.py``) or ``all``; each case with the environment it
    adds (``{}``: none)."""
    rng = random.Random(seed)
    old: list[Case] = []
    if kinds in ("all", "configs"):
        old = (
            config_cases(rng, tmp, n)
            + trace_cases(rng, tmp, max(n // 3, 18))
            + sglang_cases(tmp)
            + plan_cases(tmp)
            + flag_cases(tmp)
        )
    cases = [(what, argv, expect, {}) for what, argv, expect in old]
    if kinds in ("all", "new"):
        sys.path.insert(0, str(ROOT / "bench"))
        from fuzz_kinds import kind_cases

        cases += kind_cases(rng, tmp, n)
    if kinds in ("all", "surfaces"):
        sys.path.insert(0, str(ROOT / "bench"))
        from fuzz_surfaces import surface_cases

        cases += surface_cases(rng, tmp, max(n // 5, 10))
    return cases


def _strict_json(text: str) -> bool:
    """``text`` is one JSON value with no bare ``NaN`` / ``Infinity``."""

    def bare(c: str) -> Any:
        raise ValueError(c)

    try:
        json.loads(text, parse_constant=bare)
    except ValueError:
        return False
    return True


def judge(what: str, argv: list[str], expect: str, r: dict[str, Any]) -> dict[str, Any] | None:
    """None when the run ``r`` of a case keeps its contract, else the finding. ``r`` loses
    its ``stdout`` and gains the flags the summary counts."""
    out = r.pop("stdout")
    same = Path(expect[5:]).read_text() if expect.startswith("same:") else None
    code = "0" if same is not None else expect
    r["accepted_bad"] = code != "any" and r["rc"] is not None and str(r["rc"]) != code
    r["invalid_json"] = "--json" in argv and r["rc"] == 0 and not _strict_json(out)
    r["answer_differs"] = same is not None and r["rc"] == 0 and out != same
    ok = (
        not r["hang"]
        and not r["traceback"]
        and r["rc"] in (0, 2)
        and (r["rc"] == 0 or r["lines"] == 1)
        and not r["accepted_bad"]
        and not r["invalid_json"]
        and not r["answer_differs"]
    )
    return None if ok else {"case": what, "argv": " ".join(argv[:3]), "expect": code, **r}


def fuzz(
    n: int = 150,
    seed: int = 0,
    root: Path = ROOT,
    limit: float = 30.0,
    workers: int = 2,
    kinds: str = "all",
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="moeplan-fuzz-") as d:
        cases = all_cases(seed, n, Path(d), kinds)
        with ThreadPoolExecutor(workers) as pool:
            results = list(
                pool.map(lambda c: run_case(c[1], root, _limit(c[1], limit), c[3]), cases)
            )
        verdicts = [judge(what, argv, expect, r) for (what, argv, expect, _), r in
                    zip(cases, results, strict=True)]  # fmt: skip
        bad = [v for v in verdicts if v is not None]
    return {
        "runs": len(cases),
        "tracebacks": sum(r["traceback"] for r in results),
        "hangs": sum(r["hang"] for r in results),
        "internal_errors": sum(r["internal"] for r in results),
        "exit_not_0_or_2": sum(r["rc"] not in (0, 2) for r in results if not r["hang"]),
        "multi_line_errors": sum(r["rc"] not in (0, None) and r["lines"] > 1 for r in results),
        "wrong_exit_for_bad_input": sum(r["accepted_bad"] for r in results),
        "invalid_json": sum(r["invalid_json"] for r in results),
        "answer_differs_from_clean_cache": sum(r["answer_differs"] for r in results),
        "failing": bad,
    }


def run() -> list[dict]:
    t0 = time.perf_counter()
    s = fuzz(n=60)
    wall = time.perf_counter() - t0
    note = f"{s['runs']} CLI runs, limit 30 s each, wall {wall:.0f} s"
    return [
        {
            "name": f"fuzz_{k}",
            "value": s[k],
            "unit": "runs",
            "reference": s["runs"],
            "ratio": s[k] / s["runs"],
            "target": "0",
            "note": note,
        }
        for k in (
            "tracebacks",
            "hangs",
            "exit_not_0_or_2",
            "multi_line_errors",
            "wrong_exit_for_bad_input",
            "invalid_json",
            "answer_differs_from_clean_cache",
        )
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=150, help="mutated configs (traces: a third)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose src/ is fuzzed")
    ap.add_argument("--limit", type=float, default=30.0, help="seconds per case")
    ap.add_argument("--workers", type=int, default=2, help="cases run at a time")
    ap.add_argument("--kinds", choices=("all", "configs", "new", "surfaces"), default="all",
                    help="configs: the malformed-input generators; new: bench/fuzz_kinds.py; "
                    "surfaces: bench/fuzz_surfaces.py")  # fmt: skip
    a = ap.parse_args()
    if a.workers < 1:
        ap.error(f"--workers ({a.workers}) must be >= 1")
    s = fuzz(a.cases, a.seed, a.root.resolve(), a.limit, a.workers, kinds=a.kinds)
    for b in s["failing"]:
        print(json.dumps(b))
    print(
        json.dumps({k: v for k, v in s.items() if k != "failing"} | {"failing": len(s["failing"])})
    )
    return 0 if not s["failing"] else 1


if __name__ == "__main__":
    sys.exit(main())
