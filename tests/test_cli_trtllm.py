"""``--engine trtllm`` on the serving commands: ``serve-sim`` runs TensorRT-LLM's scheduler
model with its own budgets and KV pool, and ``plan`` writes a TensorRT-LLM launch folder
(``trtllm-serve`` plus its YAML of LLM API options) that reads back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from cli_run import run_main
from moeplan.serve.knobs import engine_config
from moeplan.serve.layout import Layout
from moeplan.specs import load_cluster, load_model


def test_serve_sim_runs_trtllm_in_flight_batching(capsys):
    """serve-sim --engine trtllm: the mixed scheduler with max_batch_size 2048 and
    max_num_tokens 8192, and the KV pool of the scheduler model at the free-memory fraction
    the run reports (the engine's 0.9 or one the knob search tried)."""
    code, out, err = run_main(capsys, "serve-sim", "--model", "qwen3-30b-a3b", "--cluster",
                              "h100-sxm-8", "--engine", "trtllm", "--requests", "50", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    e = d["engine"]
    assert (e["name"], e["policy"], e["chunk_tokens"], e["max_running"]) == (
        "trtllm", "mixed", 8192, 2048,
    )  # fmt: skip
    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    lay = Layout(**{k: d["layout"][k] for k in ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp")})
    f = e["mem_fraction"]
    assert 0.0 < f < 1.0
    assert e["kv_tokens"] == engine_config("trtllm", m, c, lay, mem_fraction=f).kv_tokens
    assert d["metrics"]["output_tokens_per_s_per_gpu"] > 0


def test_trtllm_is_one_of_the_engines_serve_sim_refuses_others_by_name(capsys):
    code, out, err = run_main(capsys, "serve-sim", "--model", "qwen3-30b-a3b", "--cluster",
                              "h100-sxm-8", "--engine", "tgi", "--requests", "50")  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "trtllm" in err


@pytest.mark.slow
def test_plan_with_trtllm_writes_a_trtllm_launch_folder(tmp_path):
    """plan --engine trtllm (8 layers, 100 requests): the winner is served by the mixed
    scheduler, launch/trtllm/ holds launch.sh and one YAML per server, every server command
    is a single-node trtllm-serve whose YAML is the file beside it and parses."""
    out = tmp_path / "o"
    p = subprocess.run(
        [sys.executable, "-m", "moeplan", "plan", "--model", "qwen3-30b-a3b", "--cluster",
         "h100-sxm-8", "--layers", "8", "--requests", "100", "--families", "strategy",
         "--engine", "trtllm", "--out", str(out), "--json", "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["winner"]["engine"]["policy"] == "mixed"
    folder = out / "launch" / "trtllm"
    dep = json.loads((out / "launch" / "deployment.json").read_text())["trtllm"]
    assert dep is not None and dep["gpus"] == d["winner"]["gpus"]
    script = (folder / "launch.sh").read_text()
    configs = sorted(folder.glob("*.yaml"))
    assert len(configs) == sum(p["instances"] for p in dep["pools"].values())
    for cfg in configs:
        opts = yaml.safe_load(cfg.read_text())
        assert opts["enable_chunked_prefill"] is True
        assert f'"${{HERE}}/{cfg.name}"' in script
    assert "trtllm-serve" in script and "--kv_cache_free_gpu_memory_fraction 0.9" in script
    assert len(configs) == d["winner"]["replicas"]
