"""Engine capability tables (moeplan.backends.capabilities): the facts against the engine
source lines quoted beside each oracle, and the rules that use them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan.backends import backend
from moeplan.cost.a2a import moe_backend
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs, resolve_knobs
from moeplan.serve.knobs import engine_config
from moeplan.specs import load_cluster, load_model
from moeplan.specs.architectures import ARCHITECTURES

SGLANG = backend("sglang")
VLLM = backend("vllm")
V32 = "tests/data/configs/deepseek-ai--DeepSeek-V3.2"


def test_sglang_facts_match_the_quoted_source():
    # sglang 0.5.14 models/gpt_oss.py:263: raise Exception("forward_deepep branch not
    # implemented yet")
    assert "gpt_oss.py:263" in SGLANG.deepep_blocker("GptOssForCausalLM", "fp8_block", "0.5.14")
    # models/glm4_moe.py: class GlmMoeDsaForCausalLM(DeepseekV2ForCausalLM) ->
    # deepseek_v2.py:1136 def forward_deepep
    assert SGLANG.deepep_blocker("GlmMoeDsaForCausalLM", "fp8_block", "0.5.14") is None
    # batch_overlap/operations_strategy.py:39/48/57: DeepseekV2DecoderLayer,
    # Qwen3MoeDecoderLayer, MiMoV2DecoderLayer only
    assert SGLANG.tbo_blocker("DeepseekV32ForCausalLM", "0.5.14") is None
    assert SGLANG.tbo_blocker("Qwen3_5MoeForConditionalGeneration", "0.5.14") is not None
    # models/mixtral.py MixtralAttention: tp_size = get_parallel().tp_size
    assert SGLANG.capability_blocker("attn_dp", "MixtralForCausalLM", "0.5.14") is not None
    # configs/model_config.py:526: DeepseekV32ForCausalLM -> DeepseekV3ForCausalLMNextN;
    # 0.5.3's model_config.py:222 maps DeepseekV3ForCausalLM only
    assert SGLANG.mtp_blocker("DeepseekV32ForCausalLM", "0.5.14") is None
    assert SGLANG.mtp_blocker("DeepseekV32ForCausalLM", "0.5.3") is not None
    # ep_moe/layer.py:210 (0.5.14) "Unquantized DeepEP MoE currently supports low_latency
    # mode only"
    assert "low_latency only (:210)" in SGLANG.deepep_blocker(
        "DeepseekV3ForCausalLM", "bfloat16", "0.5.14"
    )
    # arg_groups/speculative_hook.py:270 max_running_requests = 48
    assert SGLANG.mtp_running_cap("0.5.14")[0] == 48
    # vLLM: no speculative running cap; config/speculative.py:149 maps deepseek_v32 (0.11.0)
    assert VLLM.mtp_running_cap() is None
    assert VLLM.mtp_blocker("DeepseekV32ForCausalLM") is None


def test_versions_inherit_from_the_nearest_stated_release_and_say_so():
    r, note = SGLANG.caps.release("0.5.4.post2")
    assert r.version == "0.5.3" and "inherits" in note and "0.5.3" in note
    assert SGLANG.caps.release("0.5.9")[0].version == "0.5.5.post1"
    assert SGLANG.caps.release("0.5.14") == (SGLANG.caps.release("0.5.14")[0], "")
    assert VLLM.caps.release("0.10.2")[0].version == "0.11.0"  # older than every table
    assert VLLM.caps.release("0.19.0")[0].version == "0.11.0"


def test_attention_dp_table_agrees_with_the_pinned_launch_facts():
    """SGLang's launch gate (sglang.py ATTN_DP, pinned 0.5.23) and the 0.5.23 table say the
    same for every architecture moeplan reads that the release has a class for."""
    for arch in ARCHITECTURES:
        if SGLANG.model_class_blocker(arch) is not None:
            continue
        table = SGLANG.capability_blocker("attn_dp", arch, "0.5.23") is None
        assert table == (SGLANG.attn_dp_blocker(arch) is None), arch


def _decode(model: str) -> dict:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "moeplan", "serve-sim", "--model", model, "--cluster",
         "h200-sxm-8", "--nodes", "4", "--attn-dp", "32", "--moe-ep", "32", "--phase",
         "decode", "--batch-per-gpu", "64", "--context", "2048", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_deepseek_v32_gets_deepep_on_sglang_and_prices_near_v3():
    """DeepSeek-V3.2 is DeepSeek-V3's network plus the DSA indexer (sglang deepseek_v2.py
    holds both classes): on 4x8 H200 at attention DP 32 / EP 32 it runs DeepEP like V3 and
    its decode step is within 1.25x of V3's."""
    v32, v3 = _decode(V32), _decode("deepseek-v3")
    assert v32["knobs"]["a2a"] == v3["knobs"]["a2a"] == "deepep"
    ratio = v3["tokens_per_s_per_gpu"] / v32["tokens_per_s_per_gpu"]
    assert 0.8 < ratio < 1.25


