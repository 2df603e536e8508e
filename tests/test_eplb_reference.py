"""EPLB (numpy) against DeepSeek's published example and vLLM's property cases."""

import json
from pathlib import Path

import numpy as np
import pytest

from moeplan.errors import MoeplanError
from moeplan.planners.placement.eplb import rebalance_experts

REF = Path("/work/shared/data/eplb_reference_vectors.json")
DATA = json.loads(REF.read_text()) if REF.exists() else None
pytestmark = pytest.mark.skipif(DATA is None, reason="reference vectors not present")


def _cases(key):
    return DATA[key] if DATA else []


@pytest.mark.parametrize("case", _cases("exact_cases"), ids=lambda c: c["name"])
def test_reproduces_reference_exactly(case):
    """phy2log and logcnt equal DeepSeek's published outputs element by element."""
    w = np.array(case["weight"])
    phy2log, log2phy, logcnt = rebalance_experts(w, case["num_replicas"], case["num_groups"],
                                                 case["num_nodes"], case["num_gpus"])
    assert phy2log.tolist() == case["expected_phy2log"]
    assert logcnt.tolist() == case["expected_logcnt"]
    # log2phy is the inverse map of phy2log
    for layer in range(w.shape[0]):
        for e in range(w.shape[1]):
            phys = [p for p in log2phy[layer, e] if p >= 0]
            assert sorted(phys) == [p for p in range(phy2log.shape[1]) if phy2log[layer, p] == e]


def _check(name, w, phy2log, logcnt, nrep):
    if name == "single_gpu":
        assert set(phy2log[0].tolist()) == {0, 1, 2, 3}
    elif name == "equal_weights":
        assert (logcnt == 1).all()
    elif name == "extreme_imbalance":
        assert logcnt[0, 0] > logcnt[0, 1] and phy2log.shape == (1, 12)
    elif name == "multiple_layers":
        assert (logcnt.sum(1) == 8).all() and ((phy2log >= 0) & (phy2log < 6)).all()
    elif name == "non_divisible_groups_fallback_global":
        assert phy2log.shape == (1, 8) and logcnt.shape == (1, 4)
    elif name == "small_hierarchical":
        assert logcnt.sum() == 12 and (logcnt >= 1).all() and logcnt[0, w[0].argmax()] >= 2
    elif name in ("global_fallback", "large_scale"):
        assert logcnt.sum() == nrep
    elif name == "two_layer_monotone":
        for layer in range(w.shape[0]):
            assert logcnt[layer, w[layer].argmax()] >= 2
    else:
        raise AssertionError(f"unknown case {name}")


@pytest.mark.parametrize("case", _cases("property_cases_from_vllm"), ids=lambda c: c["name"])
def test_vllm_property_cases(case):
    """vLLM's EPLB property checks hold; the invalid case raises a one-line MoeplanError."""
    w = np.array(case["weight"])
    args = case["args"]
    if "raises" in case["check"]:
        with pytest.raises(MoeplanError):
            rebalance_experts(w, *args)
        return
    phy2log, _, logcnt = rebalance_experts(w, *args)
    _check(case["name"], w, phy2log, logcnt, args[0])
    # every physical slot maps to a logical expert and counts agree
    for layer in range(w.shape[0]):
        assert np.bincount(phy2log[layer], minlength=w.shape[1]).tolist() == \
            logcnt[layer].tolist()
