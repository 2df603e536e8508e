"""``moeplan strategy``'s answer beyond the analysis itself: the engine export of the #1
strategy, the fused layer it draws and checks against the simulator, the quantization
warning and the ``--json`` object (:func:`moeplan.planners.strategy.analyzer.analyze` ranks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.backends import exported
from moeplan.commands.pricing import with_pricing
from moeplan.cost import CostModel
from moeplan.errors import require
from moeplan.export.constraints import Target
from moeplan.export.plan_export import model_path_for
from moeplan.export.sglang import ExportResult
from moeplan.export.writers import writer
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.analyzer import (
    Analysis,
    StrategyResult,
    gains,
    result_dict,
    to_plan,
    zipf_routing,
)
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.planners.strategy.fused import layer_schedules
from moeplan.planners.strategy.space import fusable, mixserve_default
from moeplan.specs import ClusterSpec, ModelSpec, Workload


def export_for(
    engine: str, r: StrategyResult, model: str, model_path: str | None, nodes: int, target: Target
) -> ExportResult:
    """Engine arguments for ``r`` on ``target``'s model and machines; without
    ``--model-path`` the preset's Hugging Face repo (a config.json's folder) stands in and a
    warning says so."""
    engines = exported()
    require(engine in engines, f"--export ({engine}) must be one of {engines}")
    path = model_path_for(model, model_path)
    exp = writer(engine).engine_args(r.strategy, model_path=path, target=target, num_nodes=nodes)
    if model_path is None:
        note = f"--model-path not given: {path!r} is loaded; pass --model-path for a local copy"
        exp = replace(exp, warnings=(*exp.warnings, note))
    return exp


def fused_target(a: Analysis, c: ClusterSpec) -> Layout | None:
    """The #1 strategy when fused, else the paper's default hybrid when it is fusable."""
    if a.best is not None and a.best.strategy.fused:
        return a.best.strategy
    s = mixserve_default(c.num_nodes, c.gpus_per_node)
    return s if fusable(s, c.num_nodes, c.gpus_per_node) else None


def verify_fused(ev: StrategyEvaluator, s: Layout, isl: int) -> dict:
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
    from moeplan.search.job.outcome import quant_sentence

    st = best.strategy if best is not None else None
    qw = None if st is None else quant_sentence(quant_vs_bf16(cm, m, ep=st.moe_ep, tp=st.moe_tp))
    return [qw] if qw else []


def strategy_workload(
    m: ModelSpec, *, batch: int, isl: int, osl: int, rate: float | None, skew: float, seed: int
) -> Workload:
    """The workload ranked: prompt and output lengths, batch and rate, with the routing of a
    Zipf expert load of ``skew`` (0: balanced) shuffled by ``seed``."""
    routing = zipf_routing(m.num_experts, m.top_k, skew, seed) if skew else None
    return Workload(phase="both", batch=batch, isl=isl, osl=osl, rate=rate, routing=routing)


def node_sizes(c: ClusterSpec) -> list[int]:
    """The node counts ``--all-sizes`` ranks: powers of two below the cluster's, and it."""
    return sorted({n for n in (1, 2, 4, 8, 16, 32, 64) if n < c.num_nodes} | {c.num_nodes})


def strategy_files(
    a: Analysis,
    ev: StrategyEvaluator,
    target: Layout | None,
    exp: ExportResult | None,
    price: dict[str, Any],
    *,
    model: str,
    isl: int,
) -> dict[str, Any]:
    """The files ``--out`` holds, by name: the Pareto figure, the #1 strategy's plan.json and
    launcher, the fused layer's Gantt chart (figures as functions making them)."""
    from moeplan.export.launcher import render_launcher
    from moeplan.kernel_tables import pricing_line
    from moeplan.report.command_figures import pareto_html
    from moeplan.sim import gantt_html

    best, m, c = a.best, ev.model, ev.cluster
    files: dict[str, Any] = {"pareto.html": lambda: pareto_html(a, f"{m.name} on {c.name}")}
    if best is not None:
        files["plan.json"] = with_pricing(
            to_plan(best, model=model, cluster=c.name, baselines=a.baselines), price
        ).to_json()
    if exp is not None and exp.args and best is not None:
        files[f"{exp.engine}.sh"] = render_launcher(
            exp.args, [best.strategy.label, pricing_line(price), *exp.warnings]
        )
    if target is not None:
        files["gantt.html"] = lambda: gantt_html(
            layer_schedules(ev.fused_layer(target, isl)),
            title=f"one MoE layer, prefill: {target.label}",
            include_plotlyjs=True,
        )
    return files


def strategy_price_sources(
    m: ModelSpec, c: ClusterSpec, w: Workload, cm: CostModel, best: StrategyResult | None
) -> dict[str, dict[str, Any]] | None:
    """``price_sources`` of the #1 strategy's busy time per batch (one prefill step and
    ``osl`` decode steps, Eq. 6: what its TTFT, ITL and throughput are read from), priced
    again on each accounting copy; ``None`` without a strategy."""
    from moeplan.cost.price_sources import analytic, attribute, summarize

    if best is None:
        return None
    nodes = -(-best.num_gpus // c.gpus_per_node)
    cl = c if nodes == c.num_nodes else c.with_nodes(nodes)

    def steps(cost: CostModel) -> list[float]:
        ev = StrategyEvaluator(m, cl, w, cost)
        pre = ev.phase_time(best.strategy, w.isl, w.isl).total_s
        return [pre, ev.phase_time(best.strategy, 1, w.isl + w.osl // 2).total_s]

    return summarize(attribute(cm, steps), [1.0, float(w.osl)], **analytic(cm))
