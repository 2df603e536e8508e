"""Measured vs predicted, three ways, on NVIDIA's H100 kernel-table shapes.

For every row measured on an H100 by ``bench/gpu_session.py`` (``--data``, default the
committed ``bench/data/gpu_h100_2026-11-22``):

- ``nvidia``: the table's latency (SGLang 0.5.14 kernels: Triton fused MoE, FA3 attention);
- ``ours``: moeplan's own kernels on the same shape (grouped MoE eager and CUDA-graph
  replayed, PyTorch SDPA/FlashAttention-2), from :mod:`moeplan.profiling.tables`;
- ``db``: moeplan's prediction with NVIDIA's tables (``CostModel(engine="sglang")`` on
  ``h100-sxm-8``) — for rows in the tables this is the table itself (source ``measured``), so
  it is shown for completeness, not as a test;
- ``profile``: moeplan's prediction from the ``h100-measured`` profile alone
  (``moeplan calibrate --device cuda`` on that H100, no NVIDIA table used), as a user with an
  untabled GPU would get it.

Prints median / p90 absolute percentage error per operation and token regime and writes the
rows with ``--out FILE.json``. Runs on any machine (no GPU): ``.venv/bin/python
bench/gpu_vs_tables.py``.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost import CostModel, load_profile
from moeplan.kernel_tables import kernel_db
from moeplan.specs import ModelSpec, load_cluster, load_model

DATA = Path(__file__).parent / "data" / "gpu_h100_2026-11-22"
REGIMES = ((0, 64, "tokens <= 64"), (65, 1024, "65-1024"), (1025, math.inf, "> 1024"))


def _attn_model(r: dict[str, Any]) -> ModelSpec:
    base = load_model("qwen3-30b-a3b")
    return replace(
        base,
        num_attention_heads=r["num_heads"],
        num_kv_heads=r["num_key_value_heads"],
        head_dim=r["head_dim"],
    )


def predict(op: str, r: dict[str, Any], cm: CostModel) -> float:
    """Seconds predicted by ``cm`` for one table row."""
    if op == "moe":
        local = r["num_experts"] // r["moe_ep_size"]
        m = r["num_tokens"] * r["topk"] / r["num_experts"]
        model = replace(
            load_model("qwen3-30b-a3b"),
            hidden_size=r["hidden_size"],
            moe_intermediate_size=r["inter_size"],
            top_k=r["topk"],
            num_experts=r["num_experts"],
        )
        return cm.expert_ffn(model, m, local, tp=r["moe_tp_size"])
    model = _attn_model(r)
    b = r["batch_size"]
    if op == "generation_attention":
        return cm.attention_core(model, b, 1, r["isl"] + r["step"])
    return cm.attention_core(model, b, r["isl"], r["isl"])


def tokens_of(op: str, r: dict[str, Any]) -> int:
    if op == "moe":
        return int(r["num_tokens"])
    return int(r["batch_size"] * (1 if op == "generation_attention" else r["isl"]))


def _ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred - true) / true


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median / p90 APE against NVIDIA's latency for each predictor, per op and regime."""
    out = []
    ops = sorted({r["op"] for r in rows})
    for op in ops:
        for lo, hi, label in ((0, math.inf, "all"), *REGIMES):
            sel = [r for r in rows if r["op"] == op and lo <= r["tokens"] <= hi]
            if not sel:
                continue
            true = np.array([r["nvidia_s"] for r in sel])
            row: dict[str, Any] = {"op": op, "regime": label, "rows": len(sel)}
            for key in ("ours_s", "ours_graph_s", "profile_s", "db_s"):
                vals = np.array([r.get(key, np.nan) for r in sel], dtype=float)
                ok = np.isfinite(vals)
                if ok.any():
                    e = _ape(vals[ok], true[ok])
                    row[key.replace("_s", "")] = (float(np.median(e)), float(np.quantile(e, 0.9)))
            out.append(row)
    return out


def compare(data: Path) -> list[dict[str, Any]]:
    tables = json.loads((data / "calibrate_rows.json").read_text())
    cl = load_cluster("h100-sxm-8")
    prof = CostModel(cl, load_profile("h100-measured"))
    db = CostModel(cl, None, engine="sglang", kernels=kernel_db())
    rows = []
    for op, rs in tables.items():
        for r in rs:
            row = {
                "op": op,
                "tokens": tokens_of(op, r),
                "nvidia_s": r["latency"] * 1e-3,
                "ours_s": r["ours_ms"] * 1e-3,
                "profile_s": predict(op, r, prof),
                "db_s": predict(op, r, db),
                "shape": {
                    k: r[k]
                    for k in r
                    if k
                    not in ("latency", "ours_ms", "ours_graph_ms", "framework", "device", "op_name")
                },
            }
            if "ours_graph_ms" in r:
                row["ours_graph_s"] = r["ours_graph_ms"] * 1e-3
            rows.append(row)
    return rows


