"""Synthetic generator: seeded, and each knob produces the structure it claims."""

import numpy as np
import scipy.stats

from moeplan.traces.format import split
from moeplan.traces.stats import (
    activation_kurtosis,
    lookback_accuracy,
    static_predictor_scores,
    trace_stats,
)
from moeplan.traces.synthetic import SynthConfig, synthesize, uniform_trace

SMALL = dict(
    num_layers=4,
    num_experts=16,
    top_k=2,
    vocab_size=300,
    num_requests=60,
    min_len=20,
    max_len=40,
    num_groups=4,
    num_topics=4,
)


def test_same_seed_same_trace_other_seed_differs():
    """The generator is a pure function of its config."""
    a, b = synthesize(SynthConfig(**SMALL)), synthesize(SynthConfig(**SMALL))
    c = synthesize(SynthConfig(**SMALL, seed=1))
    assert np.array_equal(a.experts, b.experts) and np.array_equal(a.token_id, b.token_id)
    assert not np.array_equal(a.token_id[:50], c.token_id[:50])
    assert a.experts.min() >= 0 and a.experts.max() < 16
    # top-k ids are distinct per token and layer
    s = np.sort(a.experts, axis=2)
    assert (np.diff(s, axis=2) > 0).all()


def test_kurtosis_matches_scipy():
    """Per-token Pearson kurtosis equals scipy.stats.kurtosis(fisher=False)."""
    tr = synthesize(SynthConfig(**SMALL))
    k = activation_kurtosis(tr, min_occurrences=30)
    uniq, inv, cnt = np.unique(tr.token_id, return_inverse=True, return_counts=True)
    ref = []
    for layer in range(tr.num_layers):
        for row in np.flatnonzero(cnt >= 30):
            c = np.bincount(tr.experts[inv == row, layer].ravel(), minlength=16)
            ref.append(scipy.stats.kurtosis(c, fisher=False) if c.var() > 0 else 0.0)
    assert np.allclose(np.sort(k), np.sort(ref))


def test_preference_knob_raises_kurtosis_and_predictability():
    """Strong token-expert preference: higher kurtosis and static precision than none."""
    strong = synthesize(SynthConfig(**SMALL, pref_strength=4.0))
    none = synthesize(
        SynthConfig(**SMALL, pref_strength=0.0, topic_strength=0.0, markov_strength=0.0)
    )
    assert np.median(activation_kurtosis(strong, 10)) > np.median(activation_kurtosis(none, 10))
    p_strong = static_predictor_scores(*split(strong, 0, 0.3), min_prob=0.3)
    p_none = static_predictor_scores(*split(none, 0, 0.3), min_prob=0.3)
    assert p_strong["f1"] > p_none["f1"] + 0.2


def test_markov_knob_raises_lookback_accuracy():
    """Inter-layer correlation makes the previous device predict the next one better."""
    cfg = dict(SMALL, pref_strength=0.0, topic_strength=0.0, num_layers=6)
    with_m = synthesize(SynthConfig(**cfg, markov_strength=4.0))
    without = synthesize(SynthConfig(**cfg, markov_strength=0.0))
    a = lookback_accuracy(*split(with_m, 0, 0.3), ep=4, max_lookback=1)[0]
    b = lookback_accuracy(*split(without, 0, 0.3), ep=4, max_lookback=1)[0]
    assert a > b + 0.1


def test_stats_report_has_paper_statistics():
    """trace_stats reports kurtosis, static precision/F1 and look-back accuracy 1..5."""
    s = trace_stats(synthesize(SynthConfig(**dict(SMALL, num_layers=7))), ep=4)
    for key in ("kurtosis_median", "static_precision", "static_f1", "next_layer_accuracy"):
        assert key in s
    assert set(s["next_layer_accuracy"]) == {"1", "2", "3", "4", "5"}


def test_uniform_trace_has_no_structure():
    """The uniform trace's static predictor is near chance."""
    u = uniform_trace(
        num_requests=40, length=30, num_layers=3, num_experts=16, top_k=2, vocab_size=20
    )
    p = static_predictor_scores(*split(u, 0, 0.3), min_prob=0.3)
    assert p["precision"] < 0.3
