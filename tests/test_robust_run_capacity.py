"""``moeplan run`` refuses, before spawning, what this machine cannot hold: more ranks than
its cores carry, or a model (a tampered plan's config) whose weights alone exceed its memory.
Oracle: the bounds computed by hand from the config's shapes."""

from __future__ import annotations

import json

import pytest

from moeplan.errors import MoeplanError
from moeplan.runtime import capacity
from moeplan.runtime.config import MoEConfig


def test_weight_bytes_by_hand():
    cfg = MoEConfig(hidden_size=64, num_heads=8, num_layers=2, num_experts=16,
                    moe_intermediate_size=32, shared_intermediate_size=32)  # fmt: skip
    per_layer = 4 * 64 * 64 + 16 * 3 * 64 * 32 + 3 * 64 * 32 + 64 * 16
    assert capacity.weight_bytes(cfg) == 4 * 2 * per_layer


def test_world_beyond_the_cores_is_refused():
    cfg = MoEConfig()
    capacity.check_capacity(16, cfg, 64, cores=2, available=2**40)
    with pytest.raises(MoeplanError, match=r"--nproc \(64\) must be at most 8 ranks per CPU core"):
        capacity.check_capacity(64, cfg, 64, cores=2, available=2**40)


def test_memory_beyond_the_machine_is_refused():
    cfg = MoEConfig()
    base = 4 * capacity.RANK_BASE_BYTES + capacity.weight_bytes(cfg) + 4 * 64 * cfg.hidden_size
    capacity.check_capacity(4, cfg, 64, cores=4, available=base)
    with pytest.raises(MoeplanError, match=r"run needs at least .* GiB available"):
        capacity.check_capacity(4, cfg, 64, cores=4, available=base - 1)


def test_cli_refuses_a_tampered_model_before_spawning(tmp_path, capsys, monkeypatch):
    from moeplan.cli import main
    from moeplan.runtime import spawn
    from moeplan.specs.presets import model_config

    cfg = dict(model_config("mixtral-8x7b"))
    cfg.update(hidden_size=2**20, num_attention_heads=1024, num_key_value_heads=1024)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    plan = {"schema": "moeplan.plan/1", "family": "strategy",
            "model": str(tmp_path / "config.json"),
            "layout": {"world_size": 2, "attn": {"tp": 1, "dp": 2}, "moe": {"tp": 1, "ep": 2},
                       "pp": 1}}  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    monkeypatch.setattr(spawn, "spawn_world", lambda *a, **k: pytest.fail("spawned"))
    with pytest.raises(SystemExit) as ex:
        main(["run", "--plan", str(tmp_path / "plan.json"), "--scale", "full", "--tokens", "64"])
    err = capsys.readouterr().err.strip().splitlines()
    assert ex.value.code == 2 and len(err) == 1 and "run needs at least" in err[0]