def test_refused_combination_exits_2_with_one_line(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "moeplan", "serve-sim", "--model", "gpt-oss-120b", "--cluster",
         "a100-sxm-8", "--phase", "decode", "--batch-per-gpu", "8", "--context", "1024",
         "--attn-tp", "8", "--moe-tp", "8"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "mxfp4.py" in lines[0] and "SM80" in lines[0]


def test_kv_dtype_auto_is_one_dtype_in_time_and_memory():
    """``auto`` on a bf16-KV checkpoint stores bf16 (SGLang model_runner.py
    configure_kv_cache_dtype): the memory scale is bf16's and the wide-EP MLA reads price
    bf16 — both as an explicit ``--kv-dtype bf16``, neither as ``fp8``."""
    c = load_cluster("h200-sxm-8")
    m = load_model("deepseek-v3")
    lay = Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8)
    auto = resolve_knobs("sglang", m, c, lay, kv_dtype="auto")
    bf16 = resolve_knobs("sglang", m, c, lay, kv_dtype="bf16")
    fp8 = resolve_knobs("sglang", m, c, lay, kv_dtype="fp8")
    assert auto.kv_stored == bf16.kv_stored == "bf16" and fp8.kv_stored == "fp8"
    assert auto.kv_scale == bf16.kv_scale == 1.0 and fp8.kv_scale == 0.5
    from moeplan.kernel_tables import engine_cost_model

    cm = engine_cost_model(c, None, engine="sglang")
    t = {k: cm.wide_mla(m, 64, 1, 4096, k.kv_stored) for k in (auto, bf16, fp8)}
    assert t[auto] == t[bf16] and t[auto] > t[fp8]


def test_a2a_auto_on_a_bf16_checkpoint_is_not_the_fp8_deepep_path():
    c = load_cluster("h200-sxm-8")
    m = load_model("qwen3-30b-a3b")  # bf16 experts
    assert m.quant.experts.format.kernel_dtype == "bfloat16"
    assert moe_backend("auto", "sglang", m, c, 1, 8) == "nccl"
    with pytest.raises(MoeplanError, match="bfloat16"):
        moe_backend("deepep", "sglang", m, c, 1, 8)


def test_mtp_caps_the_running_batch_on_sglang_not_on_vllm():
    c = load_cluster("h200-sxm-8")
    m = load_model("deepseek-v3")
    lay = Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8)
    plain = engine_config("sglang", m, c, lay)
    spec = engine_config("sglang", m, c, lay, mtp=2)
    assert plain.max_running > 48 and spec.max_running == 48  # 48 // 8 per DP rank, x 8
    assert (
        engine_config("vllm", m, c, lay, mtp=2).max_running
        == engine_config("vllm", m, c, lay).max_running
    )
    assert InstanceKnobs().kv_stored == "bf16"


def test_release_order_puts_rc_before_and_post_after_the_release():
    from moeplan.backends.capabilities import version_key

    assert version_key("1.3.0rc20") < version_key("1.3.0") < version_key("1.3.0.post1")
    assert version_key("0.5.5") < version_key("0.5.5.post1") < version_key("0.5.6.post2")
    assert version_key("0.5.9") < version_key("0.5.14") < version_key("0.5.23")


def test_kv_auto_follows_each_engine_release():
    """SGLang 0.5.14 server_args.py:3416: DSA models store fp8_e4m3 on SM100+, bf16 below;
    vLLM 0.11.0 models/config.py:419 turns auto into fp8_ds_mla for DeepSeek-V3.2, 0.24.0
    keeps the model dtype unless the checkpoint states FP8 (utils/torch_utils.py:373)."""
    h200, b200 = load_cluster("h200-sxm-8").gpu, load_cluster("b200-sxm-8").gpu
    dsa = "DeepseekV32ForCausalLM"
    assert SGLANG.default_kv_dtype(dsa, False, h200, "0.5.14") == "bf16"
    assert SGLANG.default_kv_dtype(dsa, False, b200, "0.5.14") == "fp8"
    assert SGLANG.default_kv_dtype("DeepseekV3ForCausalLM", True, h200) == "fp8"
    assert VLLM.default_kv_dtype(dsa, False, h200, "0.11.0") == "fp8"
    assert VLLM.default_kv_dtype(dsa, False, h200, "0.24.0") == "bf16"
    assert VLLM.default_kv_dtype("DeepseekV3ForCausalLM", True, h200, "0.11.0") == "bf16"
    assert VLLM.default_kv_dtype("DeepseekV3ForCausalLM", True, h200, "0.24.0") == "fp8"


