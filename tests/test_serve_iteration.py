"""Iteration time of a layout: pipeline period vs the task simulator, composition identities."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.cost import CostModel
from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.serve import Batch, IterationModel, iteration_time, kv_capacity_tokens
from moeplan.serve.iteration.model import busiest_part, pipeline_period
from moeplan.serve.layout import stage_layers, stage_weight_bytes
from moeplan.sim import TaskGraph, simulate_list
from moeplan.specs import RoutingProfile, load_cluster, load_model

MODEL = load_model("qwen3-30b-a3b")
CLUSTER = load_cluster("h100-sxm-8")
ROOF = CostModel(CLUSTER)  # datasheet roofline: ring formulas for every collective


def _flow_shop_period(stage_s, p2p_s, m, rounds=8):
    """Period of micro-batch 0 in a cyclic flow shop built on moeplan.sim (list scheduling)."""
    g = TaskGraph()
    last = [None] * m
    ends = []
    for _ in range(rounds):
        for b in range(m):
            prev = [] if last[b] is None else [last[b]]
            for j, s in enumerate(stage_s):
                prev = [g.add(f"S{j}", f"stage{j}", s, prev)]
                if j < len(p2p_s):
                    prev = [g.add(f"P{j}", f"link{j}", p2p_s[j], prev)]
            last[b] = prev[0]
            if b == 0:
                ends.append(prev[0])
    sched = simulate_list(g).check()
    return float(sched.end[ends[-1]] - sched.end[ends[-2]])


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    stages=st.lists(st.floats(0.1, 5.0), min_size=1, max_size=4),
    m=st.integers(1, 5),
    p2p=st.floats(0.0, 1.0),
)
def test_pipeline_period_matches_task_simulation(stages, m, p2p):
    sends = [p2p] * (len(stages) - 1)
    assert pipeline_period(stages, sends, m) == pytest.approx(
        _flow_shop_period(stages, sends, m), rel=1e-9
    )


def test_pp_with_one_micro_batch_is_the_stage_sum_plus_p2p():
    """Same layers on the same stage shape: pp=2, one micro-batch = pp=1 time + one send."""
    one = Layout(attn_tp=2, moe_ep=2)
    two = Layout(attn_tp=2, moe_ep=2, pp=2, micro_batches=1)
    b = Batch(48, 1500, ((300, 900),))
    t1 = iteration_time(MODEL, CLUSTER, ROOF, one, b)
    t2 = iteration_time(MODEL, CLUSTER, ROOF, two, b)
    send = ROOF.p2p(b.tokens / 2 * MODEL.hidden_bytes, inter_node=False)
    assert t2 == pytest.approx(t1 + send, rel=1e-12)


def test_pure_tp_communication_is_two_all_reduces_per_layer():
    """Scattered layout, TP everywhere: AG + RS per block = Megatron's 2 all-reduces."""
    lay = Layout(attn_tp=4, moe_tp=4)
    b = Batch(64, 800, ())
    bd = IterationModel(MODEL, CLUSTER, ROOF, lay).breakdown(b)
    ar = ROOF.collective("all_reduce", 64 * MODEL.hidden_bytes, 4, 1)
    assert bd["comm"] == pytest.approx(2 * MODEL.num_layers * ar, rel=1e-9)


def test_attention_dp_splits_sequences():
    """Attention on DP2 with 2n sequences costs attention on one GPU with n."""
    dp = IterationModel(MODEL, CLUSTER, ROOF, Layout(attn_dp=2, moe_ep=2))
    single = IterationModel(MODEL, CLUSTER, ROOF, Layout())
    a = dp.breakdown(Batch(64, 1000, ()))["attention"]
    assert a == pytest.approx(single.breakdown(Batch(32, 1000, ()))["attention"], rel=1e-12)


def test_expert_imbalance_slows_the_moe_block():
    n = MODEL.num_experts
    skew = tuple(4.0 if e < n // 4 else 1.0 for e in range(n))
    route = RoutingProfile(top_k=MODEL.top_k, expert_load=(skew,) * MODEL.num_moe_layers)
    lay = Layout(attn_dp=4, moe_ep=4)
    flat = IterationModel(MODEL, CLUSTER, ROOF, lay).breakdown(Batch(256, 500, ()))
    hot = IterationModel(MODEL, CLUSTER, ROOF, lay, routing=route).breakdown(Batch(256, 500, ()))
    assert hot["moe"] > flat["moe"] and hot["comm"] > flat["comm"]
    assert hot["attention"] == flat["attention"]


@settings(derandomize=True, deadline=None, max_examples=examples(50))
@given(
    dec=st.integers(0, 30), chunks=st.lists(st.integers(1, 50), max_size=6), parts=st.integers(1, 4)
)
def test_busiest_part_is_lpt_within_four_thirds_of_optimal(dec, chunks, parts):
    b = Batch(dec, 100, tuple((q, q) for q in chunks))
    got = busiest_part(b, parts)
    assert got.decode == -(-dec // parts)
    loads = []
    for assign in itertools.product(range(parts), repeat=len(chunks)):
        load = [0] * parts
        for q, j in zip(chunks, assign, strict=True):
            load[j] += q
        loads.append(max(load))
    best = min(loads) if chunks else 0
    pre = got.tokens - got.decode
    assert best <= pre <= 4 / 3 * best + 1e-9 or (parts == 1 and pre == sum(chunks))


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    n=st.integers(1, 200),
    ctx=st.integers(1, 20_000),
    dn=st.integers(1, 64),
    dc=st.integers(1, 4096),
)
def test_iteration_time_grows_with_batch_and_context(n, ctx, dn, dc):
    it = IterationModel(MODEL, CLUSTER, ROOF, Layout(attn_tp=2, moe_ep=2))
    t = it(Batch(n, ctx, ()))
    assert it(Batch(n + dn, ctx, ())) >= t and it(Batch(n, ctx + dc, ())) >= t


def test_kv_capacity_fills_memory_exactly():
    """capacity tokens fit next to weights, activations, buffers, reserve; one more does not."""
    lay = Layout(attn_tp=2, attn_dp=2, moe_ep=4)
    cap = kv_capacity_tokens(MODEL, CLUSTER, lay, 8192)
    layers = stage_layers(MODEL, 1)[0]
    fixed = (
        stage_weight_bytes(MODEL, lay, layers, True, True)
        + mem.activation_bytes(MODEL, 4096, 2)
        + mem.a2a_buffer_bytes(MODEL, 2048, 8)
        + mem.RESERVED_BYTES
    )
    per = mem.kv_bytes_per_token_layer(MODEL, 2) * MODEL.num_layers
    assert fixed + cap * per <= CLUSTER.gpu.mem_bytes < fixed + (cap + 1) * per


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        (dict(attn_tp=3, moe_tp=3), "num_attention_heads"),
        (dict(attn_dp=8, moe_ep=7, moe_tp=1), "moe_tp\\*moe_ep"),
        (dict(attn_dp=16, moe_ep=16), "cluster GPUs"),
        (dict(pp=0), "layout.pp"),
    ],
)
def test_bad_layouts_name_the_rule(layout, match):
    with pytest.raises(MoeplanError, match=match):
        Layout(**layout).validate(MODEL, CLUSTER)


def test_weights_that_do_not_fit_say_how_much_is_needed():
    big = load_model("deepseek-v3")
    with pytest.raises(MoeplanError, match="GiB per GPU before any KV cache"):
        kv_capacity_tokens(big, CLUSTER, Layout(attn_tp=8, moe_tp=8), 8192)
