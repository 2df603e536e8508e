"""TensorRT-LLM launch folders: ``trtllm-serve`` commands and their YAML of LLM API options,
read back through the options and fields TensorRT-LLM's 1.2 source declares
(``bench/data/trtllm_1.2_llm_api.json``, checked by ``bench/engine_parsers.py``'s
``trtllm_source_check``; ``bench/check_exports.py`` runs the same check on every preset's
launch folder, and the wheel's own classes where it is installed)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from argv_recorder import recorder
from moeplan.export import constraints as cons
from moeplan.export.plan_export import PREFILL_UNIT, ExportContext, Option, engine_export
from moeplan.export.trtllm import YAML_KEYS, llm_api_options, render_yaml, unexpressible
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.specs import load_cluster, load_model

BENCH = Path(__file__).resolve().parents[1] / "bench"
_spec = importlib.util.spec_from_file_location("engine_parsers", BENCH / "engine_parsers.py")
assert _spec is not None and _spec.loader is not None
parsers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(parsers)
FACTS = yaml.safe_load((BENCH / "data" / "trtllm_1.2_llm_api.json").read_text())


def export(model: str, cluster: str, lay: Layout, knobs=None, redundant: int = 0, nodes=1):
    m, c = load_model(model), load_cluster(cluster, nodes)
    opt = Option(strategy=lay, label="x", family="strategy", per_gpu=1.0, unit=PREFILL_UNIT,
                 knobs=knobs, redundant=redundant)  # fmt: skip
    ctx = ExportContext(model_path="org/m", target=cons.Target.of(m, c),
                        planned_layers=m.num_layers, full_layers=m.num_layers)  # fmt: skip
    return engine_export("trtllm", SimpleNamespace(model=m, cluster=c), ctx, [opt])


def launched(tmp: Path, ex, rank: int = 0, nodes: int = 1) -> list[list[str]]:
    """Every command ``ex``'s launch.sh runs on node ``rank`` (recording stand-ins for
    ``trtllm-serve`` and ``mpirun``), its files written beside it as ``plan`` writes them."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for exe in ("trtllm-serve", "mpirun"):
        (bin_dir / exe).write_text(recorder())
        (bin_dir / exe).chmod(0o755)
    for name, text in ex.files.items():
        (tmp / name).write_text(text)
    log = tmp / f"argv{rank}"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_LOG": str(log), "NODE_RANK": str(rank)}
    env |= {f"NODE_{r}_ADDR": f"10.0.0.{r + 1}" for r in range(nodes)}
    p = subprocess.run(["bash", str(tmp / "launch.sh")], env=env, capture_output=True)
    assert p.returncode == 0, p.stderr
    cmds, cur = [], []
    for item in log.read_bytes().split(b"\0")[:-1] if log.exists() else []:
        if item == b"<end>":
            cmds.append(cur)
            cur = []
        else:
            cur.append(item.decode())
    return cmds


def served(cmds: list[list[str]]) -> list[list[str]]:
    """The ``trtllm-serve`` arguments of each recorded command (after an MPI prefix)."""
    return [c[c.index("trtllm-serve") + 1 :] for c in cmds if "trtllm-serve" in c]


def test_the_yaml_keys_are_llm_api_fields():
    """Every key moeplan may write is a TorchLlmArgs field of the 1.2 source."""
    assert set(FACTS["TorchLlmArgs"]) >= YAML_KEYS
    assert {"free_gpu_memory_fraction", "dtype"} <= set(FACTS["KvCacheConfig"])
    assert "WIDEEP" in FACTS["MoeConfig.backend"]


def test_attention_dp_launch_parses(tmp_path):
    """Qwen3-30B-A3B on one H100 node, attention DP8 x EP8: one trtllm-serve with tp_size 8,
    ep_size 8 and enable_attention_dp in its YAML; both read back by the source check."""
    ex = export("qwen3-30b-a3b", "h100-sxm-8", Layout(attn_dp=8, moe_ep=8))
    assert ex.label == "x" and set(ex.files) == {"launch.sh", "stop.sh", "colocated-0.yaml"}
    opts = yaml.safe_load(ex.files["colocated-0.yaml"])
    assert opts == {"enable_attention_dp": True, "enable_chunked_prefill": True}
    (argv,) = served(launched(tmp_path, ex))
    f = cons.flags(argv)
    assert (f["--tp_size"], f["--ep_size"], f["--pp_size"]) == ("8", "8", "1")
    assert (f["--max_batch_size"], f["--max_num_tokens"]) == ("2048", "8192")
    assert f["--kv_cache_free_gpu_memory_fraction"] == "0.9"
    assert f["--extra_llm_api_options"] == str(tmp_path / "colocated-0.yaml")
    parsers.trtllm_source_check(argv)


