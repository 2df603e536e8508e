"""Inputs that were accepted silently (or failed late) are refused up front, one line, exit 2:
``cost moe`` with more experts per token than experts, an inline ``--expert-counts`` list
(accepted now, as the help says), traces that route nothing, a corrupt or special-file
``plan --trace`` when the winner needs no placement."""

from __future__ import annotations

import numpy as np
import pytest

from cli_run import run_main
from moeplan.traces.routing_trace import RoutingTrace
from moeplan.traces.trace_writer import save_trace


def _run(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(capsys, *args)


MOE = ("cost", "moe", "--hidden-size", "4096", "--inter-size", "14336")


def test_more_experts_per_token_than_experts_is_refused(capsys):
    code, _, err = _run(capsys, *MOE, "--topk", "9", "--num-experts", "8", "--num-tokens", "64")
    assert code == 2 and err.strip().count("\n") == 0
    assert "--topk (9) must be <= --num-experts (8)" in err


def test_inline_expert_counts_are_a_json_list_not_a_file(capsys):
    code, out, err = _run(capsys, *MOE, "--topk", "2", "--expert-counts", "[5,3]", "--json")
    assert code == 0, err
    assert '"num_experts": 2' in out and '"num_tokens": 4' in out  # 8 copies / top-2


def _unrouted(tmp_path, suffix=".npz", layers=2):
    n, k = 40, 2
    tr = RoutingTrace(
        request_id=np.repeat(np.arange(4), 10).astype(np.int64),
        position=np.tile(np.arange(10), 4).astype(np.int32),
        token_id=np.arange(n, dtype=np.int64),
        experts=np.full((n, layers, k), -1, dtype=np.int16),
        num_experts=8,
    )
    path = tmp_path / f"none{suffix}"
    save_trace(tr, str(path))
    return str(path)


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_a_trace_that_routes_nothing_is_refused_by_stats(tmp_path, capsys, suffix):
    code, _, err = _run(capsys, "trace", "stats", _unrouted(tmp_path, suffix))
    assert code == 2 and "every expert id is -1" in err


def test_a_trace_that_routes_nothing_is_refused_by_place(tmp_path, capsys):
    code, _, err = _run(
        capsys,
        "place",
        "--trace",
        _unrouted(tmp_path, layers=32),
        "--model",
        "mixtral-8x7b",
        "--ep",
        "2",
    )
    assert code == 2 and "every expert id is -1" in err


@pytest.mark.parametrize("bad", ["/dev/zero", "corrupt"])
def test_plan_reads_its_trace_before_planning(tmp_path, capsys, bad):
    """The winner of this plan has no EP, so the trace was never opened and a corrupt one
    (or /dev/zero) passed silently; it is now read before any planning."""
    path = bad if bad.startswith("/") else str(tmp_path / "t.npz")
    if not bad.startswith("/"):
        (tmp_path / "t.npz").write_bytes(b"PK\x03\x04 not a zip")
    code, _, err = _run(
        capsys,
        "plan",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "h100-sxm-8",
        "--families",
        "strategy",
        "--requests",
        "50",
        "--quiet",
        "--trace",
        path,
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("broken", ["missing tensor", "not safetensors"])
def test_run_refuses_bad_weights_before_spawning(tmp_path, capsys, monkeypatch, broken):
    """A --weights file every rank would refuse (a missing tensor, or not a safetensors file)
    was found inside the ranks: one line per rank. It is now one line, exit 2, and no
    process starts."""
    import json

    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    import moeplan.runtime.spawn as spawn
    from moeplan.runtime.config import MoEConfig
    from moeplan.runtime.layers.model import init_model
    from moeplan.runtime.layers.weights import save_safetensors

    def no_spawn(*a, **k):
        raise AssertionError("a process was spawned")

    monkeypatch.setattr(spawn, "spawn_world", no_spawn)
    path = tmp_path / "w.safetensors"
    if broken == "missing tensor":
        from safetensors.torch import load_file, save_file

        save_safetensors(init_model(MoEConfig(), seed=9), path)
        tensors = load_file(str(path))
        del tensors["model.layers.1.mlp.experts.3.up_proj.weight"]
        save_file(tensors, str(path))
    else:
        path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    plan = {
        "schema": "moeplan.plan/1",
        "family": "ep",
        "layout": {"world_size": 2, "attn": {"tp": 1, "dp": 2}, "moe": {"tp": 1, "ep": 2}, "pp": 1},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    code, _, err = _run(
        capsys, "run", "--plan", str(tmp_path / "plan.json"), "--weights", str(path)
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert ("experts.3.up_proj.weight" if broken == "missing tensor" else "safetensors") in lines[0]
