"""Experts a small batch hits (cost/kerneldb/load.experts_hit, cost/wideep.rank_hit,
CostModel.expert_ffn's analytic path) against a Monte-Carlo of the routing, and the decode
step's price non-decreasing in the batch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.cost import CostModel
from moeplan.cost.kerneldb.load import experts_hit
from moeplan.cost.wideep import rank_hit
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")
DRAWS = 400
#: the kernel tables' residual field wiggles by a few hundredths of a percent between
#: neighbouring token counts once every expert is hit; a fall larger than this is a fault
WIGGLE = 2e-3


def _monte_carlo(rng: np.random.Generator, tokens: int, experts: int, k: int) -> np.ndarray:
    """Distinct experts hit per draw: every token picks ``k`` distinct experts at random."""
    keys = rng.random((DRAWS, tokens, experts))
    chosen = np.argsort(keys, axis=2)[:, :, :k]  # k distinct experts per token, uniform
    picked = np.zeros((DRAWS, experts), bool)
    for t in range(tokens):
        np.put_along_axis(picked, chosen[:, t, :], True, 1)
    return picked.sum(axis=1)


@settings(max_examples=25, deadline=None)
@given(
    experts=st.integers(2, 48),
    k_frac=st.floats(0.0, 1.0),
    tokens=st.integers(1, 40),
    seed=st.integers(0, 2**31),
)
def test_closed_form_matches_monte_carlo_of_balanced_routing(experts, k_frac, tokens, seed):
    k = 1 + int(k_frac * (min(8, experts) - 1))
    counts = _monte_carlo(np.random.default_rng(seed), tokens, experts, k)
    want = experts_hit(tokens, np.full(experts, k / experts))
    assert want == pytest.approx(experts * (1 - (1 - k / experts) ** tokens), rel=1e-12)
    sem = max(counts.std(ddof=1), 0.5) / np.sqrt(DRAWS)
    assert abs(counts.mean() - want) < 5 * sem + 1e-9, (counts.mean(), want)


@settings(max_examples=20, deadline=None)
@given(experts=st.integers(2, 32), tokens=st.integers(1, 30), seed=st.integers(0, 2**31))
def test_per_expert_loads_match_monte_carlo(experts, tokens, seed):
    """Uneven per-expert shares (one expert per token, Dirichlet loads): ``sum 1-(1-p)^T``."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(experts))
    draws = rng.choice(experts, size=(DRAWS, tokens), p=p)
    counts = np.array([len(np.unique(d)) for d in draws])
    want = experts_hit(tokens, p)
    sem = max(counts.std(ddof=1), 0.5) / np.sqrt(DRAWS)
    assert abs(counts.mean() - want) < 5 * sem + 1e-9


def test_rank_hit_bounds_and_limits():
    # one token on EP8 of DeepSeek-V3: 8 copies on 256 experts, a rank expects 8/8 = 1 pair
    assert rank_hit(8, 8, 256, 8) == pytest.approx(32 * (1 - (1 - 8 / 256) ** 8), rel=1e-12)
    assert rank_hit(1e6, 8, 256, 8) == pytest.approx(32)
    for t in (1, 3, 10, 100):
        assert rank_hit(t, 8, 256, 8) <= min(32, t * 8 / 8 * 8)


@pytest.fixture(scope="module")
def h100():
    c = load_cluster("h100-sxm-8", 1)
    return c, engine_cost_model(c, engine="sglang")


def test_wide_ep_gemm_non_decreasing_in_tokens(h100):
    _, cm = h100
    prices = [cm.wide_ep.moe(DSV3, t, 8, phase="generation").gemm for t in range(1, 65)]
    assert all(b >= a * (1 - WIGGLE) for a, b in zip(prices, prices[1:], strict=False)), prices
    # one token per rank reads far fewer than the rank's 32 experts
    assert prices[0] < 0.6 * prices[-1]


def test_analytic_expert_ffn_reads_the_experts_hit():
    """Without tables the roofline reads the weights of the experts hit: one token on 32
    local experts of 256 (k = 8) reads 1 - (1 - 8/256)^(32) of them, i.e. about 64 %."""
    cm = CostModel(load_cluster("h100-sxm-8", 1))
    one = cm.expert_ffn(DSV3, 1 / 32, 32)  # one token entering EP8: 8 copies / 8 ranks
    many = cm.expert_ffn(DSV3, 4.0, 32)
    assert one < many
    prices = [cm.expert_ffn(DSV3, t / 32, 32) for t in range(1, 200)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(prices, prices[1:], strict=False))


@pytest.fixture(scope="module")
def h200():
    c = load_cluster("h200-sxm-8", 1)
    return c, engine_cost_model(c, engine="sglang")


@pytest.mark.parametrize("tbo", [False, True])
def test_decode_step_non_decreasing_in_batch(h200, tbo):
    """DeepSeek-V3 on one H200 node, EP8 with DeepEP: 1-16 sequences per GPU."""
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=tbo)
    pm = PhaseModel(DSV3, c, cm, lay, kn)
    steps = [pm.step("decode", b, 2000).step_s for b in range(1, 17)]
    assert all(b >= a * (1 - WIGGLE) for a, b in zip(steps, steps[1:], strict=False)), steps
