"""place(): Sem-MoE vs baselines on held-out data (acceptance), uniform guard, TP mode."""

import numpy as np
import pytest

from moeplan.cost import cost_model_for
from moeplan.planners.placement.metrics import roofline_evaluator
from moeplan.planners.placement.planner import (
    PlaceConfig,
    cost_evaluator,
    physical_to_logical,
    place,
)
from moeplan.specs import load_cluster, load_model
from moeplan.traces.synthetic import SynthConfig, synthesize, uniform_trace

EVAL = roofline_evaluator(
    expert_flops=3 * 2 * 2048 * 1408, gpu_flops=1e15, a2a_bw=1.5e11, a2a_latency=2e-5
)
SMALL = dict(
    num_layers=8,
    num_experts=32,
    top_k=4,
    vocab_size=4000,
    num_requests=400,
    min_len=32,
    max_len=160,
    num_groups=8,
    num_topics=32,
)


def _place(tr, ep, **kw):
    return place(
        tr,
        num_layers=tr.num_layers,
        num_experts=tr.num_experts,
        hidden_bytes=4096,
        evaluate=EVAL,
        cfg=PlaceConfig(ep=ep, **kw),
    )


def _best_baseline_lar(res):
    return max(res.methods[m].metrics["lar"] for m in ("contiguous", "eplb", "transition"))


def test_structured_trace_semmoe_beats_baselines():
    """On a structured trace Sem-MoE's held-out LAR is >= 1.15x every baseline's."""
    res = _place(synthesize(SynthConfig(**SMALL)), 4)
    sem = res.methods["semmoe"].metrics
    assert not res.fallback
    assert sem["lar"] >= 1.15 * _best_baseline_lar(res)
    assert sem["imbalance"] <= 1.2  # small test split: topic-mix noise; 1.10 in the slow test
    assert res.objective["cocluster"] >= res.objective["greedy"]
    # LAR bookkeeping: a2a bytes are proportional to non-local activations
    c = res.methods["contiguous"].metrics
    ratio = sem["a2a_bytes_per_layer"] / c["a2a_bytes_per_layer"]
    assert ratio == pytest.approx((1 - sem["lar"]) / (1 - c["lar"]), rel=1e-6)


@pytest.mark.slow
def test_acceptance_default_trace_deepseek_v2_lite_ep8():
    """Default synthetic trace, EP8: LAR >= 1.15x best baseline, imbalance <= 1.10."""
    model = load_model("deepseek-v2-lite")
    cluster = load_cluster("h100-sxm-8")
    tr = synthesize(SynthConfig())
    assert (tr.num_layers, tr.num_experts, tr.top_k) == (model.num_moe_layers, 64, 6)
    res = place(
        tr,
        num_layers=26,
        num_experts=64,
        hidden_bytes=model.hidden_bytes,
        evaluate=cost_evaluator(cost_model_for(cluster), model, 8),
        cfg=PlaceConfig(ep=8),
    )
    sem = res.methods["semmoe"].metrics
    assert sem["lar"] >= 1.15 * _best_baseline_lar(res)
    assert sem["imbalance"] <= 1.10
    assert sem["moe_layer_time_s"] < res.methods["contiguous"].metrics["moe_layer_time_s"]


def test_uniform_trace_is_never_worse_than_contiguous():
    """Without structure the validation guard keeps Sem-MoE at contiguous or better."""
    tr = uniform_trace(
        num_requests=120, length=48, num_layers=4, num_experts=16, top_k=2, vocab_size=400
    )
    res = _place(tr, 4)
    sem, con = res.methods["semmoe"].metrics, res.methods["contiguous"].metrics
    assert sem["moe_layer_time_s"] <= con["moe_layer_time_s"] + 1e-15
    assert sem["lar"] >= con["lar"] - 0.01


def test_tp_mode_uses_token_and_markov_tables():
    """Attention-TP: Sem-MoE's per-token shuffle gives higher LAR than position split."""
    res = _place(synthesize(SynthConfig(**dict(SMALL, num_requests=200))), 4, mode="tp")
    assert res.markov is not None
    assert res.markov.next.shape == (8, 4)
    sem, con = res.methods["semmoe"].metrics, res.methods["contiguous"].metrics
    assert sem["lar"] > 1.15 * con["lar"]


def test_physical_to_logical_groups_experts_by_device():
    """Slot p of the map holds an expert placed on device p // (E / C)."""
    y = np.array([[1, 0, 1, 0, 2, 2], [0, 1, 2, 0, 1, 2]])
    p2l = physical_to_logical(y, 3)
    for layer in range(2):
        assert sorted(p2l[layer]) == list(range(6))
        assert [y[layer, e] for e in p2l[layer]] == [0, 0, 1, 1, 2, 2]


def test_replicated_tally_matches_a_loop():
    """Replica-aware metrics equal a per-activation loop (local if a copy is on the source;
    otherwise the load splits evenly over the expert's copies)."""
    from moeplan.planners.placement.metrics import Tally

    rng = np.random.default_rng(0)
    n, num_l, k, e, ep = 30, 2, 2, 6, 3
    experts = rng.integers(-1, e, size=(n, num_l, k))
    src = rng.integers(0, ep, size=(n, num_l))
    rep = np.zeros((num_l, e, ep))
    for layer in range(num_l):
        rep[layer, np.arange(e), rng.integers(0, ep, size=e)] = 1
        rep[layer, 0, :] += 1  # expert 0 everywhere twice-ish
    t = Tally(num_layers=num_l, ep=ep)
    t.add(experts, rep, src)
    local = np.zeros(num_l)
    load = np.zeros((num_l, ep))
    for i in range(n):
        for layer in range(num_l):
            for ex in experts[i, layer]:
                if ex < 0:
                    continue
                s = src[i, layer]
                if rep[layer, ex, s] > 0:
                    local[layer] += 1
                    load[layer, s] += 1
                else:
                    load[layer] += rep[layer, ex] / rep[layer, ex].sum()
    assert np.allclose(t.local, local) and np.allclose(t.load, load)


def test_redundant_slots_never_lower_lar_and_export_equal_slots():
    """Replicas only add local activations; every device exports E/C + r physical slots."""
    tr = synthesize(SynthConfig(**dict(SMALL, num_requests=150)))
    plain = _place(tr, 4, guard=False)
    red = _place(tr, 4, guard=False, redundant=2)
    assert red.methods["semmoe"].metrics["lar"] >= plain.methods["semmoe"].metrics["lar"]
    p2l = physical_to_logical(red.methods["semmoe"].replicas, 4)
    assert p2l.shape == (8, 32 + 2 * 4)
    for layer in range(8):
        assert set(p2l[layer]) == set(range(32))
