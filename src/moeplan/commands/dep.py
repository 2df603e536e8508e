"""``moeplan dep``'s files: the FinDEP plan, and its schedule and PPPipe's over the first MoE
layers as a Chrome trace and a Gantt chart (:func:`moeplan.planners.dep.plan_dep` plans).
"""

from __future__ import annotations

import json
from typing import Any

from moeplan.commands.pricing import with_pricing
from moeplan.planners import dep
from moeplan.sim import chrome_trace, gantt_html


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