def _engine_rows(engine: str, op: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    from moeplan.kernel_tables import kernels_dir

    fam = "moe" if op == "moe" else "attention"
    paths = sorted((Path(kernels_dir()) / "h100_sxm" / fam / engine).glob(f"*/{op}_perf.parquet"))
    if not paths:
        return []
    rows = pq.read_table(paths[-1]).to_pylist()
    if op == "moe":
        return [r for r in rows if r["moe_dtype"] == "bfloat16" and r["distribution"] == "balanced"]
    return [
        r
        for r in rows
        if (r["attn_dtype"], r["kv_cache_dtype"], r["window_size"]) == ("bfloat16", "bfloat16", 0)
        and r["head_dim"] <= 256
    ]


def profile_vs_engines() -> list[dict[str, Any]]:
    """The ``h100-measured`` profile alone against every engine's whole H100 table (bf16,
    balanced MoE; no sliding window, head_dim <= 256): median / p90 APE per op and regime."""
    cm = CostModel(load_cluster("h100-sxm-8"), load_profile("h100-measured"))
    out = []
    for engine in ("sglang", "vllm", "trtllm"):
        for op in ("moe", "context_attention", "generation_attention"):
            rs = _engine_rows(engine, op)
            if not rs:
                continue
            true = np.array([r["latency"] * 1e-3 for r in rs])
            pred = np.array([predict(op, r, cm) for r in rs])
            tok = np.array([tokens_of(op, r) for r in rs])
            for lo, hi, label in ((0, math.inf, "all"), *REGIMES):
                m = (tok >= lo) & (tok <= hi)
                if m.any():
                    e = _ape(pred[m], true[m])
                    out.append(
                        {
                            "engine": engine,
                            "op": op,
                            "regime": label,
                            "rows": int(m.sum()),
                            "median": float(np.median(e)),
                            "p90": float(np.quantile(e, 0.9)),
                            "pred_over_true": float(np.median(pred[m] / true[m])),
                        }
                    )
    return out


def _runtime_model(name: str) -> ModelSpec:
    """The preset as the runtime builds it at full width (``runtime.config.from_model_spec``):
    plain MHA with ``head_dim = hidden / heads``, bf16 weights, the MoE block unchanged."""
    from moeplan.specs.quant import UNQUANTIZED

    m = load_model(name)
    return replace(
        m,
        attention="gqa",
        num_kv_heads=m.num_attention_heads,
        head_dim=m.hidden_size // m.num_attention_heads,
        quant=UNQUANTIZED,
    )


def runtime_compare(data: Path) -> list[dict[str, Any]]:
    """The runtime's MoE layer and attention (one GPU, bf16, ``runtime.json``) against the cost
    model's prediction for the same shapes: the h100-measured profile and the SGLang tables."""
    cl = load_cluster("h100-sxm-8")
    models = {
        "profile": CostModel(cl, load_profile("h100-measured")),
        "sglang tables": CostModel(cl, None, engine="sglang", kernels=kernel_db()),
    }
    out = []
    for r in json.loads((data / "runtime.json").read_text()):
        out.append({**r, **{label: runtime_prediction(cm, r) for label, cm in models.items()}})
    return out


def runtime_prediction(cm: CostModel, r: dict[str, Any]) -> float:
    """Seconds ``cm`` predicts for one ``runtime.json`` row (MoE layer: router, shared expert
    and routed experts; attention: the whole layer)."""
    m = _runtime_model(r["model"])
    if r["op"] == "moe_layer":
        t = r["tokens"]
        return (
            cm.router(m, t)
            + cm.shared_expert(m, t)
            + cm.expert_ffn(m, t * m.top_k / m.num_experts, m.num_experts)
        )
    return cm.attention_layer(m, r["batch"], r["seq"], r["seq"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = compare(Path(a.data))
    summary = summarise(rows)
    engines = profile_vs_engines()
    runtime = runtime_compare(Path(a.data))
    if a.out:
        Path(a.out).write_text(
            json.dumps(
                {"summary": summary, "engines": engines, "runtime": runtime, "rows": rows}, indent=1
            )
        )
    if a.json:
        print(json.dumps({"summary": summary, "engines": engines, "runtime": runtime}, indent=1))
        return

    def cell(v: Any) -> str:
        return "-" if v is None else f"{100 * v[0]:5.1f} / {100 * v[1]:5.1f}"

    print("median / p90 |error| against NVIDIA's H100 SGLang rows (%)")
    print(
        f"{'op':22s} {'regime':13s} {'rows':>5s}  {'ours eager':>13s}  {'ours graph':>13s}  "
        f"{'profile only':>13s}  {'kernel DB':>13s}"
    )
    for s in summary:
        print(
            f"{s['op']:22s} {s['regime']:13s} {s['rows']:5d}  {cell(s.get('ours')):>13s}  "
            f"{cell(s.get('ours_graph')):>13s}  {cell(s.get('profile')):>13s}  "
            f"{cell(s.get('db')):>13s}"
        )


def print_runtime(runtime: list[dict[str, Any]]) -> None:
    print("\nruntime layers on one H100 (ms): measured eager / CUDA graph vs predicted")
    print(
        f"{'op':10s} {'model':17s} {'shape':>12s} {'eager':>8s} {'graph':>8s} "
        f"{'profile':>8s} {'tables':>8s}"
    )
    for r in runtime:
        shape = str(r["tokens"]) if r["op"] == "moe_layer" else f"{r['batch']}x{r['seq']}"
        g = r.get("graph_s")
        print(
            f"{r['op']:10s} {r['model']:17s} {shape:>12s} {1e3 * r['measured_s']:8.3f} "
            f"{'-' if g is None else f'{1e3 * g:.3f}':>8s} {1e3 * r['profile']:8.3f} "
            f"{1e3 * r['sglang tables']:8.3f}"
        )


if __name__ == "__main__":
    main()
