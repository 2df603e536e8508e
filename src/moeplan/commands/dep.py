"""``moeplan dep``'s files: the FinDEP plan, and its schedule and PPPipe's over the first MoE
layers as a Chrome trace and a Gantt chart (:func:`moeplan.planners.dep.plan_dep` plans).
"""

from __future__ import annotations

import json
from typing import Any

from moeplan.commands.pricing import with_pricing
from moeplan.cost import CostModel
from moeplan.planners import dep
from moeplan.sim import chrome_trace, gantt_html
from moeplan.specs import ClusterSpec, ModelSpec


def dep_files(report: dep.DepReport, price: dict[str, Any], layers: int | None) -> dict[str, str]:
    """``--out``'s files by name; ``layers``: MoE layers drawn (None: all)."""
    title, scheds = _schedules(report, layers)
    return {
        "plan.json": with_pricing(dep.to_plan(report), price).to_json(),
        "timeline.json": json.dumps(chrome_trace(scheds)),
        "gantt.html": gantt_html(scheds, title=title, include_plotlyjs=True),
    }


def _schedules(report: dep.DepReport, layers: int | None) -> tuple[str, dict]:
    """(title, the FinDEP and PPPipe schedules over the first ``layers`` MoE layers)."""
    moe = report.problem.layers
    shown = moe if layers is None else min(layers, moe)
    title = f"{report.model} on {report.cluster}, S={report.seq_len}, {shown} of {moe} MoE layers"
    return title, dep.schedules(report, shown)


def dep_price_sources(
    model: ModelSpec,
    cluster: ClusterSpec,
    cm: CostModel,
    report: dep.DepReport,
    layers: int | None,
    batch: int,
    imbalance: float,
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of the FinDEP schedule's iteration (``iteration_s``: its makespan),
    its instance rebuilt on each accounting copy and its configuration evaluated again."""
    from moeplan.cost.price_sources import analytic, attribute, summarize
    from moeplan.planners.dep.problem import dep_problem
    from moeplan.planners.dep.solver import evaluate

    pb = report.problem

    def makespan(c: CostModel) -> list[float]:
        again = dep_problem(model, cluster, c, ag=pb.ag, eg=pb.eg, seq_len=report.seq_len,
                            layers=layers, batch=batch, imbalance=imbalance)  # fmt: skip
        return [evaluate(again, report.findep.config, report.findep.variant)]

    return summarize(attribute(cm, makespan), **analytic(cm))
