"""MixServe communication structure (Eq. 5, P2P of Eq. 6): which collective over which group
on which bytes, against brute-force rank arithmetic and a recording cost model; the time of
each collective is the cost model's (tests/test_strategy_one_path.py checks the real one)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.planners.strategy.comm import (
    Collectives,
    group_nodes,
    layer_comm,
    p2p_boundaries,
    spans_nodes,
)

PROFILE = settings(max_examples=examples(200))


class Recorder:
    """A cost model whose every call is recorded and returns a distinct, checkable time."""

    def __init__(self):
        self.calls: list[tuple] = []

    def collective(self, op, nbytes, group_size, nodes=1):
        self.calls.append((op, nbytes, group_size, nodes))
        return {"all_reduce": 1e3, "all_gather": 1.0, "reduce_scatter": 2.0, "all_to_all": 5.0}[
            op
        ] * (nbytes * 1e-9 + group_size + 10 * nodes)

    def p2p(self, nbytes, inter_node):
        self.calls.append(("p2p", nbytes, inter_node))
        return 1e-6 + nbytes / (25e9 if inter_node else 400e9)


def _brute_nodes(d: int, stride: int, g: int) -> int:
    return len({(i * stride) // g for i in range(d)})


@PROFILE
@given(st.integers(1, 64), st.integers(1, 16), st.integers(1, 16))
def test_group_nodes_and_spans_match_brute_force(d, stride, g):
    assert group_nodes(d, stride, g) == _brute_nodes(d, stride, g)
    assert spans_nodes(d, stride, g) == (_brute_nodes(d, stride, g) > 1)


def test_group_nodes_rejects_empty_group():
    with pytest.raises(MoeplanError, match="degree"):
        group_nodes(0, 1, 8)


@PROFILE
@given(st.integers(0, 5), st.integers(0, 3))
def test_p2p_boundaries_match_brute_force(log_pp, log_n):
    pp, n, g = 2**log_pp, 2**log_n, 8
    world = n * g
    if world % pp:
        return
    stage = world // pp
    inter = sum(1 for i in range(pp - 1) if (i * stage) // g != ((i + 1) * stage) // g)
    assert p2p_boundaries(pp, n) == (pp - 1 - inter, inter)


@PROFILE
@given(
    st.sampled_from(["all_gather", "reduce_scatter", "all_to_all"]),
    st.integers(1, 32),
    st.integers(1, 16),
    st.floats(0.0, 1e9),
)
def test_collectives_ask_the_cost_model_with_the_group_s_node_count(op, d, stride, nbytes):
    rec = Recorder()
    coll = Collectives(rec, 8)
    t = coll.time(op, nbytes, d, stride)
    if d <= 1 or nbytes <= 0:
        assert t == 0.0 and rec.calls == []
        return
    assert rec.calls == [(op, nbytes, d, _brute_nodes(d, stride, 8))]
    assert t == Recorder().collective(op, nbytes, d, _brute_nodes(d, stride, 8))
    assert coll.time(op, nbytes, d, stride) == t and len(rec.calls) == 1  # memoised


def test_all_reduce_is_the_cost_model_s_all_reduce():
    """A TP block's AR is one ``all_reduce`` call (the engine's custom AR when it has one)."""
    rec = Recorder()
    got = Collectives(rec, 8).all_reduce(4e6, 16)
    assert got == Recorder().collective("all_reduce", 4e6, 16, 2)
    assert rec.calls == [("all_reduce", 4e6, 16, 2)]


def _ar(rec: Recorder, nbytes: float, d: int, stride: int = 1) -> float:
    n = _brute_nodes(d, stride, 8)
    return 0.0 if d <= 1 else rec.collective("all_reduce", nbytes, d, n)


def _layer(rec: Recorder, k: int, attn_tp: int, attn_dp: int, moe_tp: int, moe_ep: int, **kw):
    """Eq. 5 for b = 16 requests of 1000 B each."""
    return layer_comm(
        token_bytes=1000.0,
        top_k=k,
        batch=16,
        attn_tp=attn_tp,
        attn_dp=attn_dp,
        moe_tp=moe_tp,
        moe_ep=moe_ep,
        coll=Collectives(rec, 8),
        **kw,
    )


def test_layer_comm_dp_at_least_ep_hand_computation():
    """Eq. 5, TP8+DP4 / TP8+EP4, b=16, one request = 1000 B, k=8, imbalance 1.5."""
    rec = Recorder()
    c = _layer(rec, 8, 8, 4, 8, 4, imbalance=1.5)
    x = 4 * 1000.0
    assert c.attn_allreduce == _ar(rec, x, 8)
    assert c.moe_allreduce == _ar(rec, x, 8)
    # EP group: 4 ranks 8 apart = 4 nodes; the busiest receiver gets 1.5x the mean bytes
    assert c.dispatch == c.combine == rec.collective("all_to_all", x * 8 * 1.5, 4, 4)
    assert c.total == pytest.approx(2 * c.attn_allreduce + 2 * c.dispatch)


def test_layer_comm_dp_smaller_than_ep_uses_redundancy_free_batch():
    """Eq. 5 else-branch: A2A(b/d_EP * s h k, d_DP); DP groups are strided by attn_tp."""
    rec = Recorder()
    c = _layer(rec, 2, 8, 4, 1, 32)
    size = math.ceil(16 / 32) * 1000.0 * 2
    assert c.dispatch == rec.collective("all_to_all", size, 4, 4)
    assert c.moe_allreduce == 0.0


def test_moe_allreduce_buffer_grows_when_moe_tp_spans_dp_groups():
    rec = Recorder()
    c = _layer(rec, 2, 4, 8, 8, 4)
    assert c.moe_allreduce == _ar(rec, 2 * 2 * 1000.0, 8)
    assert c.attn_allreduce == _ar(rec, 2 * 1000.0, 4)


def test_dense_layer_has_two_allreduces_and_no_all_to_all():
    rec = Recorder()
    c = _layer(rec, 2, 16, 1, 16, 1, is_moe=False)
    assert c.attn_allreduce == c.moe_allreduce == _ar(rec, 16e3, 16)
    assert c.dispatch == c.combine == 0.0
    assert not any(call[0] == "all_to_all" for call in rec.calls)