def test_knobs_go_into_the_yaml(tmp_path):
    """MTP, an fp8 KV cache and redundant experts: speculative_config MTP, kv_cache_config
    dtype fp8 and the WIDEEP MoE backend with E + R slots; MoE TP x EP both > 1 writes
    moe_tensor_parallel_size. The YAML's kv_cache_config replaces the one the fraction flag
    built (TensorRT-LLM's update_llm_args_with_extra_dict merges ``llm_args |
    llm_args_dict``, a key's whole value), so it repeats the flag's fraction."""
    knobs = InstanceKnobs(mtp=1, mtp_accept=0.7, kv_dtype="fp8", mem_fraction=0.8)
    ex = export("deepseek-v3", "h200-sxm-8", Layout(attn_dp=8, moe_ep=8), knobs, redundant=8)
    opts = yaml.safe_load(ex.files["colocated-0.yaml"])
    assert opts["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 1}
    assert opts["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.8}
    assert opts["moe_config"] == {"backend": "WIDEEP", "load_balancer": {"num_slots": 264}}
    (argv,) = served(launched(tmp_path, ex))
    assert cons.flags(argv)["--kv_cache_free_gpu_memory_fraction"] == "0.8"
    parsers.trtllm_source_check(argv)
    hybrid = llm_api_options(Layout(attn_tp=8, moe_tp=2, moe_ep=4), None, 0, 128)
    assert hybrid["moe_tensor_parallel_size"] == 2
    assert yaml.safe_load(render_yaml(hybrid)) == hybrid


def test_the_source_check_refuses_what_trtllm_refuses(tmp_path):
    """Controls: an unknown flag, an unknown YAML key, slots not divisible by EP."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("enable_attention_dp: true\n")
    ok = ["m", "--tp_size", "8", "--ep_size", "8", "--extra_llm_api_options", str(cfg)]
    parsers.trtllm_source_check(ok)
    with pytest.raises(ValueError, match="no such option"):
        parsers.trtllm_source_check([*ok, "--no_such_flag", "1"])
    cfg.write_text("enable_attention_dp: true\nno_such_key: 1\n")
    with pytest.raises(ValueError, match="extra inputs are not permitted"):
        parsers.trtllm_source_check(ok)
    cfg.write_text("moe_config:\n  backend: WIDEEP\n  load_balancer:\n    num_slots: 260\n")
    with pytest.raises(ValueError, match="divisible"):
        parsers.trtllm_source_check(ok)


def test_a_server_over_two_nodes_is_one_mpi_job_from_the_first(tmp_path):
    """DeepSeek-V3 on 2 x 8 H100, attention DP16 x EP16: node 0 starts mpirun over both
    nodes' 8 GPUs (16 ranks) running trtllm-llmapi-launch trtllm-serve; node 1 runs nothing."""
    ex = export("deepseek-v3", "h100-sxm-8", Layout(attn_dp=16, moe_ep=16), nodes=2)
    assert ex.label == "x" and ex.deployment["gpus"] == 16
    (cmd,) = launched(tmp_path, ex, 0, 2)
    assert cmd[:7] == ["mpirun", "--allow-run-as-root", "-H", "10.0.0.1:8,10.0.0.2:8", "-np",
                       "16", "trtllm-llmapi-launch"]  # fmt: skip
    (argv,) = served([cmd])
    assert cons.flags(argv)["--tp_size"] == "16"
    parsers.trtllm_source_check(argv)
    assert launched(tmp_path, ex, 1, 2) == []


def test_what_trtllm_serve_cannot_run_is_refused_with_the_rule():
    """Attention TP x DP, DeepSeek-V2 (no PyTorch-backend class), Mixtral with attention DP:
    a refusal naming the rule, nothing launched."""
    assert "enable_attention_dp" in unexpressible(Layout(attn_tp=2, attn_dp=4, moe_ep=8))
    ex = export("deepseek-v2-lite", "h100-sxm-8", Layout(attn_tp=8, moe_ep=8))
    assert ex.label is None and "no model class" in ex.text
    ex = export("mixtral-8x7b", "h100-sxm-8", Layout(attn_dp=8, moe_ep=8))
    assert ex.label is None and "enable_attention_dp" in ex.text
