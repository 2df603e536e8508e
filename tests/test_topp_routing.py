"""Top-P routing and routing-profile derivation against per-token reference loops."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.specs import load_model
from moeplan.traces.routing_profiles import (
    mean_k_from_shape,
    mean_k_from_trace,
    profile_from_dict,
    profile_to_dict,
    synthetic_top_p_mean_k,
)
from moeplan.traces.topp import softmax, top_p_counts, top_p_route


def _reference(row: np.ndarray, p: float, k_min: int, k_max: int) -> list[int]:
    """Plain loop: rank (prob desc, index asc), add until the float64 running sum >= p."""
    ranked = sorted(range(len(row)), key=lambda i: (-float(row[i]), i))
    picked, total = [], 0.0
    for i in ranked:
        if picked and total >= p:
            break
        picked.append(i)
        total += float(row[i])
    while len(picked) < k_min:
        picked.append(ranked[len(picked)])
    return picked[:k_max]


@settings(max_examples=examples(150), deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.integers(1, 9)),
        elements=st.floats(0, 10, allow_nan=False),
    ),
    st.floats(0.01, 1.0),
    st.data(),
)
def test_top_p_route_matches_reference_loop(raw, p, data):
    """Selected ids (order included) equal the per-token reference for any probabilities."""
    probs = raw / np.maximum(raw.sum(axis=1, keepdims=True), 1e-12)
    num_experts = probs.shape[1]
    k_max = data.draw(st.integers(1, num_experts))
    k_min = data.draw(st.integers(1, k_max))
    experts, weights = top_p_route(probs, p, k_min=k_min, k_max=k_max)
    for t, row in enumerate(probs):
        want = _reference(row, p, k_min, k_max)
        got = [int(e) for e in experts[t] if e >= 0]
        assert got == want
        assert np.all(experts[t, len(want) :] == -1)
        assert np.allclose(weights[t, : len(want)], row[want])


def test_ties_go_to_the_lower_expert_index():
    """Equal probabilities rank by expert id."""
    probs = np.array([[0.25, 0.25, 0.25, 0.25]])
    experts, _ = top_p_route(probs, 0.5)
    assert experts.tolist() == [[0, 1, -1, -1]]


def test_boundary_is_inclusive():
    """A cumulative sum exactly equal to p stops (>=), with float64 sums."""
    probs = np.array([[0.5, 0.25, 0.25]])
    assert top_p_counts(probs, 0.5).tolist() == [1]
    assert top_p_counts(probs, 0.75).tolist() == [2]
    assert top_p_counts(probs, 0.7500001).tolist() == [3]


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, float("nan")])
def test_p_outside_unit_interval_is_a_user_error(p):
    with pytest.raises(MoeplanError, match="top_p"):
        top_p_counts(np.full((2, 4), 0.25), p)


def test_mean_k_from_dense_and_columnar_traces_agree():
    """The two trace layouts give the same per-layer mean, equal to counting valid ids."""
    rng = np.random.default_rng(0)
    probs = softmax(rng.standard_normal((50, 3, 16)) * 2)
    dense = np.stack([top_p_route(probs[:, i], 0.7, k_max=6)[0] for i in range(3)], axis=1)
    want = [float(np.mean([(dense[t, i] >= 0).sum() for t in range(50)])) for i in range(3)]
    assert mean_k_from_trace(dense) == pytest.approx(want)
    rows = dense.reshape(-1, 6)
    layer = np.tile(np.arange(3), 50)
    assert mean_k_from_trace(rows, layer) == pytest.approx(want)


def test_trace_layer_without_rows_is_a_user_error():
    with pytest.raises(MoeplanError, match="no rows"):
        mean_k_from_trace(np.zeros((4, 2), dtype=int), np.array([0, 0, 2, 2]))


def test_shapes_stay_within_bounds_and_have_the_mean_when_unclipped():
    for shape in ("flat", "ramp", "valley", "wave"):
        ks = mean_k_from_shape(41, 8, mean=4.0, amplitude=2.0, shape=shape)
        assert len(ks) == 41 and min(ks) >= 1 and max(ks) <= 8
        if shape in ("flat", "ramp", "wave"):
            assert np.mean(ks) == pytest.approx(4.0, abs=1e-9)


def test_synthetic_profile_is_seeded_and_responds_to_p():
    a = synthetic_top_p_mean_k(6, 32, 0.5, k_max=8, tokens=256, seed=3)
    assert a == synthetic_top_p_mean_k(6, 32, 0.5, k_max=8, tokens=256, seed=3)
    b = synthetic_top_p_mean_k(6, 32, 0.9, k_max=8, tokens=256, seed=3)
    assert all(x <= y for x, y in zip(a, b, strict=True)) and sum(b) > sum(a)


def test_profile_length_must_match_the_model():
    model = load_model("qwen3-235b-a22b")
    data = {"top_k": 8, "mean_k": [4.0] * 10}
    with pytest.raises(MoeplanError, match="length"):
        profile_from_dict(data, num_moe_layers=model.num_moe_layers, top_k=model.top_k)


@pytest.mark.parametrize("name", ["qwen3-235b-a22b-topp", "qwen2-57b-a14b-adak"])
def test_shipped_profiles_load_for_their_model(name):
    """Each shipped example profile validates against its model and round-trips."""
    path = resources.files("moeplan.specs.presets").joinpath("routing", f"{name}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    model = load_model(data["model"])
    prof = profile_from_dict(data, num_moe_layers=model.num_moe_layers, top_k=model.top_k)
    assert data["note"]
    assert all(1 <= k <= model.top_k for k in prof.mean_k)
    again = profile_from_dict(profile_to_dict(prof, model=data["model"]))
    assert again.mean_k == pytest.approx(prof.mean_k, abs=1e-4)
