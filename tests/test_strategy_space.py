"""MixServe strategy grammar (§III-B1): enumeration against brute force, baselines."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.space import (
    degrees,
    enumerate_strategies,
    fusable,
    mixserve_default,
    named_baselines,
    stage_shape,
)


@given(st.integers(1, 8), st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_enumeration_equals_brute_force(nodes, g, any_div):
    world = nodes * g
    ok = (lambda d: True) if any_div else (lambda d: d & (d - 1) == 0)
    want = set()
    for pp, at, mt in itertools.product(range(1, world + 1), repeat=3):
        if not (ok(pp) and ok(at) and ok(mt)) or world % pp:
            continue
        stage = world // pp
        if stage % at or stage % mt:
            continue
        s = Layout(attn_tp=at, attn_dp=stage // at, moe_tp=mt, moe_ep=stage // mt, pp=pp)
        want.add(s.key())
        nodes_s = -(-stage // g)
        if nodes_s > 1 and mt == min(stage, g) and stage // mt == nodes_s and mt > 1:
            want.add(s.key()[:-1] + (True,))
    got = [s.key() for s in enumerate_strategies(nodes, g, any_div)]
    assert len(got) == len(set(got))
    assert set(got) == want


def test_degrees_powers_of_two_and_divisors():
    assert degrees(24) == [1, 2, 4, 8]
    assert degrees(12, any_divisor=True) == [1, 2, 3, 4, 6, 12]


def test_stage_shape():
    assert stage_shape(4, 8, 2) == (2, 8)
    assert stage_shape(4, 8, 8) == (1, 4)


def test_mixserve_default_is_fusable_and_in_space():
    s = mixserve_default(4, 8)
    assert s.fused and fusable(s, 4, 8)
    assert s in enumerate_strategies(4, 8)


def test_named_baselines_in_grammar():
    b = named_baselines(4, 8)
    space = set(enumerate_strategies(4, 8))
    assert set(b) == {"vllm-tp-pp", "vllm-dp-ep", "tutel-tp-ep", "deepseek-v3"}
    assert all(s in space for s in b.values())
    assert b["deepseek-v3"].plan_layout() == {
        "world_size": 32,
        "attn": {"tp": 4, "dp": 8},
        "moe": {"tp": 1, "ep": 32},
        "pp": 1,
    }
    assert "deepseek-v3" not in named_baselines(1, 2)


def test_inconsistent_strategy_is_rejected():
    with pytest.raises(MoeplanError, match="moe.tp"):
        Layout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=4)
