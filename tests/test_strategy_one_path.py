"""One cost path: MixServe prices its collectives through the
cost model, exactly as the serving iteration model does.

Oracles:
- (a) for every strategy of the grammar on several clusters (multi-node H100 with its measured
  collective fits, with and without the SGLang kernel database; Ascend 910B's full mesh;
  FinDEP's testbeds) the planner's per-layer communication equals an independent
  recomputation written here from ``CostModel.collective`` / ``p2p`` calls, Eq. 5 and the
  closed form of Algs. 1-2;
- (b) for layouts where MixServe's Eq. 5 and the serving model describe the same traffic
  (``attn_dp == moe_ep``, ``moe_tp >= attn_tp``), the strategy planner's communication of a
  whole prefill or decode step equals ``moeplan.serve.iteration.model``'s, to rounding;
- a counting cost model: every second of MixServe communication comes from a cost-model call;
- (c) a TP block's all-reduce is the cost model's ``all_reduce`` in MixServe, the serving
  model and SMIDT alike: with an engine inside a node it is the engine's custom all-reduce,
  looked up here directly in the kernel database; without one (α-β), Eq. 2's RS + AG.
"""

from __future__ import annotations

import math

import pytest

from doc_figures import pinned
from moeplan.cost import CostModel, cost_model_for
from moeplan.cost.kerneldb import device_for
from moeplan.kernel_tables import kernel_db
from moeplan.planners.layout import Layout
from moeplan.planners.pipeline.cost import Choice, StageContext, cost_model_evaluator, modules_of
from moeplan.planners.strategy.analyzer import zipf_routing
from moeplan.planners.strategy.comm import Collectives, layer_comm
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.planners.strategy.space import enumerate_strategies
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.specs import RoutingProfile, Workload, load_cluster, load_model

CLUSTERS = [  # (preset, nodes, engine)
    ("h100-sxm-8", 2, None),
    ("h100-sxm-8", 4, "sglang"),
    ("mixserve-910b", None, None),
    ("findep-a", None, None),
    ("findep-d", None, None),
]
W = Workload(batch=16, isl=512, osl=64)


def _cost(name: str, nodes: int | None, engine: str | None):
    cl = load_cluster(name, nodes)
    cm = cost_model_for(cl)
    return cl, (CostModel(cl, cm.profile, engine=engine, kernels=kernel_db()) if engine else cm)


