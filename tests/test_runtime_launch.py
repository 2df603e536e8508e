"""Launch paths: ``moeplan run`` (spawns its ranks), torchrun, bad plans, dead ranks, CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unittest

import pytest
import torch

from moeplan.cli import main
from moeplan.runtime.spawn import RUN_GRACE_S, init_distributed, spawn_world


def _cli(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as ex:
        return int(ex.code or 0)
    return 0


def _write(tmp_path, plan: dict, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(plan))
    return str(path)


def _dep_plan(ag: int = 1, eg: int = 1) -> dict:
    return {
        "schema": "moeplan.plan/1",
        "family": "dep",
        "layout": {"world_size": ag + eg, "ag": ag, "eg": eg},
        "details": {"ma": 2, "r1": 2, "r2": 2, "order": "ASAS"},
    }


def _ep_plan(w: int) -> dict:
    return {
        "schema": "moeplan.plan/1",
        "family": "ep",
        "layout": {"world_size": w, "attn": {"tp": 1, "dp": w}, "moe": {"tp": 1, "ep": w}, "pp": 1},
    }


@pytest.mark.timeout(240)
def test_cli_run_dep_checks_reference_and_writes_measured_and_predicted(tmp_path, capsys):
    """One command: reference check passes, measured trace has every rank, simulator trace beside it."""
    trace = tmp_path / "dep.json"
    assert (
        _cli(["run", "--plan", _write(tmp_path, _dep_plan()), "--timeline", str(trace), "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["max_abs_err"] <= 1e-5
    measured = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in measured if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    names = {e["name"] for e in spans}
    assert {"A0.0", "S0.1", "E1.1.1"} <= names  # attention, shared, expert tasks all recorded
    predicted = json.loads((tmp_path / "dep.predicted.json").read_text())
    sim_names = {e["name"] for e in predicted["traceEvents"] if e["ph"] == "X"}
    assert {"A0.0", "S0.1", "E1.1.1", "A2E1.1.1", "E2A1.1.1"} <= sim_names
    assert predicted["otherData"]["predicted_makespan_s"] > 0


def test_cli_run_world_mismatch_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--plan", _write(tmp_path, _ep_plan(4)), "--nproc", "2"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "moeplan: error: plan.layout.world_size (4) must equal the launch world size (2)"
    ]


def test_cli_run_bad_json_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(SystemExit) as info:
        main(["run", "--plan", str(path)])
    assert info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.timeout(120)
def test_torchrun_mismatched_plan_same_error_on_every_rank(tmp_path):
    """A plan for 3 ranks launched on 2: each rank prints the same line and exits 2, no hang."""
    plan = _write(tmp_path, _ep_plan(3))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        "moeplan.runtime.launch",
        "--plan",
        plan,
    ]
    start = time.monotonic()
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert time.monotonic() - start < 100
    line = "moeplan: error: plan.layout.world_size (3) must equal the launch world size (2)"
    assert proc.stderr.count(line) == 2, proc.stderr[-2000:]
    assert proc.returncode != 0
    assert "exitcode  : 2" in proc.stderr


def _dies(rank: int, world: int) -> str:
    init_distributed(rank, world, timeout_s=5)
    import torch.distributed as dist

    if rank == 1:
        os._exit(3)
    x = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(x)
    return "finished"


@pytest.mark.timeout(120)
def test_dead_rank_makes_the_others_fail_not_hang():
    """Rank 1 dies after init; rank 0's collective raises (timeout or closed peer) in bounded time."""
    start = time.monotonic()
    reports = spawn_world(_dies, 2, deadline_s=60)
    assert time.monotonic() - start < 60
    assert reports[1]["kind"] == "died"
    assert not reports[0]["ok"] and reports[0]["kind"] == "runtime", reports[0]
    assert "\n" not in reports[0]["error"]


def _cuda_ep(rank: int, world: int) -> float:
    from moeplan.runtime.runner import RunOptions, run_rank

    init_distributed(rank, world, backend="nccl")
    return run_rank(rank, world, _ep_plan(world), RunOptions(tokens=32, seq=8))["max_abs_err"]


@unittest.skipUnless(torch.cuda.is_available() and torch.cuda.device_count() >= 2, "needs 2 GPUs")
def test_nccl_ep_engine_matches_reference():
    reports = spawn_world(_cuda_ep, 2, deadline_s=120)
    assert all(r["ok"] for r in reports), reports
    assert max(r["result"] for r in reports) <= 1e-4  # TF32/cuBLAS on GPU; fp32 on CPU is 1e-5


