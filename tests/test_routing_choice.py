"""``--routing balanced|random``: balanced routing prices every EP rank at exactly its share
(no batch spread), random routing the busiest rank of a drawn batch
(:mod:`moeplan.cost.ep_spread`); the choice reaches ``serve-sim`` and is echoed."""

from __future__ import annotations

import json
import math

import pytest

from cli_run import run_main
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs, resolve_knobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.specs import load_cluster, load_model

V3 = load_model("deepseek-v3")


@pytest.fixture(scope="module")
def wide():
    c = load_cluster("h100-sxm-8", 9)
    cm = engine_cost_model(c, engine="sglang")
    lay = Layout(attn_dp=72, moe_ep=72, redundant_experts=32)
    return c, cm, lay


def _knobs(c, lay, routing):
    return resolve_knobs("sglang", V3, c, lay, a2a="deepep", tbo=True, routing=routing)


def test_balanced_routing_has_no_batch_spread(wide):
    """At 128 sequences per micro-batch over EP72 the busiest rank of a random batch carries
    mu + sd * E[max of 72 standard normals] copies (module docstring of cost/ep_spread.py:
    n k / ep copies on average, variance n k p (1 - p) (E - k) / (E - 1)); balanced: the
    mean, 1.0."""
    c, cm, lay = wide
    rand = PhaseModel(V3, c, cm, lay, _knobs(c, lay, "random")).step("decode", 256, 2000)
    bal = PhaseModel(V3, c, cm, lay, _knobs(c, lay, "balanced")).step("decode", 256, 2000)
    assert bal.imbalance == 1.0
    n, k, e, ep = 128 * 72, 8, 256, 72
    mu, p = n * k / ep, 1 / ep
    sd = math.sqrt(n * k * p * (1 - p) * (e - k) / (e - 1))
    # E[max of 72 standard normals] = 2.38785 (the integral of x n phi(x) Phi(x)^(n - 1))
    assert rand.imbalance == pytest.approx(1 + sd / mu * 2.38785, rel=1e-3)
    assert bal.step_s < rand.step_s
    assert bal.breakdown["dispatch"] < rand.breakdown["dispatch"]


def test_iteration_model_follows_the_choice(wide):
    c, cm, lay = wide
    b = Batch(256 * 72, 2000, ())
    rand = IterationModel(V3, c, cm, lay, knobs=_knobs(c, lay, "random"))(b)
    bal = IterationModel(V3, c, cm, lay, knobs=_knobs(c, lay, "balanced"))(b)
    assert bal < rand


def test_unknown_routing_is_one_line():
    with pytest.raises(MoeplanError, match=r"--routing \('even'\) must be one of random, balanced"):
        InstanceKnobs(routing="even")


def test_serve_sim_echoes_the_choice(capsys):
    args = ["serve-sim", "--model", "deepseek-v3", "--cluster", "h200-sxm-8", "--attn-dp", "8",
            "--moe-ep", "8", "--phase", "decode", "--batch-per-gpu", "64", "--context", "1024",
            "--json"]  # fmt: skip
    got = {}
    for r in ("random", "balanced"):
        code, out, _ = run_main(capsys, *args, "--routing", r)
        assert code == 0
        got[r] = json.loads(out)
    assert got["random"]["knobs"]["routing"] == "random"
    assert got["balanced"]["knobs"]["routing"] == "balanced"
    assert got["balanced"]["tokens_per_s_per_gpu"] > got["random"]["tokens_per_s_per_gpu"]
