"""CostModel formulas checked against hand computation."""

from __future__ import annotations

import pytest

from moeplan.cost import CostModel, cost_model_for, ring_time
from moeplan.cost import memory as mem
from moeplan.specs import load_cluster, load_model


def test_ring_all_reduce_by_hand():
    link = load_cluster("findep-b").intra  # 25 GB/s, 15 us
    t = ring_time("all_reduce", 8e6, 4, link)
    assert t == pytest.approx(2 * 3 * 15e-6 + 2 * 0.75 * 8e6 / 25e9)


def test_all_gather_and_all_to_all_by_hand():
    link = load_cluster("findep-b").intra
    assert ring_time("all_gather", 8e6, 8, link) == pytest.approx(7 * 15e-6 + 7 / 8 * 8e6 / 25e9)
    assert ring_time("all_to_all", 8e6, 8, link) == pytest.approx(7 * 15e-6 + 7 / 8 * 8e6 / 25e9)


def test_hierarchical_all_reduce_by_hand():
    c = load_cluster("smidt-a40")  # 4 nodes x 8, PCIe 25 GB/s 15 us, IB 1.5625 GB/s 5 us
    cm = CostModel(c)
    b = 64e6
    intra_rs = 7 * 15e-6 + 7 / 8 * b / 25e9
    inter_ar = 2 * 3 * 5e-6 + 2 * 3 / 4 * (b / 8) / 1.5625e9
    intra_ag = intra_rs
    assert cm.collective("all_reduce", b, 32, nodes=4) == pytest.approx(
        intra_rs + inter_ar + intra_ag
    )


def test_cross_node_all_to_all_is_bound_by_the_network():
    c = load_cluster("mixserve-h20")
    cm = CostModel(c)
    b = 1e8
    t = cm.collective("all_to_all", b, 16, nodes=2)
    net = 1 * c.inter.latency + 8 / 16 * b / c.inter.bw
    assert t == pytest.approx(net + c.inter.latency, rel=1e-9)


def test_measured_fit_replaces_intra_formula():
    cm = cost_model_for(load_cluster("h100-sxm-8"))
    fit = cm.profile.collective("all_reduce", 8)
    assert cm.collective("all_reduce", 2**26, 8) == pytest.approx(fit(2**26))


def test_gemm_roofline_regimes():
    cm = CostModel(load_cluster("h100-sxm-8"))  # datasheet roofline
    g = cm._roof
    big = cm.gemm(8192, 8192, 8192)
    assert big == pytest.approx(g.alpha + 2 * 8192**3 / g.flops)
    small = cm.gemm(64, 8192, 8192)  # memory bound: weight read dominates
    assert small == pytest.approx(g.alpha + 2 * (64 * 8192 * 2 + 8192 * 8192) / g.bw)


def test_expert_ffn_is_one_grouped_launch():
    cm = CostModel(load_cluster("h100-sxm-8"))
    m = load_model("deepseek-v3")
    one = cm.expert_ffn(m, 512, 1)
    many = cm.expert_ffn(m, 512, 32)
    assert many < 32 * one and many > 20 * (one - 2 * cm._roof.alpha)


def test_findep_expert_time_is_papers_eq3():
    cm = cost_model_for(load_cluster("findep-a"))
    m = load_model("deepseek-v2")
    me, local = 100, 20
    gm = cm.profile.gemm
    expected = local * (
        gm(me * 2 * m.moe_intermediate_size * m.hidden_size)
        + gm(me * m.hidden_size * m.moe_intermediate_size)
    )
    assert cm.expert_ffn(m, me, local) == pytest.approx(expected)


def test_a2e_uses_profile_coefficients_when_present():
    cm = cost_model_for(load_cluster("findep-a"))
    assert cm.a2e(1e6, 2, 6) == pytest.approx(0.01e-3 + 1.28e-6 * 1e-3 * 1e6)


def test_decode_attention_is_kv_bandwidth_bound():
    cm = CostModel(load_cluster("h100-sxm-8"))
    m = load_model("qwen3-235b-a22b")
    t = cm.attention_core(m, 64, 1, 8192, tp=4)
    kv = 64 * 8192 * m.kv_bytes_per_token_layer() / 4
    assert t == pytest.approx(cm._roof.alpha + kv / cm._roof.bw)


def test_memory_blocks():
    m = load_model("deepseek-v3")
    assert mem.expert_weight_bytes(m, 32) == pytest.approx(
        32 * m.expert_params * m.expert_weight_bytes
        + m.router_params * m.quant.router.bytes_per_weight
    )
    assert mem.kv_bytes_per_token_layer(m, tp=8) == 576 * 2  # MLA latent replicated
    q = load_model("qwen3-235b-a22b")
    assert mem.kv_bytes_per_token_layer(q, tp=8) == 2 * 4 * 128 * 2 / 4  # 4 KV heads
    assert mem.weights_floor_per_gpu(m, 8) == pytest.approx(m.weight_bytes_total() / 8)
