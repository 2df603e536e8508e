"""Acceptance: every preset model on every cluster preset it fits gets launch
scripts whose every node's arguments pass the pinned SGLang and vLLM rules, or a script that
says plainly why the engine cannot launch the plan.

Planned through the Python API. The fast test plans the colocated family (what the engines
launch) for every pair; the slow one plans every family, so the gap to an overall winner of
another family is exercised too.
"""

from __future__ import annotations

import functools

import pytest

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.export import constraints as cons
from moeplan.planners.plan import Plan
from moeplan.planners.rank import PROPOSING_FAMILIES, TIE, plan
from moeplan.report.plan_report import launch_exports
from moeplan.specs import Workload, cluster_names, load_cluster, load_model, model_names

WORKLOAD = Workload(phase="both", batch=32, isl=2048, osl=256)
#: presets of the every-family grids (slow; shared with the consistency and runtime grids):
#: the models before the 2026 presets plus one Gated-DeltaNet and one Mamba-2 hybrid. The
#: other 2026 presets are planned with the colocated family on every cluster below, and with
#: every family by ``python bench/bench_configs.py plan`` (each ~2 min of planning).
EVERY_FAMILY_MODELS = (
    "deepseek-v2", "deepseek-v2-lite", "deepseek-v3", "kimi-k2", "qwen2-57b-a14b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b", "gpt-oss-120b",
    "qwen3.5-35b-a3b", "nemotron-3-nano-30b-a3b",
)  # fmt: skip


def grid_models(families) -> list[str]:
    """The presets a grid of ``families`` plans (every preset for the colocated family)."""
    return model_names() if tuple(families) == ("strategy",) else list(EVERY_FAMILY_MODELS)


@functools.cache  # shared with tests/test_runtime_preset_grid.py (the same planning, ~40 s)
def planned(families):
    """(model, cluster, PlanResult) of every pair of :func:`grid_models` that fits."""
    out = []
    for mn in grid_models(families):
        for cn in cluster_names():
            m, c = load_model(mn), load_cluster(cn)
            try:
                out.append(
                    (mn, cn, plan(m, c, WORKLOAD, cost_model_for(c, None), families=families))
                )
            except MoeplanError as err:
                assert "fits no family" in str(err) or "no MixServe strategy" in str(err), err
    return out


def check_exports(mn, cn, result) -> dict[str, int]:
    """Every launched node passes its engine's rules; a refusal says why. Returns counts."""
    exports = launch_exports(
        result, result.winner.plan, model_path=f"org/{mn}", full_layers=load_model(mn).num_layers
    )
    t = cons.Target.of(result.model, result.cluster)
    strat = next(c for c in result.candidates if c.family == "strategy")
    seen = {"sglang": 0, "vllm": 0, "refused": 0, "deepep": 0, "no_model_class": 0,
            "trtllm": 0, "trtllm_refused": 0}  # fmt: skip
    for engine, ex in exports.items():
        assert ex.text.startswith("#!/usr/bin/env bash\nset -euo pipefail\n")
        assert ("vllm-ascend" in ex.text) == (cn == "mixserve-910b")
        assert "org/" + mn in ex.text and f" {mn} " not in ex.text.split("model path:")[1][:60]
        if ex.label is None and engine == "trtllm":  # no model class, SM, or layout: says why
            assert ex.text.rstrip().endswith("exit 1"), (mn, cn)
            seen["trtllm_refused"] += 1
            continue
        if ex.label is None and "has no model class" in ex.text:  # the pinned SGLang release
            assert engine == "sglang" and ex.text.rstrip().endswith("exit 1"), (mn, cn)
            seen["no_model_class"] += 1
            continue
        if ex.label is None:  # the engine can run none of the strategies: say so, exit 1
            assert engine == "vllm" and ex.text.rstrip().endswith("exit 1"), (mn, cn, engine)
            assert all(
                s.strategy.moe_tp > 1 and s.strategy.moe_ep > 1 for s in strat.detail.strategies
            ), (mn, cn)
            assert "cannot express" in ex.text
            seen["refused"] += 1
            continue
        first = ex.deployment["servers"][0]  # node_args: its command on every node it spans
        if engine == "trtllm":  # one MPI job started from the first node runs every node
            assert len(ex.node_args) == 1 or len(ex.node_args) == len(first["nodes"]), (mn, cn)
        else:
            assert len(ex.node_args) == len(first["nodes"]), (mn, cn)
        world = first["gpus"]
        for srv in ex.deployment["servers"]:  # each server's GPUs are its degrees'
            assert srv["gpus"] == srv["attn_tp"] * srv["attn_dp"] * srv["pp"], (mn, cn)
        for rank, args in enumerate(ex.node_args):
            if engine == "sglang":
                assert not cons.check_sglang(args, t, gpus_used=world), (mn, cn, rank)
                seen["deepep"] += "deepep" in args
            elif args[0] == "vllm":
                assert not cons.check_vllm(args, t, gpus_used=world, node_rank=rank), (mn, cn)
        assert ex.gap >= 1 - TIE, (mn, cn, engine, ex.gap)  # nothing launchable beats the winner
        seen[engine] += 1
    return seen


def test_every_preset_pair_launches_or_says_why():
    rows = planned(("strategy",))
    totals = {"sglang": 0, "vllm": 0, "refused": 0, "deepep": 0, "no_model_class": 0,
              "trtllm": 0, "trtllm_refused": 0}  # fmt: skip
    for mn, cn, result in rows:
        for k, v in check_exports(mn, cn, result).items():
            totals[k] += v
    assert len(rows) >= 100  # 9 models x 15 clusters, less those that do not fit
    # SGLang expresses a colocated strategy of every model its pinned release has a class for
    assert totals["sglang"] + totals["no_model_class"] == len(rows)
    assert totals["no_model_class"] < len(rows) // 10
    assert totals["vllm"] + totals["refused"] == len(rows)
    # TensorRT-LLM launches or says why (a model class, the GPU's SM, a layout it cannot set)
    assert totals["trtllm"] + totals["trtllm_refused"] == len(rows) and totals["trtllm"] > 0
    assert 0 < totals["deepep"] < len(rows)


@pytest.mark.slow
def test_every_preset_pair_with_every_family():
    for mn, cn, result in planned(PROPOSING_FAMILIES):
        if any(c.family == "strategy" for c in result.candidates):
            check_exports(mn, cn, result)
        assert isinstance(result.winner.plan, Plan)
