"""Front-door commands: JSON shapes, and one clear line with exit code 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moeplan.specs.presets import PRESETS


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=120
    )


def test_models_json():
    obj = json.loads(run("models", "--json").stdout)
    assert isinstance(obj, dict) and set(obj) == {"models"}  # one object, as every --json
    out = obj["models"]
    names = {r["name"] for r in out}
    assert "deepseek-v3" in names and "qwen3.5-35b-a3b" in names and len(out) == len(PRESETS)
    assert all({"name", "architecture", "params_total", "params_active"} <= r.keys() for r in out)


def test_clusters_json_is_an_object():
    obj = json.loads(run("clusters", "--json").stdout)
    assert isinstance(obj, dict) and set(obj) == {"clusters"}
    names = {r["name"] for r in obj["clusters"]}
    assert {"findep-a", "smidt-a40", "h100-sxm-8"} <= names


def test_inspect_json_with_cluster():
    p = run("inspect", "deepseek-v3", "--cluster", "h100-sxm-8", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"params_total", "params_active", "kv_bytes_per_token", "modules"} <= out.keys()
    assert {"name", "params", "flops_per_token"} <= out["modules"][0].keys()
    assert sum(m["params"] for m in out["modules"]) == out["params_total"]
    assert out["memory"]["gpus"] == 8


def test_calibrate_json():
    out = json.loads(run("calibrate", "--measured", "a100_sxm", "--json").stdout)
    f = out["fits"][0]
    assert {"op", "num_gpus", "r2", "heldout_median_ape", "heldout_p90_ape"} <= f.keys()
    assert 0 <= f["heldout_median_ape"] < 1


def _one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    "content,needles",
    [
        ("{not json", ("not valid JSON",)),
        ('{"hidden_size": 4096}', ("not a supported architecture", "MixtralForCausalLM")),
        ('{"model_type": "mixtral", "hidden_size": 4096}', ("missing required key",)),
        (
            json.dumps(
                {
                    "hidden_size": 0,
                    "num_hidden_layers": 2,
                    "vocab_size": 10,
                    "num_attention_heads": 2,
                    "num_experts": 4,
                    "num_experts_per_tok": 2,
                    "moe_intermediate_size": 8,
                    "model_type": "mixtral",
                }
            ),
            ("hidden_size", "(0)"),
        ),
        (
            json.dumps(
                {
                    "hidden_size": 64,
                    "num_hidden_layers": 2,
                    "vocab_size": 10,
                    "num_attention_heads": 2,
                    "num_experts": 6,
                    "num_experts_per_tok": 2,
                    "moe_intermediate_size": 8,
                    "n_routed_experts": 6,
                    "n_group": 4,
                    "model_type": "deepseek_v3",
                }
            ),
            ("num_experts (6)", "n_group (4)"),
        ),
        ("[1, 2]", ("JSON object",)),
    ],
)
def test_bad_config_gets_one_line(tmp_path, content, needles):
    f = tmp_path / "config.json"
    f.write_text(content)
    _one_line_error(run("inspect", str(f)), *needles)


def test_unknown_presets_get_one_line():
    _one_line_error(run("inspect", "gpt-9"), "gpt-9", "not a preset")
    _one_line_error(run("inspect", "mixtral-8x7b", "--cluster", "dgx-9"), "dgx-9", "not a preset")
    _one_line_error(run("calibrate", "--measured", "tpu"), "measured")
    _one_line_error(
        run("inspect", "mixtral-8x7b", "--cluster", "h100-sxm-8", "--nodes", "0"), "nodes"
    )


def test_missing_file_gets_one_line(tmp_path):
    _one_line_error(run("inspect", str(tmp_path / "nope.json")), "could not be read")


@pytest.mark.parametrize(
    "args,needle",
    [
        (("inspect", "mixtral-8x7b", "--no-such-flag"), "No such option"),
        (("no-such-command",), "No such command"),
        (("inspect", "mixtral-8x7b", "--context", "abc"), "--context"),
    ],
)
def test_usage_errors_get_one_line(args, needle):
    _one_line_error(run(*args), needle)
