"""Instance knobs in the iteration model and the deployment search (serve/knobs.py)."""

from __future__ import annotations

import pytest

from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.instance_knobs import InstanceKnobs
from moeplan.serve.iteration import Batch, IterationModel
from moeplan.serve.knobs import knob_variants
from moeplan.serve.layout import ServeLayout
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")


def test_iteration_two_batch_overlap_within_bounds():
    """A decode iteration with two-batch overlap: no faster than either resource's work of
    both halves, no slower than the halves in series; the sequential DeepEP iteration is the
    sum of its parts."""
    c = load_cluster("h100-sxm-8", 4)
    cm = engine_cost_model(c, engine="sglang")
    lay = ServeLayout(attn_dp=32, moe_ep=32)
    b = Batch(decode=32 * 128, decode_ctx=2000)
    seq = IterationModel(DSV3, c, cm, lay, knobs=InstanceKnobs(a2a="deepep"))
    tbo = IterationModel(DSV3, c, cm, lay, knobs=InstanceKnobs(a2a="deepep", tbo=True))
    s, t = seq.breakdown(b), tbo.breakdown(b)
    parts = ("attention", "moe", "dense", "comm", "lm_head")
    assert s["period_s"] == pytest.approx(sum(s[k] for k in parts), rel=1e-12)
    assert t["period_s"] == pytest.approx(sum(t[k] for k in parts) + t["overlap"], rel=1e-12)
    assert t["period_s"] >= max(t["comm"], t["attention"] + t["moe"]) - 1e-12
    assert t["overlap"] <= 0.0


def test_variants_cover_the_entries_and_respect_given_knobs():
    c = load_cluster("h100-sxm-8", 12)
    lay = ServeLayout(attn_dp=96, moe_ep=96)  # 256 experts do not split over 96 ranks
    got = knob_variants("sglang", DSV3, c, lay, InstanceKnobs())
    assert {(kn.a2a, kn.tbo) for _, kn in got} == {("nccl", False), ("deepep", False),
                                                    ("deepep", True)}  # fmt: skip
    assert {lay_.redundant_experts for lay_, _ in got} == {32}  # 288 = 3 x 96
    fixed = knob_variants("sglang", DSV3, c, lay, InstanceKnobs(tbo=True), frozenset({"tbo"}))
    assert {(kn.a2a, kn.tbo) for _, kn in fixed} == {("deepep", True)}
    a100 = load_cluster("a100-sxm-8", 4)
    plain = knob_variants("sglang", DSV3, a100, ServeLayout(attn_dp=32, moe_ep=32), InstanceKnobs())
    assert [(kn.a2a, kn.tbo, lay_.redundant_experts) for lay_, kn in plain] == [("nccl", False, 0)]
