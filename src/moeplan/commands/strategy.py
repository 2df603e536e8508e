"""``moeplan strategy``'s answer beyond the analysis itself: the engine export of the #1
strategy, the fused layer it draws and checks against the simulator, the quantization
warning and the ``--json`` object (:func:`moeplan.planners.strategy.analyzer.analyze` ranks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.commands.pricing import with_pricing
from moeplan.errors import require
from moeplan.export.constraints import Target
from moeplan.export.plan_export import model_path_for
from moeplan.export.sglang import ExportResult, sglang_args
from moeplan.export.vllm import vllm_args
from moeplan.planners.strategy.analyzer import Analysis, StrategyResult, gains, result_dict, to_plan
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.planners.strategy.fused import layer_schedules
from moeplan.planners.strategy.space import Strategy, fusable, mixserve_default
from moeplan.specs import ClusterSpec, ModelSpec

EXPORTS = ("sglang", "vllm")


def export_for(
    engine: str, r: StrategyResult, model: str, model_path: str | None, nodes: int, target: Target
) -> ExportResult:
    """Engine arguments for ``r`` on ``target``'s model and machines; without
    ``--model-path`` the preset's Hugging Face repo (a config.json's folder) stands in and a
    warning says so."""
    require(engine in EXPORTS, f"--export ({engine}) must be one of {EXPORTS}")
    fn = sglang_args if engine == "sglang" else vllm_args
    path = model_path_for(model, model_path)
    exp = fn(r.strategy, model_path=path, target=target, num_nodes=nodes)
    if model_path is None:
        note = f"--model-path not given: {path!r} is loaded; pass --model-path for a local copy"
        exp = replace(exp, warnings=(*exp.warnings, note))
    return exp


def fused_target(a: Analysis, c: ClusterSpec) -> Strategy | None:
    """The #1 strategy when fused, else the paper's default hybrid when it is fusable."""
    if a.best is not None and a.best.strategy.fused:
        return a.best.strategy
    s = mixserve_default(c.num_nodes, c.gpus_per_node)
    return s if fusable(s, c.num_nodes, c.gpus_per_node) else None


def verify_fused(ev: StrategyEvaluator, s: Strategy, isl: int) -> dict:
    """Closed-form fused/sequential layer times against their replay on ``moeplan.sim``."""
    out: dict = {"strategy": s.label}
    for phase, q_len in (("prefill", isl), ("decode", 1)):
        layer = ev.fused_layer(s, q_len)
        ag, rs = layer.times()
        sched = layer_schedules(layer)
        for kind, closed in (
            ("fused", ag.fused + rs.fused),
            ("sequential", ag.sequential + rs.sequential),
        ):
            sim = sched[kind].makespan
            out[f"{phase}_{kind}"] = {
                "closed_form_s": closed,
                "simulated_s": sim,
                "gap": abs(sim - closed) / closed if closed else 0.0,
            }
    return out


def strategy_json(
    a: Analysis,
    top: int,
    exp: ExportResult | None,
    model: str,
    cluster: str,
    best: StrategyResult | None,
    price: dict,
) -> dict:
    """The ``--json`` object's analysis keys (``top``: strategies listed)."""
    base = {
        n: (None if r is None else {**result_dict(r), "gains": gains(best, r) if best else None})
        for n, r in a.baselines.items()
    }
    obj = {
        "model": model,
        "cluster": cluster,
        "strategies": [result_dict(r) for r in a.strategies[:top]],
        "baselines": base,
        "search_ms": a.search_s * 1e3,
        "evaluated": a.evaluated,
        "rejected": {"shape": a.rejected_shape, "memory": a.rejected_memory, "slo": a.rejected_slo},
        "pareto": [result_dict(r) for r in a.pareto],
        "plan": (
            with_pricing(to_plan(best, model=model, cluster=cluster), price).to_dict()
            if best
            else None
        ),
    }
    if exp is not None:
        obj["export"] = exp.as_dict()
    return obj


def strategy_warnings(cm: Any, m: ModelSpec, best: StrategyResult | None) -> list[str]:
    """The quantization warning of the #1 strategy's MoE shards (none without a strategy)."""
    from moeplan.cost.provenance import quant_vs_bf16
    from moeplan.search.outcome import quant_sentence

    st = best.strategy if best is not None else None
    qw = None if st is None else quant_sentence(quant_vs_bf16(cm, m, ep=st.moe_ep, tp=st.moe_tp))
    return [qw] if qw else []
