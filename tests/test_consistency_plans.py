"""Every family's best plan is consistent with moeplan's own memory model and FLOP count.

"Numbers that contradict each other":

- **memory**: each family's fit check and the ``mem_bytes_per_gpu`` it reports are the same
  :class:`moeplan.cost.memory.MemoryBreakdown` total (weights + KV + activations + buffers +
  reserve), so no emitted plan is reported above the GPU's memory (kimi-k2 on
  mixserve-910b was "65.9 GiB of 64": FinDEP's total had the reserve added twice), and
  every report is at least the weights floor plus the reserve (what ``inspect`` prints);
- **FLOPs**: no plan implies more FLOP/s per GPU than the cost model's GEMM peak.
  A prompt token's prefill FLOPs are the model's per-token FLOPs with the lm-head counted
  once per prompt (prefill computes logits for the last position only, and no family charges
  it for the others). The issue's 804 TFLOP/s for gpt-oss-120b counted the lm-head for all
  2,048 positions: 1.16 of its 10.6 GFLOP per token (vocab 201k x hidden 2880); without that
  over-count the same plan is at 716 of 749 TFLOP/s.

The full grid (every preset model x every cluster preset x every family) is marked slow; it
checks the plans of :func:`test_launchable_presets.planned` (the same workload, cost model and
families, planned once per session and shared with the launch and runtime grids) instead of
planning every pair a second time. The default run covers the cases the issue reported.
"""

from __future__ import annotations

import functools

import pytest

from moeplan.cost import cost_model_for
from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError
from moeplan.planners import rank
from moeplan.planners.rank import PROPOSING_FAMILIES
from moeplan.specs import Workload, cluster_names, load_cluster, load_model
from moeplan.specs.presets import MODEL_FILES
from moeplan.specs.quant import MODULE_CLASSES
from test_launchable_presets import EVERY_FAMILY_MODELS, planned
from test_launchable_presets import WORKLOAD as LAUNCH_WORKLOAD

WORKLOAD = Workload(batch=32, isl=2048, osl=256)
ISSUE_CASES = [
    ("kimi-k2", "mixserve-910b"),
    ("kimi-k2", "h200-sxm-8"),
    ("gpt-oss-120b", "h200-sxm-8"),
    ("deepseek-v3", "h200-sxm-8"),
    ("qwen3-235b-a22b", "h100-sxm-8"),
    ("deepseek-v3", "findep-c"),
]
GRID = [(m, c) for m in MODEL_FILES for c in cluster_names()]


def prefill_flops_per_prompt_token(model, isl: int) -> float:
    """Forward FLOPs per prompt token: lm-head once per prompt, not once per position."""
    lm_head = 2.0 * model.vocab_size * model.hidden_size
    return model.flops_per_token(isl, "prefill") - lm_head * (1 - 1 / isl)


def gemm_peak(cm, model=None) -> float:
    """The cost model's highest FLOP/s on one GPU (the fitted or datasheet roofline), at the
    fastest compute dtype of ``model``'s weights (fp8 checkpoints: the fp8 rate)."""
    weights = [None] + (
        [model.quant.module(c) for c in MODULE_CLASSES] if model is not None else []
    )
    return max(
        2.0 * n**3 / cm.gemm(n, n, n, w) for n in (4096, 8192, 16384, 32768) for w in weights
    )


@functools.cache  # read-only results; several tests check the same issue pairs
def candidates(model_name: str, cluster_name: str):
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    cm = cost_model_for(cluster)
    out = {}
    for family, adapter in rank.ADAPTERS.items():
        try:
            out[family] = adapter(model, cluster, WORKLOAD, cm)
        except MoeplanError:
            continue
    return model, cluster, cm, out


