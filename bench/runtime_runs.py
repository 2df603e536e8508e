"""The runtime engines' runs of docs/benchmarks/runtime.md: ``moeplan run`` on CPU / gloo.

Each case writes its plan to a temporary folder and runs ``python -m moeplan run --plan ...
--json`` (spawned worker processes, gloo over loopback, the default small model unless a
preset is named), once per case, and prints one line per run:

- hybrid TP-EP (MixServe), W = 4 (attention TP2 x DP2, MoE TP2 x EP2), 1024 tokens in
  sequences of 32, fused and ``--unfused``: the slowest rank's makespan and rank 0's time in
  communication spans (the ``comm`` thread of its ``--timeline`` trace);
- DEP (FinDEP), ag = 1, eg = 1, sequences of 32, every ``(r1, ma, r2, order)`` of the table:
  the measured makespan (slowest rank, one iteration after a warm-up) and the simulator's
  prediction for the same schedule with durations calibrated in the same run;
- attention TP4 + MoE EP4 with Sem-MoE's token plans ``contiguous`` and ``predicted``, 1024
  tokens, per model: the local activation rate (rows whose expert is on the token's rank / all
  rows, over every layer and rank);
- pipeline, 2 stages x 1 rank, 2048 tokens, 8 micro-batches, asynchronous and ``--sync-send``:
  the makespan.

Every run also states its max abs error against the single-process reference. CPU numbers:
they check that the engines run and agree, not GPU speed.

    PYTHONPATH=src python bench/runtime_runs.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HYBRID = {"world_size": 4, "attn": {"tp": 2, "dp": 2}, "moe": {"tp": 2, "ep": 2}, "pp": 1}
TPEP = {"world_size": 4, "attn": {"tp": 4, "dp": 1}, "moe": {"tp": 1, "ep": 4}, "pp": 1}
PP = {"world_size": 2, "attn": {"tp": 1, "dp": 1}, "moe": {"tp": 1, "ep": 1}, "pp": 2}
#: (r1, ma, r2, order): the DEP rows of runtime.md
DEP = [(1, 8, 1, "ASAS"), (2, 4, 1, "ASAS"), (2, 4, 2, "ASAS"), (2, 4, 2, "AASS"),
       (4, 2, 4, "ASAS"), (4, 2, 4, "AASS")]  # fmt: skip
TPEP_MODELS = [None, "mixtral-8x7b", "qwen3-30b-a3b"]


def _plan(folder: Path, name: str, family: str, layout: dict, details: dict) -> Path:
    path = folder / f"{name}.json"
    doc = {"schema": "moeplan.plan/1", "family": family, "layout": layout, "details": details}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _run(plan: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "moeplan", "run", "--plan", str(plan), "--json", *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _comm_s(trace: Path, pid: int = 0) -> float:
    """Seconds of ``pid``'s complete events on its ``comm`` thread."""
    doc = json.loads(trace.read_text(encoding="utf-8"))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    tids = {
        e["tid"]
        for e in events
        if e.get("name") == "thread_name" and e["pid"] == pid and e["args"]["name"] == "comm"
    }
    return sum(e["dur"] for e in events if e.get("ph") == "X" and e["pid"] == pid
               and e["tid"] in tids) * 1e-6  # fmt: skip


def _lar(out: dict) -> float:
    """Rows whose expert is on the token's rank / all rows, over every rank and layer (each
    rank's ``local_rows``: ``[local, total]`` per layer)."""
    pairs = [p for r in out["ranks"] for p in (r.get("local_rows") or [])]
    if not pairs:
        raise SystemExit(f"no local_rows in the run's answer: {sorted(out['ranks'][0])}")
    return sum(p[0] for p in pairs) / sum(p[1] for p in pairs)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for fused in (True, False):
            plan = _plan(d, "h4", "strategy", HYBRID, {})
            trace = d / "hb.json"
            extra = [] if fused else ["--unfused"]
            out = _run(plan, "--tokens", "1024", "--isl", "32", "--timeline", str(trace), *extra)
            print(f"hybrid TP2xEP2 {'fused' if fused else 'unfused'}: makespan "
                  f"{1e3 * out['measured_makespan_s']:.1f} ms, rank-0 comm spans "
                  f"{1e3 * _comm_s(trace):.1f} ms, max abs err {out['max_abs_err']:.1e}")  # fmt: skip
        for r1, ma, r2, order in DEP:
            details = {"ma": ma, "r1": r1, "r2": r2, "order": order, "seq_len": 32}
            plan = _plan(d, "d", "dep", {"world_size": 2, "ag": 1, "eg": 1}, details)
            out = _run(plan, "--timeline", str(d / "dd.json"))
            m, p = out["measured_makespan_s"], out["predicted_makespan_s"]
            print(f"DEP r1 {r1} ma {ma} r2 {r2} {order}: measured {1e3 * m:.1f} ms, predicted "
                  f"{1e3 * p:.1f} ms, predicted/measured {p / m:.2f}, "
                  f"max abs err {out['max_abs_err']:.1e}")  # fmt: skip
        for model in TPEP_MODELS:
            lar = {}
            for kind in ("contiguous", "predicted"):
                plan = _plan(d, "tpep", "strategy", TPEP, {"token_plan": kind})
                args = ["--tokens", "1024", "--isl", "32"] + (["--model", model] if model else [])
                lar[kind] = _lar(_run(plan, *args))
            print(f"Sem-MoE TP4+EP4 {model or 'default'}: LAR contiguous {lar['contiguous']:.3f}, "
                  f"predicted {lar['predicted']:.3f}")  # fmt: skip
        for sync in (False, True):
            plan = _plan(d, "pp", "strategy", PP, {})
            extra = ["--sync-send"] if sync else []
            out = _run(plan, "--tokens", "2048", "--isl", "32", "--micro-batches", "8", *extra)
            print(f"pipeline 2 stages {'sync' if sync else 'async'} sends: makespan "
                  f"{1e3 * out['measured_makespan_s']:.1f} ms, "
                  f"max abs err {out['max_abs_err']:.1e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
