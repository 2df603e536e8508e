"""The one layout type (``moeplan.planners.layout.Layout``): MixServe's strategies, the serving
simulator's layouts and the runtime's colocated meshes are the same objects, printed one way.

Oracles: labels written out by hand from the degrees; the plan.json round trip over MixServe's
whole enumeration on a 2x8 cluster (every grammar point comes back as itself); the runtime's
groups counted from the degrees (``world / tp`` groups of ``tp`` ranks).
"""

from __future__ import annotations

import pytest

from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.planners.plan import Plan
from moeplan.planners.strategy.space import enumerate_strategies
from moeplan.runtime.mesh import mesh_from_plan


def test_one_type():
    assert Layout is Layout and Layout is Layout


@pytest.mark.parametrize(
    "layout,text",
    [
        (Layout(attn_tp=4, attn_dp=2, moe_tp=8), "attn TP4xDP2 / MoE TP8xEP1"),
        (Layout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2, fused=True),
         "attn TP8xDP2 / MoE TP8xEP2 fused"),
        (Layout(attn_dp=8, moe_ep=8, redundant_experts=32, pp=2, micro_batches=4, replicas=2),
         "attn TP1xDP8 / MoE TP1xEP8+R32 / PP2x4mb x2 replicas"),
        (Layout(pp=3), "attn TP1xDP1 / MoE TP1xEP1 / PP3x3mb"),
    ],
)  # fmt: skip
def test_one_label(layout, text):
    assert layout.label == str(layout) == text


def test_degrees_and_gpus():
    lay = Layout(attn_tp=2, attn_dp=4, moe_tp=1, moe_ep=8, pp=2, replicas=3)
    assert (lay.stage_gpus, lay.gpus, lay.world_size, lay.total_gpus) == (8, 16, 16, 48)
    assert lay.micro_batches == 2 and lay.dense_tp == 2
    assert lay.instance() == Layout(attn_tp=2, attn_dp=4, moe_tp=1, moe_ep=8, pp=2)
    assert lay.to_dict()["replicas"] == 3 and lay.to_dict()["gpus"] == 16


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"attn_tp": 0}, "layout.attn_tp"),
        ({"replicas": 0}, "layout.replicas"),
        ({"attn_tp": 2, "moe_tp": 1}, "moe_tp\\*moe_ep"),
        ({"fused": True}, "layout.fused"),
        ({"attn_dp": 2, "moe_ep": 2, "dense_tp": 3}, "layout.dense_tp"),
    ],
)
def test_bad_layout_is_one_line(kwargs, field):
    with pytest.raises(MoeplanError, match=field) as err:
        Layout(**kwargs)
    assert "\n" not in str(err.value)


def test_plan_layout_round_trip_over_the_grammar():
    strategies = enumerate_strategies(2, 8)
    assert len(strategies) > 50
    for s in strategies:
        back = Layout.from_plan_layout(s.plan_layout())
        assert back.key()[:-1] == s.key()[:-1] and back.gpus == s.gpus == 16


def test_launchable_layout_counts_replicas():
    """A one-stage SMIDT plan's layout: ``world_size`` counts every replica."""
    d = {"world_size": 8, "replicas": 2, "attn": {"tp": 2, "dp": 2}, "moe": {"tp": 1, "ep": 4},
         "pp": 1}  # fmt: skip
    lay = Layout.from_plan_layout(d)
    assert (lay.gpus, lay.replicas, lay.total_gpus) == (4, 2, 8)


@pytest.mark.parametrize(
    "layout,match",
    [
        ({"world_size": 8, "attn": {"tp": 2, "dp": 2}, "moe": {"tp": 1, "ep": 8}},
         r"plan\.layout\.attn tp\*dp \(2\*2\) must equal world_size/pp \(8\)"),
        ({"world_size": 8, "attn": [8], "moe": {"tp": 1, "ep": 8}},
         r"plan\.layout\.attn \(list\) must be a JSON object"),
        ({"world_size": 8, "attn": {"tp": 8, "dp": True}, "moe": {"tp": 8, "ep": 1}},
         r"plan\.layout\.attn\.dp \(True\) must be a positive integer"),
    ],
)  # fmt: skip
def test_bad_plan_layout_names_the_field(layout, match):
    with pytest.raises(MoeplanError, match=match):
        Layout.from_plan_layout(layout)


def test_runtime_mesh_is_built_from_the_layout():
    s = Layout(attn_tp=2, attn_dp=4, moe_tp=4, moe_ep=2, pp=2)
    plan = Plan(family="strategy", model="m", cluster="c", layout=s.plan_layout())
    mesh = mesh_from_plan(plan, world_size=16)
    assert mesh.layout == s and (mesh.pp, mesh.stage_size) == (2, 8)
    groups = mesh.group_lists()
    for axis, size in [("attn_tp", 2), ("attn_dp", 4), ("moe_tp", 4), ("moe_ep", 2)]:
        assert len(groups[axis]) == 16 // size and {len(g) for g in groups[axis]} == {size}


def test_a_tp_shard_must_hold_whole_fp8_scale_blocks():
    """Oracle: the engines' own load errors (vLLM / SGLang ``validate_fp8_block_shape``,
    ``Fp8MoEMethod.create_weights``): Qwen3-235B-A22B-FP8 (experts of 1536, 128 x 128 blocks)
    is refused at MoE TP8 (192 per shard) and runs at TP4 (384) and TP8 with EP (whole
    experts); DeepSeek-V3 (2048) runs at MoE TP16 (128) and not at TP32 (64), and its shared
    experts (2048) split by attention TP the same way."""
    from moeplan.specs import load_cluster, load_model

    qwen, one = load_model("qwen3-235b-a22b-2507-fp8"), load_cluster("h100-sxm-8")
    with pytest.raises(MoeplanError, match=r"moe_intermediate_size \(1536\) / moe_tp \(8\) = 192"):
        Layout(attn_tp=8, moe_tp=8).validate(qwen, one)
    Layout(attn_tp=4, moe_tp=4).validate(qwen, one)
    Layout(attn_tp=8, moe_ep=8).validate(qwen, one)
    ds, four = load_model("deepseek-v3"), load_cluster("h100-sxm-8", nodes=4)
    Layout(attn_tp=16, moe_tp=16).validate(ds, four)
    with pytest.raises(MoeplanError, match=r"moe_intermediate_size \(2048\) / moe_tp \(32\) = 64"):
        Layout(attn_tp=1, attn_dp=32, moe_tp=32).validate(ds, four)
    with pytest.raises(MoeplanError, match=r"shared_intermediate_size \(2048\) / attn_tp \(32\)"):
        Layout(attn_tp=32, moe_ep=32).validate(ds, four)


def test_block_rule_matches_brute_force_over_every_preset_and_split():
    """Every shipped preset, every MoE TP degree up to 64: a layout is refused for its experts
    exactly when the shard is not a multiple of both block sides (brute force over the
    degrees), and never for a checkpoint without blocks."""
    from moeplan.planners.layout import block_problems
    from moeplan.specs import load_model, model_names

    seen = 0
    for name in model_names():
        try:
            m = load_model(name)
        except MoeplanError:
            continue
        block = m.quant.experts.format.block
        for t in (2, 4, 8, 16, 32, 64):
            if m.moe_intermediate_size % t:
                continue
            lay = Layout(attn_dp=t, moe_tp=t)
            refused = any("moe_intermediate_size" in p for p in block_problems(m, lay))
            shard = m.moe_intermediate_size // t
            want = bool(block) and any(shard % b for b in block)
            assert refused == want, (name, t)
            seen += want
    assert seen >= 3  # the rule fires on some of them