def check_memory(model, cluster, cands) -> None:
    floor = mem.floor_breakdown(model, 1).weights  # whole weights, spread below
    for family, c in cands.items():
        where = f"{model.name}@{cluster.name} {family} {c.label}"
        assert c.mem_bytes_per_gpu <= cluster.gpu.mem_bytes, where
        assert c.mem_bytes_per_gpu >= floor / c.gpus + mem.RESERVED_BYTES - 1, where
        detail = c.plan.predicted
        if family == "dep":
            m = detail["memory_per_gpu"]
            assert c.mem_bytes_per_gpu == max(m["ag"]["total"], m["eg"]["total"]), where
            assert m["ag"]["reserved"] == m["eg"]["reserved"] == mem.RESERVED_BYTES, where
        if family == "strategy":
            best = c.detail.strategies
            assert any(r.mem_bytes_per_gpu == c.mem_bytes_per_gpu and r.fits for r in best), where


def check_flops(model, cluster, cm, cands) -> None:
    per_token = prefill_flops_per_prompt_token(model, WORKLOAD.isl)
    peak = gemm_peak(cm, model)
    for family, c in cands.items():
        implied = per_token * c.per_gpu
        assert implied <= peak * (1 + 1e-9), (
            model.name,
            cluster.name,
            family,
            c.label,
            implied / 1e12,
            peak / 1e12,
        )


@pytest.mark.parametrize("model_name,cluster_name", ISSUE_CASES)
def test_issue_cases_memory_and_flops_are_consistent(model_name, cluster_name):
    model, cluster, cm, cands = candidates(model_name, cluster_name)
    assert cands, "at least one family plans each issue case"
    check_memory(model, cluster, cands)
    check_flops(model, cluster, cm, cands)


def test_kimi_k2_on_910b_findep_reports_what_its_fit_check_used():
    """'65.9 GiB of 64 GiB per GPU' — the reserve was added a second time."""
    model, cluster, _, cands = candidates("kimi-k2", "mixserve-910b")
    dep = cands["dep"]
    p = dep.detail.problem
    c = dep.detail.findep.config
    assert p.max_r1(c.ma) >= c.r1  # the fit check admitted it ...
    assert dep.mem_bytes_per_gpu <= cluster.gpu.mem_bytes  # ... so the report is within memory


def test_inspect_floor_agrees_with_plan_on_deepseek_v3_h100():
    """`inspect` said it fits while every family refused it: both now say it does not fit."""
    model, cluster = load_model("deepseek-v3"), load_cluster("h100-sxm-8")
    floor = mem.floor_breakdown(model, cluster.num_gpus)
    assert not floor.fits(cluster.gpu.mem_bytes)
    _, _, _, cands = candidates("deepseek-v3", "h100-sxm-8")
    assert cands == {}


def test_the_issue_flop_figure_came_from_counting_the_lm_head_per_position():
    model, cluster, cm, cands = candidates("gpt-oss-120b", "h200-sxm-8")
    best = max(cands.values(), key=lambda c: c.per_gpu)
    naive = model.flops_per_token(WORKLOAD.isl, "prefill") * best.per_gpu
    right = prefill_flops_per_prompt_token(model, WORKLOAD.isl) * best.per_gpu
    assert right <= gemm_peak(cm) < naive


@pytest.mark.slow
@pytest.mark.parametrize("model_name", list(EVERY_FAMILY_MODELS))
def test_every_preset_model_cluster_family_is_consistent(model_name):
    """Every family's best plan of every cluster preset the model fits. A pair that fits no
    family is not in ``planned`` (it asserts the error says so), as it had no candidate here."""
    assert LAUNCH_WORKLOAD == WORKLOAD  # the shared planning is this file's workload
    assert set(PROPOSING_FAMILIES) == set(rank.ADAPTERS)  # ... and every family
    checked = 0
    for mn, cn, result in planned(PROPOSING_FAMILIES):
        if mn != model_name:
            continue
        model, cluster = result.model, result.cluster
        assert (model.name, cluster.name) == (load_model(mn).name, load_cluster(cn).name)
        cands = {c.family: c for c in result.candidates}
        assert len(cands) == len(result.candidates)  # one best plan per family
        check_memory(model, cluster, cands)
        check_flops(model, cluster, cost_model_for(cluster), cands)
        checked += 1
    assert checked >= 1, model_name
