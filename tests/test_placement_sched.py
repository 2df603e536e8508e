"""Online schedulers: mask-and-reset request scheduling and the TP shuffle plan."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.planners.placement.sched import (
    request_scores,
    schedule_requests,
    token_plan,
    token_table,
)


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 10_000), ep=st.integers(1, 6), n=st.integers(1, 30))
def test_every_round_covers_every_device(seed, ep, n):
    """Each consecutive block of ep requests lands on ep distinct devices (Algorithm 2)."""
    scores = np.random.default_rng(seed).random((n, ep))
    dev, _ = schedule_requests(scores)
    for lo in range(0, n - ep + 1, ep):
        assert sorted(dev[lo : lo + ep]) == list(range(ep))


def test_first_request_of_a_round_gets_its_best_device():
    """With an empty mask a request takes the arg-max of its scores."""
    scores = np.array([[0.1, 0.9, 0.0], [0.0, 0.8, 0.7], [1.0, 0.5, 0.2]])
    dev, mask = schedule_requests(scores)
    assert dev.tolist() == [1, 2, 0]
    assert mask.all()


def test_mask_carries_over_between_calls():
    """Splitting the request stream in two calls gives the same devices as one call."""
    scores = np.random.default_rng(1).random((11, 4))
    whole, _ = schedule_requests(scores)
    a, mask = schedule_requests(scores[:5])
    b, _ = schedule_requests(scores[5:], mask)
    assert np.concatenate([a, b]).tolist() == whole.tolist()


def test_request_scores_equal_a_loop():
    """Vectorised request scores equal summing table rows per request in a loop."""
    rng = np.random.default_rng(0)
    table = token_table(rng.random((10, 3)))
    rows = rng.integers(-1, 10, size=50)
    req = np.sort(rng.integers(0, 6, size=50))
    got = request_scores(table, rows, req, 6)
    ref = np.zeros((6, 3))
    for r, row in zip(req, rows, strict=True):
        if row >= 0:
            ref[r] += table[row]
    assert np.allclose(got, ref)
    assert np.allclose(table.sum(axis=1), 1.0)


@settings(max_examples=examples(50), deadline=None)
@given(devs=st.lists(st.integers(0, 4), min_size=0, max_size=40))
def test_token_plan_inverse_restores_order(devs):
    """Shuffle by the padded plan, then index with inverse: the original batch comes back."""
    devices = np.array(devs, dtype=np.int64)
    plan = token_plan(devices, 5)
    x = np.arange(len(devices)) * 10 + 7
    shuffled = np.where(plan.padded >= 0, x[np.maximum(plan.padded, 0)], -1)
    assert np.array_equal(shuffled[plan.inverse], x)
    # each token sits in its device's block; blocks are width long
    for i, d in enumerate(devices):
        assert d * plan.width <= plan.inverse[i] < (d + 1) * plan.width
    assert plan.counts.tolist() == np.bincount(devices, minlength=5).tolist()
    assert (plan.padded >= 0).sum() == len(devices)
    # stable: within a device, tokens keep their order
    for d in range(5):
        block = plan.padded[d * plan.width : (d + 1) * plan.width]
        block = block[block >= 0]
        assert list(block) == sorted(block)


def test_token_table_hard_vote_is_argmax():
    g = np.array([[1.0, 3.0], [2.0, 0.0], [0.0, 0.0]])
    assert np.array_equal(token_table(g, soft=False).argmax(axis=1), [1, 0, 0])
    assert list(itertools.chain(*token_table(g)[2:])) == [0.5, 0.5]
