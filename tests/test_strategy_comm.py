"""MixServe communication formulas (Eqs. 1-3, 5, P2P of Eq. 6) against hand computations
and brute-force rank arithmetic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeplan.errors import MoeplanError
from moeplan.planners.strategy.comm import (
    Link,
    Links,
    all_gather,
    all_reduce,
    all_to_all,
    layer_comm,
    p2p_boundaries,
    pairwise_rounds,
    reduce_scatter,
    spans_nodes,
)

INTRA = Link(alpha=10e-6, beta=1 / 400e9)
INTER = Link(alpha=20e-6, beta=1 / 25e9)
LINKS = Links(intra=INTRA, inter=INTER, gpus_per_node=8)


def test_reduce_scatter_and_all_gather_match_hand_computation():
    """Eq. 1: alpha + beta * size * (d-1)/d."""
    size = 8e6
    want = 10e-6 + 8e6 * 3 / 4 / 400e9
    assert reduce_scatter(size, 4, INTRA) == pytest.approx(want, rel=1e-12)
    assert all_gather(size, 4, INTRA) == pytest.approx(want, rel=1e-12)
    assert reduce_scatter(size, 1, INTRA) == 0.0


def test_all_reduce_is_rs_plus_ag():
    """Eq. 2: AR(size, d) = RS(size, d) + AG(size, d) = 2 (alpha + beta size (d-1)/d)."""
    want = 2 * (20e-6 + 1e6 * 7 / 8 / 25e9)
    assert all_reduce(1e6, 8, INTER) == pytest.approx(want, rel=1e-12)


def test_all_to_all_inter_node_group_matches_hand_computation():
    """Eq. 3: EP4 with one rank per node: 3 inter rounds of size/4."""
    size = 4e6
    want = 3 * (20e-6 + 1e6 / 25e9)
    assert all_to_all(size, 4, 8, LINKS) == pytest.approx(want, rel=1e-12)


def test_all_to_all_mixed_group_splits_rounds_by_link():
    """EP8 at stride 4 on 8-GPU nodes: 2 members per node -> 1 intra + 6 inter rounds."""
    size = 8e6
    piece = 1e6
    want = (10e-6 + piece / 400e9) + 6 * (20e-6 + piece / 25e9)
    assert all_to_all(size, 8, 4, LINKS) == pytest.approx(want, rel=1e-12)
    assert all_to_all(size, 1, 4, LINKS) == 0.0


@given(st.integers(0, 5), st.integers(0, 5), st.integers(1, 4))
def test_pairwise_rounds_match_brute_force_xor_schedule(log_d, log_s, log_g):
    """Count, for every member, XOR-pairwise partners on its own node."""
    d, stride, g = 2**log_d, 2**log_s, 2**log_g
    members = [i * stride for i in range(d)]
    want = set()
    for i in range(d):
        same = sum(1 for j in range(1, d) if members[i] // g == members[i ^ j] // g)
        want.add((same, d - 1 - same))
    assert want == {pairwise_rounds(d, stride, g)}


@given(st.integers(1, 64), st.integers(1, 16), st.integers(1, 16))
def test_spans_nodes_matches_brute_force(d, stride, g):
    members = [i * stride for i in range(d)]
    assert spans_nodes(d, stride, g) == (len({m // g for m in members}) > 1)


@given(st.integers(0, 5), st.integers(0, 3))
def test_p2p_boundaries_match_brute_force(log_pp, log_n):
    pp, n, g = 2**log_pp, 2**log_n, 8
    world = n * g
    if world % pp:
        return
    stage = world // pp
    inter = sum(1 for i in range(pp - 1) if (i * stage) // g != ((i + 1) * stage) // g)
    assert p2p_boundaries(pp, n) == (pp - 1 - inter, inter)


def test_layer_comm_mixserve_layout_hand_computation():
    """Eq. 5, TP8+DP4 / TP8+EP4, b=16, one request = 1000 B: dp >= ep case."""
    c = layer_comm(token_bytes=1000.0, top_k=8, batch=16, attn_tp=8, attn_dp=4, moe_tp=8,
                   moe_ep=4, links=LINKS)
    x = 4 * 1000.0
    ar = 2 * (10e-6 + x * 7 / 8 / 400e9)
    a2a = 3 * (20e-6 + x * 8 / 4 / 25e9)
    assert c.attn_allreduce == pytest.approx(ar)
    assert c.moe_allreduce == pytest.approx(ar)
    assert c.dispatch == pytest.approx(a2a) and c.combine == pytest.approx(a2a)
    assert c.total == pytest.approx(2 * ar + 2 * a2a)


def test_layer_comm_dp_smaller_than_ep_uses_redundancy_free_batch():
    """Eq. 5 else-branch: A2A(b/d_EP * s h k, d_DP); DP groups are strided by attn_tp."""
    c = layer_comm(token_bytes=1000.0, top_k=2, batch=16, attn_tp=8, attn_dp=4, moe_tp=1,
                   moe_ep=32, links=LINKS)
    size = math.ceil(16 / 32) * 1000.0 * 2
    want = 3 * (20e-6 + size / 4 / 25e9)
    assert c.dispatch == pytest.approx(want)
    assert c.moe_allreduce == 0.0


def test_moe_allreduce_buffer_grows_when_moe_tp_spans_dp_groups():
    c = layer_comm(token_bytes=1000.0, top_k=2, batch=16, attn_tp=4, attn_dp=8, moe_tp=8,
                   moe_ep=4, links=LINKS)
    x = 2 * 1000.0
    assert c.moe_allreduce == pytest.approx(2 * (10e-6 + 2 * x * 7 / 8 / 400e9))


def test_negative_link_is_rejected():
    with pytest.raises(MoeplanError, match="alpha"):
        Link(alpha=-1.0, beta=0.0)


def test_full_mesh_link_follows_eq1_literally():
    """On a full mesh (HCCS) RS = alpha + beta * size / d and intra A2A rounds overlap."""
    mesh = Link(alpha=10e-6, beta=1 / 30e9, mesh=True)
    assert reduce_scatter(8e6, 8, mesh) == pytest.approx(10e-6 + 1e6 / 30e9)
    links = Links(intra=mesh, inter=INTER, gpus_per_node=8)
    piece = 1e6
    want = (10e-6 + piece / 30e9) + 6 * (20e-6 + piece / 25e9)
    assert all_to_all(8e6, 8, 4, links) == pytest.approx(want)
    assert all_to_all(8e6, 8, 1, links) == pytest.approx(10e-6 + piece / 30e9)
