"""Whole-stack steps and wide-EP shards measured on a GPU, against moeplan's prices.

Reads ``stack.json`` and ``wideep.json`` written by ``bench/gpu_session.py --steps
wideep,stack`` (committed under ``bench/data/gpu_<card>_<date>/``) and prices every row on
any machine:

- **Stack** (Qwen3-30B-A3B, one GPU, bf16): each decode / prefill step against
  ``moeplan serve-sim --phase decode|prefill`` (:class:`moeplan.serve.iteration.phase.PhaseModel`, the
  code behind that command) on the card's cluster preset, one GPU (attention TP1, MoE EP1),
  priced two ways: ``profile`` = ``--profile <card>-measured --cost-engine none`` (the card's
  own measured kernels, every operation) and ``tables`` = ``--cost-engine engine`` (NVIDIA's
  SGLang tables, transferred from the H100 where the card has none; GEMMs from the profile).
  Measured decode steps are CUDA-graph replays, prefill steps too (eager beside them). Parts:
  attention = the attention block alone x layers (predicted: projections + core), MoE = the
  MoE block alone x layers (router + routed experts), other = the step less both (embedding,
  final norm, lm-head; predicted: the lm-head GEMM).
- **Wide-EP shards** (DeepSeek-V3's experts, ``E_local`` of 256 per GPU, i.e. EP
  ``256 / E_local``, ``T`` tokens per GPU, ``8 T`` routed copies spread evenly): the measured
  fp8 grouped GEMMs against the wide-EP tables' price of the same rank
  (:meth:`moeplan.cost.wideep.WideEP.moe`, ``batch_spread=False``: the rank's expected load,
  as a table row measures), and the measured bf16 grouped GEMMs and the runtime's path
  against the own-kernel profile's MoE fit (:class:`moeplan.cost.kernel_fits.MoeShape`, bf16:
  the profile was fitted on bf16 kernels) on the shard's ``8 T`` copies as rows of one local
  expert each. ``profile_all_tokens_s`` is the same fit read as
  :meth:`~moeplan.cost.model.CostModel.expert_ffn` reads it for the fused-MoE path (all
  ``T x EP`` tokens of the group routed on this rank): not the wide-EP question, shown for
  contrast.

    .venv/bin/python bench/gpu_phase_vs_sim.py [--data bench/data/gpu_h200_2026-11-27] [--json]

Errors are ``predicted / measured - 1`` (signed) and their median / worst absolute value.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost.kernel_fits import MoeShape
from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.serve.layout import ServeLayout
from moeplan.specs import load_cluster, load_model
from moeplan.specs.quant import WeightQuant

DATA = Path(__file__).parent / "data" / "gpu_h200_2026-11-27"
#: the card's cluster preset and measured profile, by ``nvidia-smi`` name
CARDS = {"NVIDIA H200": ("h200-sxm-8", "h200-measured"), "NVIDIA H100 80GB HBM3": (
    "h100-sxm-8", "h100-measured")}  # fmt: skip
PARTS = ("attention", "moe", "other")


def _card(data: Path) -> tuple[str, str]:
    env = json.loads((data / "session.json").read_text())["env"]
    return CARDS[env["device"]]


def _phase_models(model: str, cluster: str, profile: str) -> dict[str, PhaseModel]:
    m, c = load_model(model), load_cluster(cluster)
    lay = ServeLayout()
    out = {}
    for name, engine in (("profile", None), ("tables", "sglang")):
        cm = engine_cost_model(c, profile, engine=engine)
        out[name] = PhaseModel(m, c, cm, lay, resolve_knobs(cm.engine, m, c, lay))
    return out


def _measured_parts(r: dict[str, Any], layers: int) -> dict[str, float]:
    """Attention and MoE blocks alone x layers, the head alone, and ``gap``: the step less
    the three (embedding, and what separate timings add or hide: L2 reuse, launch tails)."""
    attn, moe = r["attn_block_s"] * layers, r["moe_block_s"] * layers
    return {
        "attention": attn,
        "moe": moe,
        "other": r["head_s"],
        "gap": r["step_s"] - attn - moe - r["head_s"],
    }


def stack_rows(data: Path) -> list[dict[str, Any]]:
    """Every stack row with both predictions and the per-part errors."""
    st = json.loads((data / "stack.json").read_text())
    cluster, profile = _card(data)
    pms = _phase_models(st["model"], cluster, profile)
    out = []
    for r in st["rows"]:
        if not isinstance(r.get("step_s"), float):
            continue
        dec = r["phase"] == "decode"
        per_gpu = r["batch"] if dec else r["batch"] * r["context"]
        row = {k: r[k] for k in ("phase", "batch", "context")} | {"measured_s": r["step_s"]}
        row["eager_s"] = r.get("eager_s")
        row["eager_elementwise_step_s"] = r.get("eager_elementwise_step_s")
        row["measured_parts"] = _measured_parts(r, st["layers"])
        row["unpriced_in_attention_s"] = (
            r["attn_block_s"] - r["attn_core_s"] - r["attn_proj_s"]
        ) * st["layers"]
        for name, pm in pms.items():
            p = pm.step(r["phase"], per_gpu, r["context"])
            b = p.breakdown
            parts = {
                "attention": b["attention"],
                "moe": b["moe"] + b["dispatch"] + b["combine"] + b["dense"],
                "other": b["other"],
            }
            row[name] = {
                "predicted_s": p.step_s,
                "error": p.step_s / r["step_s"] - 1,
                "parts": parts,
            }
        out.append(row)
    return out


def ceilings(data: Path) -> dict[str, float]:
    """The card's copy bandwidth and bf16 GEMM rate measured in the session's first call."""
    c = json.loads((data / "session_first.json").read_text())["ceilings"]
    return {"copy_Bps": c["copy_Bps"], "gemm_flops": c["gemm_flops"]}


def wide_rows(data: Path) -> list[dict[str, Any]]:
    """Every wide-EP shard row with the tables' and the profile's price, and the card's
    floors for the fp8 shard: its fp8 weights read once at the measured copy bandwidth, its
    FLOPs at twice the measured bf16 GEMM rate (the datasheet's fp8 / bf16 ratio)."""
    wd = json.loads((data / "wideep.json").read_text())
    ceil = ceilings(data)
    cluster, profile = _card(data)
    c = load_cluster(cluster)
    md = load_model(wd["model"])
    bf16 = replace(md, quant=WeightQuant())
    tables = engine_cost_model(c, profile, engine="sglang")
    own = engine_cost_model(c, profile, engine=None)
    wide = tables.wide_ep
    assert wide is not None, "the SGLang tables carry the wide-EP MoE"
    out = []
    for r in wd["rows"]:
        phase = "generation" if r["phase"] == "decode" else "context"
        t_pred = wide.moe(md, r["tokens"], r["ep"], phase=phase, batch_spread=False).gemm
        per_expert = r["rows"] / r["e_local"]
        # the fused-MoE reading: every token of the EP group routed on this rank
        all_tokens = own.expert_ffn(bf16, per_expert, r["e_local"])
        # the shard's own reading: its copies arrive as rows, one local expert each
        o_pred = own.profile.kernels.moe(
            MoeShape(tokens=r["rows"], hidden=wd["hidden"], inter=wd["inter"], top_k=1,
                     experts=r["e_local"], local_experts=r["e_local"])
        )  # fmt: skip
        row = {k: r.get(k) for k in ("phase", "e_local", "ep", "tokens", "rows")}
        row |= {
            "fp8_s": r.get("fp8_s"),
            "bf16_s": r.get("bf16_s"),
            "runtime_s": r.get("runtime_s"),
            "tables_s": t_pred,
            "profile_bf16_s": o_pred,
            "profile_all_tokens_s": all_tokens,
        }
        row["floor_s"] = max(
            r["weight_bytes_bf16"] / 2 / ceil["copy_Bps"], r["flops"] / (2 * ceil["gemm_flops"])
        )
        if isinstance(r.get("fp8_s"), float):
            row["tables_vs_fp8"] = t_pred / r["fp8_s"]
            row["fp8_weight_TBps"] = r["weight_bytes_bf16"] / 2 / r["fp8_s"] / 1e12
            row["tables_weight_TBps"] = r["weight_bytes_bf16"] / 2 / t_pred / 1e12
        if isinstance(r.get("bf16_s"), float):
            row["profile_vs_bf16"] = o_pred / r["bf16_s"]
        if isinstance(r.get("runtime_s"), float):
            row["profile_vs_runtime"] = o_pred / r["runtime_s"]
        out.append(row)
    return out


def repeat_spread(data: Path) -> dict[str, dict[str, float]]:
    """|first / second - 1| of every timing taken twice with the same code (two calls)."""
    out = {}
    for name, keys in (("stack", ("step_s",)), ("wideep", ("fp8_s", "bf16_s", "runtime_s"))):
        a = json.loads((data / f"{name}.json").read_text())["rows"]
        b = json.loads((data / f"{name}_repeat.json").read_text())["rows"]
        for k in keys:
            d = [x[k] / y[k] - 1 for x, y in zip(a, b, strict=True) if _both_floats(x, y, k)]
            out[f"{name}/{k}"] = summary(d)
    return out


def _both_floats(x: dict[str, Any], y: dict[str, Any], k: str) -> bool:
    return isinstance(x.get(k), float) and isinstance(y.get(k), float)


def summary(errors: list[float]) -> dict[str, float]:
    a = np.abs(np.asarray(errors, dtype=float))
    return {"median": float(np.median(a)), "worst": float(a.max()), "n": int(a.size)}


def summarize(stack: list[dict[str, Any]], wide: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase in ("decode", "prefill"):
        rows = [r for r in stack if r["phase"] == phase]
        for name in ("profile", "tables"):
            s = summary([r[name]["error"] for r in rows])
            s["gap_share"] = summary([r["measured_parts"]["gap"] / r["measured_s"] for r in rows])
            for part in PARTS:
                s[part] = summary(
                    [
                        r[name]["parts"][part] / r["measured_parts"][part] - 1
                        for r in rows
                        if r["measured_parts"][part] > 0
                    ]
                )
            out[f"{phase}/{name}"] = s
    for phase in ("decode", "prefill"):
        rows = [r for r in wide if r["phase"] == phase]
        for key in ("tables_vs_fp8", "profile_vs_bf16", "profile_vs_runtime"):
            vals = [r[key] - 1 for r in rows if key in r]
            if vals:
                out[f"wideep/{phase}/{key}"] = summary(vals)
        out[f"wideep/{phase}/tables_over_floor_min"] = min(
            r["tables_s"] / r["floor_s"] for r in rows
        )
        for key in ("fp8_weight_TBps", "tables_weight_TBps"):
            out[f"wideep/{phase}/{key}"] = summary([r[key] for r in rows if key in r])
    return out


def _print(stack: list[dict[str, Any]], wide: list[dict[str, Any]], s: dict[str, Any]) -> None:
    print("stack step (ms): measured (CUDA graph) | profile | tables; parts measured/profile")
    for r in stack:
        mp, pp = r["measured_parts"], r["profile"]["parts"]
        print(
            f"{r['phase']:7s} b={r['batch']:3d} ctx={r['context']:5d} "
            f"{r['measured_s'] * 1e3:8.2f} | {r['profile']['predicted_s'] * 1e3:8.2f} "
            f"({100 * r['profile']['error']:+5.1f}%) | {r['tables']['predicted_s'] * 1e3:8.2f} "
            f"({100 * r['tables']['error']:+5.1f}%)  "
            + "  ".join(f"{p} {mp[p] * 1e3:6.2f}/{pp[p] * 1e3:6.2f}" for p in PARTS)
        )
    print("wide-EP shard (us): fp8 | tables | bf16 | runtime | profile(bf16)")
    for r in wide:
        vals = [r.get(k) for k in ("fp8_s", "tables_s", "bf16_s", "runtime_s", "profile_bf16_s")]
        cells = " | ".join(f"{v * 1e6:8.1f}" if isinstance(v, float) else "     n/a" for v in vals)
        print(f"{r['phase']:7s} E_local={r['e_local']:2d} T={r['tokens']:5d}  {cells}")
    for k, v in s.items():
        if not isinstance(v, dict):
            print(f"{k:32s} {v:.3f}")
            continue
        if "weight_TBps" in k:
            print(f"{k:32s} median {v['median']:.2f} TB/s (min..max: see --json)")
            continue
        parts = "  ".join(
            f"{p} {100 * v[p]['median']:.1f}/{100 * v[p]['worst']:.1f}" for p in PARTS if p in v
        )
        gap = (
            f"  gap {100 * v['gap_share']['median']:+.1f}% of the step" if "gap_share" in v else ""
        )
        print(
            f"{k:32s} median {100 * v['median']:5.1f}%  worst {100 * v['worst']:6.1f}%  {parts}{gap}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = Path(a.data)
    stack, wide = stack_rows(data), wide_rows(data)
    s = summarize(stack, wide)
    s["repeat_spread"] = repeat_spread(data)
    if a.json:
        print(json.dumps({"stack": stack, "wideep": wide, "summary": s}, indent=1))
        return
    rep = s.pop("repeat_spread")
    _print(stack, wide, s)
    for k, v in rep.items():
        print(
            f"same code, second call: {k:18s} median {100 * v['median']:.2f}%  worst {100 * v['worst']:.2f}%"
        )


if __name__ == "__main__":
    main()
