"""What a one-stage SMIDT plan really is, and how to launch it.

A SMIDT plan with ``pp = 1`` whose modules all take the same choice per kind — attention (and
dense MLP) ``(t_a, 1, d_a)``, MoE ``(t_m, e_m, d_m)`` — is no pipeline: it is ``d_m``
replicas of a colocated deployment with attention TP ``t_a`` × DP ``d_a / d_m`` and MoE
TP ``t_m`` × EP ``e_m`` (DPMoE ``d_m`` = independent replicas of the experts). With
``d_m = 1`` that is a MixServe strategy layout; with ``t·e = 1`` it is pure data parallelism.
Engines launch it as ``d_m`` instances (or ``--dp-size``) of that layout, so the plan is
launchable as a colocated plan; :func:`colocated_layout` gives the layout (the strategy
family's ``plan.json`` layout plus ``replicas``) and :func:`describe` its label.
Non-uniform choices or ``d_a`` not a multiple of ``d_m`` have no such layout (None).
"""

from __future__ import annotations

from typing import Any

from moeplan.planners.layout import Layout
from moeplan.planners.pipeline.cost import Choice

#: a :class:`~moeplan.planners.pipeline.stages.PipelinePlan`, named in annotations only
#: (stages imports this module, so importing it here would close a circle)
PipelinePlan = Any


def _uniform(plan: PipelinePlan) -> dict[str, Choice] | None:
    """The one choice per module kind (``attn`` covers dense MLPs), else None."""
    if plan.pp != 1:
        return None
    seen: dict[str, Choice] = {}
    for module, choice in plan.stages[0].modules:
        kind = "moe" if module.kind == "moe" else "attn"
        if seen.setdefault(kind, choice) != choice:
            return None
    return seen


def colocated_layout(plan: PipelinePlan) -> dict[str, Any] | None:
    """``{"world_size", "replicas", "attn": {tp, dp}, "moe": {tp, ep}, "pp": 1}`` or None.

    ``attn``/``moe`` describe one replica of ``world_size / replicas`` GPUs; the strategy
    family's layout (``moeplan.planners.strategy``) is the case ``replicas = 1``.
    """
    kinds = _uniform(plan)
    if kinds is None:
        return None
    attn = kinds.get("attn", Choice(tp=1, ep=1, dpmoe=plan.r))
    moe = kinds.get("moe", Choice(tp=attn.tp, ep=1, dpmoe=attn.dpmoe))
    if attn.dpmoe % moe.dpmoe:
        return None
    return {
        "world_size": plan.r,
        "replicas": moe.dpmoe,
        "attn": {"tp": attn.tp, "dp": attn.dpmoe // moe.dpmoe},
        "moe": {"tp": moe.tp, "ep": moe.ep},
        "pp": 1,
    }


def describe(layout: dict[str, Any]) -> str:
    """The layout's one label (:attr:`moeplan.planners.layout.Layout.label`), e.g.
    ``attn TP1xDP1 / MoE TP1xEP1 x8 replicas`` for eight one-GPU replicas."""
    return Layout.from_plan_layout(layout).label
