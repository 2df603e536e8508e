"""MixServe's fused AR-A2A in serving: a fused layout is priced with the strategy planner's
own fused figure (Algorithms 1-2 through the shared overlap mechanism), so it is a different
deployment from its unfused twin."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.planners.strategy.space import Strategy
from moeplan.search.ranking.family_layouts import strategy_entries
from moeplan.serve.iteration.fused import fused_comm, fused_layer
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.layout import ServeLayout
from moeplan.specs import Workload, load_cluster, load_model

MODEL = load_model("qwen3-30b-a3b")


@pytest.mark.parametrize("cluster", ["mixserve-h20", "h100-sxm-8"])
@pytest.mark.parametrize(("batch", "q_len"), [(4, 4096), (64, 1), (16, 512)])
def test_fused_moe_comm_is_the_strategy_planners_figure(cluster: str, batch: int, q_len: int):
    """One MoE layer's fused communication in serving = the strategy planner's
    min(AG-Dispatch + RS-Combine overlapped, sequential) for the same tokens (its closed
    form; serving schedules the rounds with cost.overlap)."""
    cl = load_cluster(cluster, 2)
    cm = cost_model_for(cl)
    g = cl.gpus_per_node
    s = Strategy(attn_tp=g, attn_dp=2, moe_tp=g, moe_ep=2, fused=True)
    ev = StrategyEvaluator(MODEL, cl, Workload(batch=batch, isl=q_len, osl=1), cm)
    ag, rs = ev.fused_layer(s, q_len).times()
    want = min(ag.fused + rs.fused, ag.sequential + rs.sequential)
    got = fused_comm(fused_layer(cm, MODEL, 2, g, batch * q_len, MODEL.top_k))
    assert got == pytest.approx(want, rel=1e-9)


def test_fused_layout_changes_the_serving_step():
    """A long prefill step on 2 nodes: the fused layout's communication is the planner's
    figure per MoE layer and beats the unfused twin's TP all-reduce + all-to-all."""
    cl = load_cluster("h100-sxm-8", 2)
    cm = cost_model_for(cl)
    plain = ServeLayout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2)
    fused = ServeLayout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2, fused=True)
    batch = Batch(prefill=((4096, 4096),) * 4)
    a = IterationModel(MODEL, cl, cm, plain).breakdown(batch)
    b = IterationModel(MODEL, cl, cm, fused).breakdown(batch)
    assert b["comm"] < 0.5 * a["comm"] and b["period_s"] < a["period_s"]
    fig = fused_comm(fused_layer(cm, MODEL, 2, 8, batch.tokens, MODEL.top_k))
    attention = b["comm"] - MODEL.num_moe_layers * fig  # the attention all-reduces alone
    assert 0 < attention < b["comm"]
    assert a["comm"] - attention > MODEL.num_moe_layers * fig


def test_strategy_family_serves_fused_and_unfused_layouts_apart():
    """The serving layouts of MixServe's ranked strategies keep a fused strategy as a fused
    deployment next to its unfused twin (they were merged into one)."""
    cl = load_cluster("mixserve-h20")
    ev = StrategyEvaluator(MODEL, cl, Workload(batch=16, isl=2048, osl=128), cost_model_for(cl))
    ranked = [
        ev(Strategy(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2, fused=f)) for f in (True, False)
    ]
    c = SimpleNamespace(detail=SimpleNamespace(strategies=ranked))
    layouts = [e.layout for e in strategy_entries(c, MODEL, cl)]  # type: ignore[arg-type]
    assert [lay.fused for lay in layouts] == [True, False]
    assert layouts[0].label == "attn TP8xDP2 / MoE TP8xEP2 fused"


def test_fused_layout_needs_a_node_per_ep_rank():
    cl = load_cluster("h100-sxm-8", 2)
    with pytest.raises(MoeplanError, match="fused"):
        ServeLayout(attn_tp=8, attn_dp=1, moe_tp=8, moe_ep=1, fused=True)
    with pytest.raises(MoeplanError, match="layout.fused needs moe_tp"):
        ServeLayout(attn_tp=4, attn_dp=4, moe_tp=4, moe_ep=4, fused=True).validate(MODEL, cl)


def test_a_fused_strategy_plan_is_served_fused():
    """serve-sim --plan of a fused MixServe plan simulates the fused layout."""
    from moeplan.cli.serve import layout_from_plan
    from moeplan.planners.strategy.analyzer import to_plan

    cl = load_cluster("mixserve-h20")
    ev = StrategyEvaluator(MODEL, cl, Workload(batch=16, isl=2048, osl=128), cost_model_for(cl))
    r = ev(Strategy(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2, fused=True))
    lay = layout_from_plan(to_plan(r, model=MODEL.name, cluster=cl.name))
    assert lay == ServeLayout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2, fused=True)
