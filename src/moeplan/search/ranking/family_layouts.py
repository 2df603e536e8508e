"""Step 1 of the serving ranking (:mod:`moeplan.search.ranking.rank`): the serving layouts of each
planned family's result.

MixServe: the distinct ``(attn TP×DP, MoE TP×EP, PP, fused)`` layouts of its ranked
strategies, in its own order, every one of them (a fused strategy is its own deployment: the
serving iteration model prices its overlapped RS-Combine/AG-Dispatch,
:mod:`moeplan.serve.iteration.fused`). SMIDT: its chosen PP degree with each stage's dominant module
layout — SMIDT's per-module ``(t, e, d)`` choices are summarised by the most common attention
and MoE choice over all stages, DPMoE replication ``d`` read both as ``d`` replicas and as one
EP group ``e·d`` wide (:func:`pipeline_entries`). FinDEP's plan is a prefill batch schedule of
disaggregated attention/expert GPUs: not a colocated layout, so it is listed as not served
here (its schedule is ranked as the ``afd`` family by :mod:`moeplan.search.disagg.rank`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from moeplan.planners.families import FAMILY
from moeplan.planners.rank import Candidate, PlanResult
from moeplan.search.ranking.entries import Entry
from moeplan.serve.layout import ServeLayout
from moeplan.specs import ClusterSpec, ModelSpec


def strategy_entries(c: Candidate, model: ModelSpec, cluster: ClusterSpec) -> list[Entry]:
    """Distinct layouts of MixServe's ranked strategies (its own order): proposals into the
    deployment space (:mod:`moeplan.search.colocated.rank`), none dropped."""
    from moeplan.planners import strategy as st

    out, seen = [], set()
    for r in c.detail.strategies:
        s = r.strategy
        key = (s.attn_tp, s.attn_dp, s.moe_tp, s.moe_ep, s.pp, s.fused)
        if key in seen:
            continue
        seen.add(key)
        plan = st.to_plan(r, model=model.name, cluster=cluster.name)
        out.append(Entry(family="strategy", label=s.label, layout=s, plan=plan))
    return out


def pipeline_entries(c: Candidate) -> list[Entry]:
    """SMIDT's plan as ``pp`` stages with the dominant attention and MoE choice.

    Two readings of DPMoE replication ``d`` of the dominant MoE choice ``(t, e, d)``: as ``d``
    independent replicas (attention DP ``d_a / d`` each; how engines launch it, see
    :mod:`moeplan.planners.pipeline.launchable`) when ``d`` divides the attention DP, and as
    one EP group ``e·d`` wide. Both are estimated; pruning keeps the better (a replica must
    hold all the weights on fewer GPUs, so it may not fit).
    """
    la = c.launchable_as
    if la is not None:  # a one-stage plan that is a colocated layout (pipeline/launchable.py)
        lay = ServeLayout(
            attn_tp=la["attn"]["tp"],
            attn_dp=la["attn"]["dp"],
            moe_tp=la["moe"]["tp"],
            moe_ep=la["moe"]["ep"],
            pp=la.get("pp", 1),
        )
        return [
            Entry(
                family="pipeline",
                label=c.label,
                layout=lay,
                plan=c.plan,
                replicas=int(la.get("replicas", 1)),
            )
        ]
    p = c.detail.plan
    attn: Counter[tuple[int, int]] = Counter()
    moe: Counter[tuple[int, int, int]] = Counter()
    for stage in p.stages:
        for ref, choice in stage.modules:
            if ref.kind == "attn":
                attn[(choice.tp, choice.dpmoe)] += 1
            elif ref.kind == "moe":
                moe[(choice.tp, choice.ep, choice.dpmoe)] += 1
    a_tp, a_dp = attn.most_common(1)[0][0] if attn else (p.r, 1)
    m_tp, m_ep, d = moe.most_common(1)[0][0] if moe else (a_tp, a_dp, 1)
    out = []
    if d > 1 and a_dp % d == 0:
        rep = ServeLayout(attn_tp=a_tp, attn_dp=a_dp // d, moe_tp=m_tp, moe_ep=m_ep, pp=p.pp)
        out.append(Entry(family="pipeline", label=c.label, layout=rep, plan=c.plan, replicas=d))
    lay = ServeLayout(attn_tp=a_tp, attn_dp=a_dp, moe_tp=m_tp, moe_ep=m_ep * d, pp=p.pp)
    out.append(Entry(family="pipeline", label=c.label, layout=lay, plan=c.plan))
    return out


def entries_of(result: PlanResult) -> tuple[list[Entry], dict[str, str]]:
    """Serving layouts of every planned family, and why a family is not served."""
    entries: list[Entry] = []
    not_served: dict[str, str] = {}
    for c in result.candidates:
        make = ENTRIES.get(c.family)
        if make is None:
            not_served[c.family] = FAMILY[c.family].not_served
        else:
            entries += make(c, result.model, result.cluster)
    return entries, not_served


#: The serving entries of each family served as one engine instance (replicas of it), keyed
#: by family name (:data:`moeplan.planners.families.INSTANCE_SERVED`).
ENTRIES: dict[str, Callable[[Candidate, ModelSpec, ClusterSpec], list[Entry]]] = {
    "strategy": strategy_entries,
    "pipeline": lambda c, model, cluster: pipeline_entries(c),
}
