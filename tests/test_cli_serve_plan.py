"""``serve-sim --plan`` on a plan written by ``moeplan plan`` simulates the deployment that
plan served — its instance, replicas, knobs, chunk and running cap — not a re-reading of the
family's layout (a DPMoE pipeline read back as one wide EP group served a different layout)."""

from __future__ import annotations

import json

import pytest

from cli_run import run_main
from moeplan.commands.serve_plan import layout_from_plan, served_deployment
from moeplan.errors import MoeplanError
from moeplan.planners.plan import Plan

BASE = ["serve-sim", "--requests", "120", "--isl", "1024", "--osl", "64", "--json"]
SERVED = {"attn_tp": 1, "attn_dp": 2, "moe_tp": 1, "moe_ep": 2, "pp": 1}


def _run(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(capsys, *args)


def _served_plan(serving: dict | None = None) -> Plan:
    """A SMIDT one-stage plan with DPMoE 2 over 4 GPUs, served as 2 replicas of DP2/EP2."""
    mods = [  # every one of qwen3-30b-a3b's 48 decoder layers (the plan's model)
        m
        for layer in range(48)
        for m in (
            {"kind": "attn", "layer": layer, "tp": 1, "ep": 1, "dpmoe": 4},
            {"kind": "moe", "layer": layer, "tp": 1, "ep": 2, "dpmoe": 2},
        )
    ]
    serving = (
        serving
        if serving is not None
        else {
            "family": "pipeline",
            "serve_layout": {**SERVED, "micro_batches": 1, "dense_tp": 1, "gpus": 2},
            "replicas": 2,
            "knobs": {"a2a": "nccl", "tbo": False, "mtp": 0, "mtp_accept": None, "kv_dtype": "fp8"},
            "engine": {"policy": "mixed", "chunk_tokens": 2048, "max_running": 48},
        }
    )
    return Plan(
        family="pipeline",
        model="qwen3-30b-a3b",
        cluster="h100-sxm-8",
        layout={"world_size": 4, "pp": 1, "stages": [{"modules": mods}]},
        predicted={"serving": serving},
    )


def test_the_served_record_is_read_back_exactly():
    plan = _served_plan()
    got = served_deployment(plan)
    assert got is not None and got.replicas == 2
    assert (got.layout.attn_dp, got.layout.moe_ep, got.layout.gpus) == (2, 2, 2)
    assert (got.chunk_tokens, got.max_running) == (2048, 48)
    # the family's layout alone reads a different deployment: one DP4/EP4 instance
    lay = layout_from_plan(plan)
    assert (lay.attn_dp, lay.moe_ep) == (4, 4)
    assert (
        served_deployment(Plan(family="strategy", model="m", cluster="c", layout={"world_size": 1}))
        is None
    )


@pytest.mark.parametrize(
    ("serving", "needle"),
    [
        ({"serve_layout": [1]}, "serve_layout"),
        ({"serve_layout": SERVED, "replicas": "2"}, "replicas"),
        ({"serve_layout": SERVED, "replicas": 0}, "replicas"),
        ({"serve_layout": {**SERVED, "attn_dp": 0}}, "attn_dp"),
        ({"serve_layout": SERVED, "engine": {"chunk_tokens": 1.5}}, "chunk_tokens"),
    ],
)
def test_a_corrupt_record_is_one_line_naming_the_field(serving, needle):
    with pytest.raises(MoeplanError, match=needle):
        served_deployment(_served_plan(serving))


def test_serve_sim_plan_equals_the_served_deployment_by_flags(capsys, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(_served_plan().to_json(), encoding="utf-8")
    c1, by_plan, e1 = _run(capsys, *BASE, "--rate", "6", "--plan", str(path))
    c2, by_flags, e2 = _run(
        capsys,
        *BASE,
        "--rate",
        "6",
        "--model",
        "qwen3-30b-a3b",
        "--cluster",
        "h100-sxm-8",
        "--attn-dp",
        "2",
        "--moe-ep",
        "2",
        "--replicas",
        "2",
        "--chunk-tokens",
        "2048",
        "--max-running",
        "48",
        "--a2a",
        "nccl",
        "--kv-dtype",
        "fp8",
    )
    assert c1 == c2 == 0, (e1, e2)
    a, b = json.loads(by_plan), json.loads(by_flags)
    assert a["layout"]["attn_dp"] == 2 and a["layout"]["moe_ep"] == 2  # not DP4/EP4
    assert a["knobs"]["kv_dtype"] == "fp8" and a["engine"]["max_running"] == 48
    assert a["layout"] == b["layout"] and a["knobs"] == b["knobs"]
    assert a["metrics"] == b["metrics"] and a["capacity"] == b["capacity"]