def _stalls(rank: int, world: int) -> str:
    init_distributed(rank, world, timeout_s=3)
    import torch.distributed as dist

    if rank == 1:
        time.sleep(12)  # alive but never joins the collective
        os._exit(0)
    dist.all_reduce(torch.ones(2))
    return "finished"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_stalled_rank_gives_timeout_error_not_hang():
    """A peer that never joins: the collective times out (init_process_group timeout).
    The stalled peer is stopped ``RUN_GRACE_S`` after that (what ``moeplan run`` gives it), not
    after the 10 s default: only rank 0's report is checked."""
    start = time.monotonic()
    reports = spawn_world(_stalls, 2, deadline_s=60, grace_s=RUN_GRACE_S)
    assert time.monotonic() - start < 60
    assert not reports[0]["ok"] and reports[0]["kind"] == "runtime"
    assert "timed out" in reports[0]["error"].lower() or "timeout" in reports[0]["error"].lower()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_findep_planner_plan_runs_and_matches_reference(tmp_path, capsys):
    """plan.json written by ``moeplan dep`` (real spec, FinDEP solver) executes and checks out."""
    plan = tmp_path / "dep" / "plan.json"
    assert (
        _cli(
            [
                "dep",
                "--model",
                "deepseek-v2-lite",
                "--cluster",
                "findep-a",
                "--isl",
                "16",
                "--ag",
                "1",
                "--eg",
                "1",
                "--layers",
                "2",
                "--max-batch",
                "4",
                "--out",
                str(plan.parent),
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert _cli(["run", "--plan", str(plan), "--timeline", str(tmp_path / "t.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["max_abs_err"] <= 1e-5
    assert (tmp_path / "t.predicted.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mixserve_planner_plan_runs_on_eight_ranks(tmp_path, capsys):
    """plan.json of the best MixServe strategy (8 GPUs) executes on 8 CPU ranks and checks out;
    ``run --plan`` takes the ``--out`` folder that holds it."""
    plan = tmp_path / "s"
    assert (
        _cli(
            [
                "strategy",
                "--model",
                "qwen3-30b-a3b",
                "--cluster",
                "h100-sxm-8",
                "--out",
                str(plan),
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert _cli(["run", "--plan", str(plan), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["world_size"] == 8 and out["max_abs_err"] <= 1e-5


@pytest.mark.timeout(240)
def test_cli_run_reads_safetensors_weights(tmp_path, capsys):
    """--weights: a complete file runs and checks out; a file missing a tensor is one-line exit 2."""
    from moeplan.runtime.config import MoEConfig
    from moeplan.runtime.layers.model import init_model
    from moeplan.runtime.layers.weights import save_safetensors

    good = tmp_path / "good.safetensors"
    save_safetensors(init_model(MoEConfig(), seed=9), good)
    plan = _write(tmp_path, _ep_plan(2))
    assert _cli(["run", "--plan", plan, "--weights", str(good), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["max_abs_err"] <= 1e-5
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(good))
    del tensors["model.layers.1.mlp.experts.3.up_proj.weight"]
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad))
    assert _cli(["run", "--plan", plan, "--weights", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all("experts.3.up_proj.weight" in line for line in err)


def test_cli_run_bad_token_plan_is_one_line_exit_2(tmp_path, capsys):
    """Layout/details errors are caught before any process starts."""
    plan = {
        "schema": "moeplan.plan/1",
        "family": "strategy",
        "layout": {"world_size": 2, "attn": {"tp": 2, "dp": 1}, "moe": {"tp": 1, "ep": 2}, "pp": 1},
        "details": {"token_plan": "psychic"},
    }
    assert _cli(["run", "--plan", _write(tmp_path, plan)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plan.details.token_plan ('psychic')" in err[0]


def test_more_ranks_than_gpus_is_one_line_before_any_process(tmp_path, capsys, monkeypatch):
    """NCCL refuses two ranks on one GPU ("Duplicate GPU detected", seen on an H100); the CLI
    says so in one line, exit 2, before spawning (CUDA faked: one device)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert _cli(["run", "--plan", _write(tmp_path, _dep_plan())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nproc (2) exceeds this machine's CUDA devices (1)" in err[0]