def test_tbo_refused_for_a_family_without_an_operation_split():
    c = load_cluster("h200-sxm-8")
    m = load_model("deepseek-v3")
    lay = Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8)
    assert resolve_knobs("sglang", m, c, lay, tbo=True).tbo
    fake = replace(m, architecture="Qwen3_5MoeForConditionalGeneration")
    with pytest.raises(MoeplanError, match="two-batch overlap"):
        resolve_knobs("sglang", fake, c, lay, a2a="auto", tbo=True)


@pytest.mark.parametrize("version", ["0.5.3", "0.5.5.post1", "0.5.14", "0.5.23"])
def test_sglang_nvfp4_deepep_decode_only(version):
    """NVFP4 experts under DeepEP run on the low-latency dispatch only: 0.5.3
    ep_moe/layer.py:489-491 (low-latency output -> forward_flashinfer_cutedsl; normal output
    asserts DeepGEMM fp8, :487) through 0.5.23 (moe_runner/flashinfer_cutedsl.py:624-626 takes
    DeepEPLLDispatchOutput): decode allowed, prefill and a colocated server refused."""
    arch = "DeepseekV3ForCausalLM"
    assert SGLANG.deepep_blocker(arch, "nvfp4", version, "decode") is None
    prefill = SGLANG.deepep_blocker(arch, "nvfp4", version, "prefill")
    assert "low-latency dispatch only (decode), not in prefill" in prefill
    assert f"({version})" in prefill
    assert "server that prefills" in SGLANG.deepep_blocker(arch, "nvfp4", version)
    # fp8 block experts run under both dispatches; int4 under neither
    assert SGLANG.deepep_blocker(arch, "fp8_block", version, "prefill") is None
    assert SGLANG.deepep_blocker(arch, "int4_wo", version, "decode") is not None


def test_sglang_nvfp4_deepep_decode_launch_flags():
    """The decode server's flags: the runner that takes the low-latency dispatch and the mode
    (arg_groups/fields/exec_.py:884 moe_runner_backend, :898 deepep_mode, 0.5.23); none for
    fp8 block experts, which run under both."""
    assert SGLANG.deepep_ll_args("nvfp4") == [
        "--moe-runner-backend", "flashinfer_cutedsl", "--deepep-mode", "low_latency",
    ]  # fmt: skip
    assert SGLANG.deepep_ll_args("fp8_block") == []
    assert VLLM.deepep_ll_args("nvfp4") == []


def test_nvfp4_deepep_per_phase_knobs():
    """resolve_knobs: a decode instance of the NVFP4 checkpoint takes DeepEP (``auto`` picks
    it), a prefill one keeps the fused MoE under ``auto`` and refuses ``deepep``."""
    m = load_model("tests/data/configs/nvidia--DeepSeek-V3.1-NVFP4")
    c = load_cluster("gb200-nvl72", 18)
    lay = Layout(attn_dp=8, moe_ep=8)
    assert resolve_knobs("sglang", m, c, lay, phase="decode").a2a == "deepep"
    assert resolve_knobs("sglang", m, c, lay, a2a="deepep", phase="decode").a2a == "deepep"
    assert resolve_knobs("sglang", m, c, lay, phase="prefill").a2a == "nccl"
    assert resolve_knobs("sglang", m, c, lay).a2a == "nccl"
    with pytest.raises(MoeplanError, match="not in prefill"):
        resolve_knobs("sglang", m, c, lay, a2a="deepep", phase="prefill")
    # below FP4 tensor cores the experts run the Marlin fallback, which DeepEP does not take
    h100 = load_cluster("h100-sxm-8", 2)
    with pytest.raises(MoeplanError, match="FP4 tensor-core kernels"):
        resolve_knobs("sglang", m, h100, lay, a2a="deepep", phase="decode")
    assert resolve_knobs("sglang", m, h100, lay, phase="decode").a2a == "nccl"
