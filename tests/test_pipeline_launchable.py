"""A one-stage SMIDT plan is named and exported as what it is."""

from __future__ import annotations

import pytest

from moeplan.cost import cost_model_for
from moeplan.planners import pipeline as pl
from moeplan.planners import rank
from moeplan.planners.pipeline.cost import Choice, ModuleRef
from moeplan.planners.pipeline.launchable import colocated_layout, describe
from moeplan.planners.pipeline.stages import PipelinePlan, StagePlan
from moeplan.specs import Workload, load_cluster, load_model

PREFILL = Workload(batch=32, isl=2048, osl=256, phase="prefill")


def _plan(choices: list[tuple[str, Choice]], pp: int = 1, r: int = 8) -> PipelinePlan:
    mods = tuple((ModuleRef(index=i, kind=k, layer=i // 2), c) for i, (k, c) in enumerate(choices))
    stage = StagePlan(
        start_module=0, end_module=len(mods), modules=mods, time_s=1.0, mem_bytes_per_gpu=1.0
    )
    return PipelinePlan(
        method="smidt",
        pp=pp,
        r=r,
        stages=(stage,) * pp,
        bottleneck_s=1.0,
        period_s=1.0,
        throughput_tokens_per_s=1.0,
        throughput_sync_tokens_per_s=1.0,
        microbatches=4,
        micro_batch=8,
    )


def test_issue_reproduction_gpt_oss_on_h200_is_data_parallel():
    """'pipelined (SMIDT) PP1' won; it is 8 replicas of the whole model."""
    model, cluster = load_model("gpt-oss-120b"), load_cluster("h200-sxm-8")
    cand = rank.pipeline_candidate(model, cluster, PREFILL, cost_model_for(cluster))
    assert cand.plan.layout["pp"] == 1
    assert cand.launchable_as == {
        "world_size": 8,
        "replicas": 8,
        "attn": {"tp": 1, "dp": 1},
        "moe": {"tp": 1, "ep": 1},
        "pp": 1,
    }
    assert cand.plan.details["launchable_as"] == cand.launchable_as
    assert (
        cand.colocated
        and "PP" not in cand.label
        and cand.label == "attn TP1xDP1 / MoE TP1xEP1 x8 replicas"
    )
    assert "pipelined" not in cand.name
    assert "pipelined" not in rank.explain([cand], cluster)[0]


def test_layout_accounts_for_every_gpu():
    """replicas x attention (TP x DP) = replicas x MoE (TP x EP) = the stage's GPUs."""
    a, m = Choice(tp=2, ep=1, dpmoe=4), Choice(tp=1, ep=4, dpmoe=2)
    lay = colocated_layout(_plan([("attn", a), ("moe", m)] * 3))
    assert lay == {
        "world_size": 8,
        "replicas": 2,
        "attn": {"tp": 2, "dp": 2},
        "moe": {"tp": 1, "ep": 4},
        "pp": 1,
    }
    assert describe(lay) == "attn TP2xDP2 / MoE TP1xEP4 x2 replicas"
    n = lay["replicas"]
    assert n * lay["attn"]["tp"] * lay["attn"]["dp"] == n * lay["moe"]["tp"] * lay["moe"]["ep"] == 8


@pytest.mark.parametrize(
    "choices,pp",
    [
        (
            [
                ("attn", Choice(tp=1, ep=1, dpmoe=8)),
                ("moe", Choice(tp=1, ep=8, dpmoe=1)),
                ("attn", Choice(tp=2, ep=1, dpmoe=4)),
                ("moe", Choice(tp=1, ep=8, dpmoe=1)),
            ],
            1,
        ),
        ([("attn", Choice(tp=8, ep=1, dpmoe=1)), ("moe", Choice(tp=1, ep=4, dpmoe=2))], 1),
        ([("attn", Choice(tp=1, ep=1, dpmoe=8)), ("moe", Choice(tp=1, ep=8, dpmoe=1))], 2),
    ],
)
def test_no_colocated_layout_when_not_uniform_not_divisible_or_pipelined(choices, pp):
    assert colocated_layout(_plan(choices, pp=pp)) is None


def test_a_real_pipeline_keeps_its_pipeline_name():
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("smidt-a40")
    res = pl.plan_pipeline(model, cluster, PREFILL, cost_model_for(cluster), pp=4, baselines=False)
    assert colocated_layout(res.plan) is None
    assert res.to_plan().details["launchable_as"] is None
