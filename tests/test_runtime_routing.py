"""Routers against naive per-token loops (softmax top-k, DeepSeek grouped top-k, Top-P)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.runtime.layers.routing import grouped_topk, softmax_topk, topp_k, topp_routing


def _logits(t: int, e: int, seed: int) -> torch.Tensor:
    return torch.randn(t, e, generator=torch.Generator().manual_seed(seed)) * 2


def _naive_topp(probs: list[float], p: float, k_min: int, k_max: int) -> list[int]:
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    chosen, total = [], 0.0
    for i in order:
        if total >= p or p <= 0:
            break
        chosen.append(i)
        total += probs[i]
    while len(chosen) < k_min:
        chosen.append(order[len(chosen)])
    return chosen[:k_max]


def test_softmax_topk_matches_sorted_probabilities():
    """Each token keeps its k most probable experts, weights renormalised to sum 1."""
    x = _logits(40, 8, 0)
    r = softmax_topk(x, 3)
    probs = torch.softmax(x, -1)
    for t in range(40):
        best = sorted(range(8), key=lambda e: -float(probs[t, e]))[:3]
        assert r.ids[t].tolist() == best
        expect = probs[t, best] / probs[t, best].sum()
        assert torch.allclose(r.weights[t], expect, atol=1e-6)


def _naive_grouped(scores, bias, k, n_group, topk_group, v3):
    e = len(scores)
    per = e // n_group
    choice = [s + (bias[i] if bias is not None else 0.0) for i, s in enumerate(scores)]
    gscore = []
    for g in range(n_group):
        vals = sorted(choice[g * per : (g + 1) * per], reverse=True)
        gscore.append(sum(vals[:2]) if v3 else vals[0])
    groups = sorted(range(n_group), key=lambda g: -gscore[g])[:topk_group]
    allowed = [i for i in range(e) if i // per in groups]
    return sorted(allowed, key=lambda i: -choice[i])[:k]


@pytest.mark.parametrize("v3", [False, True])
def test_grouped_topk_matches_naive_loop(v3):
    """Group selection then expert selection equals a per-token loop (V2 softmax, V3 sigmoid+bias)."""
    x = _logits(50, 16, 1)
    bias = torch.randn(16, generator=torch.Generator().manual_seed(2)) * 0.3 if v3 else None
    r = grouped_topk(
        x,
        4,
        n_group=4,
        topk_group=2,
        scoring="sigmoid" if v3 else "softmax",
        bias=bias,
        renormalize=v3,
        scaling=2.5,
    )
    scores = torch.sigmoid(x) if v3 else torch.softmax(x, -1)
    for t in range(50):
        ids = _naive_grouped(
            scores[t].tolist(), None if bias is None else bias.tolist(), 4, 4, 2, v3
        )
        assert sorted(r.ids[t].tolist()) == sorted(ids)
        w = scores[t, r.ids[t]]
        w = w / w.sum() if v3 else w
        assert torch.allclose(r.weights[t], w * 2.5, atol=1e-6)


@settings(max_examples=examples(40), deadline=None)
@given(
    seed=st.integers(0, 10_000),
    p=st.sampled_from([0.0, 0.3, 0.5, 0.8, 0.95, 1.0]),
    k_min=st.integers(0, 2),
    k_span=st.integers(0, 6),
)
def test_topp_matches_naive_loop(seed, p, k_min, k_span):
    """Top-P picks experts by descending probability until cumulative >= p, within [k_min, k_max]."""
    e = 8
    k_max = min(k_min + k_span, e)
    x = _logits(30, e, seed)
    r = topp_routing(x, p, k_min=k_min, k_max=k_max)
    probs = torch.softmax(x, -1).double()
    for t in range(30):
        expect = _naive_topp(probs[t].tolist(), p, k_min, k_max)
        got = [i for i in r.ids[t].tolist() if i >= 0]
        assert got == expect
        assert all(i == -1 for i in r.ids[t].tolist()[len(got) :])
        assert math.isclose(float(r.weights[t].sum()), float(probs[t, expect].sum()), abs_tol=1e-5)


def test_topp_zero_p_gives_k_min_zero_tokens():
    """p = 0 with k_min = 0 routes every token to no expert (k = 0 rows)."""
    r = topp_routing(_logits(5, 4, 3), 0.0, k_min=0, k_max=4)
    assert (r.ids == -1).all() and (r.weights == 0).all()


def test_topp_agrees_with_planner_numpy_version():
    """Torch Top-P and the planner's numpy Top-P give the same experts and weights."""
    topp = pytest.importorskip("moeplan.traces.topp")
    x = _logits(300, 16, 4)
    for p, k_min, k_max in ((0.7, 1, 8), (0.5, 2, 16), (0.95, 1, 4), (1.0, 1, 16)):
        r = topp_routing(x, p, k_min=k_min, k_max=k_max)
        probs = torch.softmax(x, -1)
        counts = topp.top_p_counts(probs.double().numpy(), p, k_min=k_min, k_max=k_max)
        assert topp_k(probs, p, k_min, k_max).tolist() == counts.tolist()
        ids, weights = topp.top_p_route(probs.double().numpy(), p, k_min=k_min, k_max=k_max)
        assert r.ids.tolist() == ids.tolist()
        assert torch.allclose(r.weights.double(), torch.from_numpy(weights), atol=1e-6)


def test_bad_router_arguments_raise_one_line_errors():
    with pytest.raises(MoeplanError, match="top_k"):
        softmax_topk(_logits(2, 4, 0), 5)
    with pytest.raises(MoeplanError, match="n_group"):
        grouped_topk(_logits(2, 6, 0), 2, n_group=4, topk_group=1)
