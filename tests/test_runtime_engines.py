"""Engine registry, Plan round trip into the runtime, and the Sem-MoE shuffle plan."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from moeplan.errors import MoeplanError
from moeplan.planners.plan import PLAN_FAMILIES, Plan
from moeplan.runtime.comm.shuffle import shuffle_plan
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines import FAMILY_ENGINES, engine_for
from moeplan.runtime.mesh import mesh_from_plan
from moeplan.runtime.options import RunOptions
from moeplan.runtime.runner import prepare

CFG = MoEConfig(hidden_size=48, num_heads=12, num_layers=2, num_experts=12, top_k=3)


def _plan(family: str, layout: dict, details: dict | None = None) -> Plan:
    return Plan(
        family=family,
        model="",
        cluster="test",
        layout=layout,
        details=details or {},
        predicted={"prefill_tokens_per_s": 1.5e4, "ttft_s": float("inf")},
    )


def _module(kind: str, layer: int, tp: int, ep: int, dpmoe: int) -> dict:
    return {"kind": kind, "layer": layer, "tp": tp, "ep": ep, "dpmoe": dpmoe}


PLANS = {
    "ep": _plan(
        "ep",
        {"world_size": 4, "attn": {"tp": 1, "dp": 4}, "moe": {"tp": 1, "ep": 4}, "pp": 1},
        {"placement": {"physical_to_logical_map": [list(range(12))[::-1], list(range(12))]}},
    ),
    "strategy": _plan(
        "strategy",
        {"world_size": 4, "attn": {"tp": 2, "dp": 2}, "moe": {"tp": 2, "ep": 2}, "pp": 1},
        {"fused": True},
    ),
    "strategy_tp_ep": _plan(
        "strategy",
        {"world_size": 3, "attn": {"tp": 3, "dp": 1}, "moe": {"tp": 1, "ep": 3}, "pp": 1},
        {"token_plan": "round_robin"},
    ),
    "strategy_pp": _plan(
        "strategy",
        {"world_size": 4, "attn": {"tp": 2, "dp": 1}, "moe": {"tp": 1, "ep": 2}, "pp": 2},
    ),
    "pipeline": _plan(
        "pipeline",
        {
            "world_size": 4,
            "pp": 2,
            "stages": [
                {"modules": [_module("attn", 0, 2, 1, 1), _module("mlp", 0, 1, 1, 2)]},
                {"modules": [_module("attn", 1, 1, 1, 2), _module("moe", 1, 1, 2, 1)]},
            ],
        },
        {"microbatches": 3, "async_pp": False},
    ),
    "dep": _plan(
        "dep",
        {"world_size": 3, "ag": 1, "eg": 2},
        {"ma": 2, "r1": 2, "r2": 2, "order": "AASS", "seq_len": 8},
    ),
}


def test_every_plan_family_has_an_engine():
    """The registry covers exactly the families the Plan type admits."""
    assert set(FAMILY_ENGINES) == set(PLAN_FAMILIES)
    assert {p.family for p in PLANS.values()} == set(PLAN_FAMILIES)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plan_round_trips_through_plan_json_into_the_same_mesh(name):
    """plan -> plan.json text -> Plan -> mesh equals the mesh of the original plan (and of the
    decoded JSON object), and the family's engine accepts it."""
    plan = PLANS[name]
    text = plan.to_json()
    back = Plan.from_json(text)
    assert back.to_dict() == json.loads(text)
    mesh = mesh_from_plan(plan, plan.world_size)
    assert mesh_from_plan(back, plan.world_size) == mesh
    assert mesh_from_plan(json.loads(text), plan.world_size) == mesh
    engine = engine_for(mesh, CFG)
    assert engine.mesh.world_size == plan.world_size


def test_planner_strategy_plan_round_trips_into_the_runtime():
    """A plan built by the MixServe planner itself survives plan.json into an equal mesh."""
    from moeplan.cost import cost_model_for
    from moeplan.planners.rank import strategy_candidate
    from moeplan.specs import Workload, load_cluster, load_model

    cluster = load_cluster("smidt-a40")
    cand = strategy_candidate(
        load_model("qwen3-235b-a22b"), cluster, Workload(), cost_model_for(cluster)
    )
    back = Plan.from_json(cand.plan.to_json())
    assert mesh_from_plan(back) == mesh_from_plan(cand.plan)


def test_prepare_accepts_a_plan_and_its_json_object_alike():
    """prepare(Plan) and prepare(dict) build the same engine and global batch."""
    opts = RunOptions(config=CFG, tokens=48, seq=8)
    for plan in PLANS.values():
        a, batch_a = prepare(plan, plan.world_size, opts)
        b, batch_b = prepare(json.loads(plan.to_json()), plan.world_size, opts)
        assert (type(a), a.mesh, a.cfg, batch_a) == (type(b), b.mesh, b.cfg, batch_b)


def test_strategy_family_picks_its_engine_by_layout():
    """strategy: hybrid TP-EP, Sem-MoE attention TP (attn.tp = moe.ep = W), or PP stages."""
    kinds = {
        name: type(engine_for(mesh_from_plan(PLANS[name]), CFG)).__name__
        for name in ("strategy", "strategy_tp_ep", "strategy_pp")
    }
    assert kinds == {
        "strategy": "HybridEngine",
        "strategy_tp_ep": "TpEpEngine",
        "strategy_pp": "PipelineEngine",
    }


def test_hand_written_plan_without_model_runs_the_default_model():
    """A decoded plan.json object may omit model and cluster (hand-written runtime plans)."""
    raw = {k: v for k, v in PLANS["strategy"].to_dict().items() if k not in ("model", "cluster")}
    engine, _ = prepare(raw, 4, RunOptions(tokens=64, seq=8))
    assert engine.cfg == MoEConfig()


def test_non_object_plan_is_a_one_line_user_error():
    with pytest.raises(MoeplanError, match=r"plan \(list\) must be a JSON object"):
        mesh_from_plan([1, 2])  # type: ignore[arg-type]


@given(
    dest=st.lists(st.integers(0, 7), max_size=60),
    extra=st.integers(0, 3),
)
def test_shuffle_plan_groups_tokens_by_device_in_order(dest, extra):
    """Slot c*cap+j holds the j-th token (in batch order) sent to device c; the rest is -1."""
    n = (max(dest) + 1 if dest else 1) + extra
    plan = shuffle_plan(torch.tensor(dest, dtype=torch.long), n)
    groups = [[t for t, d in enumerate(dest) if d == c] for c in range(n)]
    assert plan.cap == max(1, *(len(g) for g in groups))
    expect = [g[j] if j < len(g) else -1 for g in groups for j in range(plan.cap)]
    assert plan.order.tolist() == expect
    assert plan.counts.tolist() == [len(g) for g in groups]
    assert plan.num_tokens == len(dest)