def _nodes(d: int, stride: int, g: int) -> int:
    return len({(i * stride) // g for i in range(d)})


def _expected_layer_comm(cm, cl, model, w, s: Layout, q: int, k: float, imb: float):
    """(MoE layer, dense layer) seconds from cost-model calls, written from Eq. 5 / Algs. 1-2."""
    g, b, hb = cl.gpus_per_node, w.batch, model.hidden_bytes

    def c(op: str, nbytes: float, d: int, stride: int = 1) -> float:
        return 0.0 if d <= 1 else cm.collective(op, nbytes, d, _nodes(d, stride, g))

    def ar(nbytes: float, d: int) -> float:  # a TP block's all-reduce: the cost model's
        return c("all_reduce", nbytes, d)

    x = math.ceil(b / s.attn_dp) * q * hb
    attn = ar(x, s.attn_tp)
    if not s.fused:
        moe_ar = ar(x * max(1, s.moe_tp // s.attn_tp), s.moe_tp)
        if s.attn_dp >= s.moe_ep:
            a2a = c("all_to_all", x * k * imb, s.moe_ep, s.moe_tp)
        else:
            a2a = c("all_to_all", math.ceil(b / s.moe_ep) * q * hb * k * imb, s.attn_dp, s.attn_tp)
        return attn + moe_ar + 2 * a2a, 2 * attn
    n, m = s.moe_ep, s.moe_tp  # fused: MoE TP = one node, EP = one rank per node
    xf = math.ceil(b / n) * q * hb
    a = xf * k * imb / (n * m)
    t_x = cm.p2p(a, True) if n > 1 else 0.0
    t_ag, t_rs, t_out = (
        c("all_gather", a * m, m),
        c("reduce_scatter", a * m, m),
        c("all_gather", xf, m),
    )
    fused = max(n * t_ag, (n - 1) * t_x + t_ag) + max(n * t_rs, (n - 1) * t_x + t_rs) + t_out
    seq = 2 * c("all_to_all", a * n, n, m) + c("all_gather", a * m * n, m)
    seq += c("reduce_scatter", a * m * n, m) + t_out
    return attn + min(fused, seq), 2 * attn


@pytest.mark.parametrize(("name", "nodes", "engine"), CLUSTERS)
def test_layer_comm_equals_recomputation_from_cost_model_calls(name, nodes, engine):
    cl, cm = _cost(name, nodes, engine)
    model = load_model("qwen3-235b-a22b" if name != "findep-a" else "qwen3-30b-a3b")
    w = W
    if name == "mixserve-910b":  # skewed routing: the busiest EP rank's bytes
        w = Workload(batch=16, isl=512, osl=64, routing=zipf_routing(model.num_experts, 8, 0.8))
    ev = StrategyEvaluator(model, cl, w, cm)
    k = w.routing_for(model.top_k).mean_over_layers()
    checked = 0
    for s in enumerate_strategies(cl.num_nodes, cl.gpus_per_node):
        if ev(s) is None:
            continue
        for q in (w.isl, 1):
            got = ev.layer_comm(s, q)
            want = _expected_layer_comm(cm, cl, model, w, s, q, k, ev.imbalance(s.moe_ep))
            engine = ev._engine_ep(s, q)
            if engine is not None:  # the engine's EP collectives replace Eq. 5's MoE part
                x = math.ceil(w.batch / s.attn_dp) * q * model.hidden_bytes
                attn = (
                    0.0
                    if s.attn_tp <= 1
                    else cm.collective(
                        "all_reduce", x, s.attn_tp, _nodes(s.attn_tp, 1, cl.gpus_per_node)
                    )
                )
                want = (attn + engine, want[1])  # fmt: skip
            assert got[:2] == pytest.approx(want, rel=1e-12, abs=1e-15), (s.label, q)
        checked += 1
    assert checked >= 10


SAME_TRAFFIC = [  # (attn_tp, attn_dp, moe_tp, moe_ep): Eq. 5 and the serving model coincide
    (8, 2, 8, 2),
    (1, 16, 1, 16),
    (2, 8, 2, 8),
    (4, 4, 4, 4),
    (16, 1, 16, 1),
    (8, 2, 16, 1),
]


@pytest.mark.parametrize(("name", "nodes", "engine"), [CLUSTERS[0], CLUSTERS[1], CLUSTERS[2]])
@pytest.mark.parametrize("model_name", ["qwen3-235b-a22b", "deepseek-v3"])
def test_strategy_and_serving_model_price_the_same_layout_identically(
    name, nodes, engine, model_name
):
    """Cross-family: one step's TP collectives and EP all-to-all, prefill and decode."""
    cl, cm = _cost(name, nodes or 2, engine)
    model = load_model(model_name)
    ev = StrategyEvaluator(model, cl, W, cm)
    for at, ad, mt, me in SAME_TRAFFIC:
        s = Layout(attn_tp=at, attn_dp=ad, moe_tp=mt, moe_ep=me)
        if ev(s) is None:
            continue
        serve = IterationModel(model, cl, cm, Layout(attn_tp=at, attn_dp=ad, moe_tp=mt, moe_ep=me))
        b, isl, ctx = W.batch, W.isl, W.isl + W.osl // 2
        prefill = serve.breakdown(Batch(prefill=((isl, isl),) * b))["comm"]
        decode = serve.breakdown(Batch(decode=b, decode_ctx=ctx))["comm"]
        assert ev.phase_time(s, isl, isl).comm_s == pytest.approx(prefill, rel=1e-9), s.label
        assert ev.phase_time(s, 1, ctx).comm_s == pytest.approx(decode, rel=1e-9), s.label
        assert prefill > 0


class Counting:
    """Compute costs nothing; every collective or P2P call costs exactly one second."""

    def attention_layer(self, *a, **k):
        return 0.0

    expert_ffn = shared_expert = dense_mlp = attention_layer

    def gemm(self, m, n, k):
        return 0.0

    def collective(self, op, nbytes, group_size, nodes=1):
        return 1.0

    def p2p(self, nbytes, inter_node):
        return 1.0


@pytest.mark.parametrize(
    ("strategy", "moe_calls"),
    [
        # attn AR, MoE AR, dispatch + combine
        (Layout(attn_tp=8, attn_dp=4, moe_tp=8, moe_ep=4), 4),
        # attn AR, pure EP: dispatch + combine only
        (Layout(attn_tp=8, attn_dp=4, moe_tp=1, moe_ep=32), 3),
        # fused, 4 nodes: attn AR + min(fused 4n+2 rounds, sequential RS/AG/A2A 5) = 1 + 5
        (Layout(attn_tp=8, attn_dp=4, moe_tp=8, moe_ep=4, fused=True), 6),
        # pure DP attention + EP: no TP collective at all
        (Layout(attn_tp=1, attn_dp=32, moe_tp=1, moe_ep=32), 2),
    ],
)
def test_every_communication_second_is_a_cost_model_call(strategy, moe_calls):
    model, cl = load_model("qwen3-235b-a22b"), load_cluster("mixserve-910b")
    ev = StrategyEvaluator(model, cl, W, Counting())
    moe, dense, _ = ev.layer_comm(strategy, W.isl)
    assert moe == moe_calls
    assert ev.phase_time(strategy, W.isl, W.isl).comm_s == model.num_layers * moe_calls


@pytest.mark.parametrize("q", [512, 1])
def test_tp_all_reduce_is_the_engine_custom_all_reduce_in_every_family(q):
    """TP8 on one H100 node with SGLang's kernels, prefill (512 tokens) and decode: MixServe's
    attention AR, the serving model's and SMIDT's TP block all charge the custom all-reduce
    table's prediction for the block's bytes, not RS + AG."""
    cl = load_cluster("h100-sxm-8", 1)
    cm = CostModel(cl, cost_model_for(cl).profile, engine="sglang", kernels=kernel_db())
    model, b = load_model("qwen3-30b-a3b"), 4
    nbytes = b * q * model.hidden_bytes
    table = kernel_db().predict(
        "allreduce", device_for(cl), "sglang", message_size=nbytes / 2, num_gpus=8
    )
    rs_ag = cm.collective("reduce_scatter", nbytes, 8) + cm.collective("all_gather", nbytes, 8)
    assert abs(table.seconds / rs_ag - 1) > 0.05  # the two pricings differ: the test can fail
    c = layer_comm(
        token_bytes=q * model.hidden_bytes,
        top_k=model.top_k,
        batch=b,
        attn_tp=8,
        attn_dp=1,
        moe_tp=8,
        moe_ep=1,
        coll=Collectives(cm, 8),
    )
    assert c.attn_allreduce == c.moe_allreduce == pytest.approx(table.seconds, rel=1e-12)
    serve = IterationModel(model, cl, cm, Layout(attn_tp=8, moe_tp=8))
    batch = Batch(prefill=((q, q),) * b) if q > 1 else Batch(decode=b, decode_ctx=600)
    step = serve.breakdown(batch)["comm"]
    assert step == pytest.approx(2 * model.num_layers * table.seconds, rel=1e-12)
    phase = "prefill" if q > 1 else "decode"
    w = Workload(phase=phase, batch=b, isl=q if q > 1 else 600, osl=1 if q > 1 else 2)
    ctx = StageContext(
        model=model,
        workload=w,
        routing=RoutingProfile.static(model.top_k),
        pp=1,
        r=8,
        nvlink_domain=8,
    )
    attn = modules_of(model, ctx.routing)[0]
    comm = cost_model_evaluator(cm)(attn, Choice(tp=8, ep=1, dpmoe=1), ctx).comm_s
    reps = 1 if q > 1 else w.osl
    assert comm == pytest.approx(reps * table.seconds, rel=1e-12)


@pytest.mark.parametrize(("attn_tp", "nodes"), [(8, 1), (16, 2), (32, 4)])
def test_without_an_engine_the_tp_all_reduce_is_eq2_rs_plus_ag(attn_tp, nodes):
    """Eq. 2 holds for the α-β collectives inside a node and hierarchically across nodes."""
    cl = load_cluster("h100-sxm-8", 4)
    cm = CostModel(cl)
    x = 16 * 512 * load_model("deepseek-v3").hidden_bytes
    got = Collectives(cm, 8).all_reduce(x, attn_tp)
    want = cm.collective("reduce_scatter", x, attn_tp, nodes)
    want += cm.collective("all_gather", x, attn_tp, nodes)
    assert got == pytest.approx(want, rel=1e-12)


def test_the_docs_figures_are_these_clusters():
    """strategy.md's figure (docs/benchmarks/data/strategy-one-path.json): the clusters the
    per-layer communication is recomputed on."""
    assert pinned("strategy-one-path") == {"clusters": len(CLUSTERS)}
