"""vLLM's capability table (:mod:`moeplan.backends.capabilities`), read from the released
wheels' sources: 0.11.0 (the lab's runs and the pinned launch facts; 0.10.2 inherits it) and
0.24.0 (the newest kernel tables; 0.14.0 and 0.19.0 inherit 0.11.0). Paths are under
``vllm/``; ``file:N`` is the line in that version's file.

- Model classes: model_executor/models/registry.py (a family absent there has none).
- DeepEP: every MoE model builds its experts with ``FusedMoE``
  (model_executor/layers/fused_moe/layer.py), whose prepare/finalize comes from the all2all
  manager under ``--enable-expert-parallel``; the all2all backends are listed in
  config/parallel.py. Its grouped GEMMs as moeplan prices them are the DeepGEMM fp8
  block-scaled ones (the wide-EP tables); mxfp4 raises "Mxfp4 does not support batched
  experts format for EP" in low-latency mode (model_executor/layers/quantization/mxfp4.py
  ``select_gemm_impl``, 0.11.0).
- Attention DP: ``--data-parallel-size`` replicates the attention of any model, one core
  engine per rank (v1/engine/core.py ``DPEngineCoreProc``).
- TBO (``--enable-dbo``): "Microbatching currently only supports the deepep_low_latency and
  deepep_high_throughput all2all backend" (config/__init__.py:480 in 0.11.0,
  config/vllm.py:1434 in 0.24.0); model-agnostic otherwise.
- MTP: config/speculative.py ``hf_config_override`` maps the model type onto its MTP draft.
- Running cap under speculative decoding: none (``max_num_seqs`` is unchanged).
- KV dtype ``auto``: 0.11.0 stores the model dtype (config/cache.py ``_verify_cache_dtype``:
  ``auto`` passes), except DeepSeek-V3.2, whose ``auto`` becomes the ``fp8_ds_mla`` format
  (model_executor/models/config.py:419); 0.24.0 takes the checkpoint's
  ``kv_cache_quant_algo`` (utils/torch_utils.py:373 ``resolve_kv_cache_dtype_string``), else
  the model dtype (DeepSeek-V3.2's ``bfloat16`` is ``auto``: models/config.py:37).
- NVFP4 MoE (ModelOpt / compressed-tensors W4A4): 0.11.0
  model_executor/layers/quantization/utils/nvfp4_moe_support.py ``detect_nvfp4_moe_support``
  runs vLLM's CUTLASS fp4 MoE where ``cutlass_fp4_supported`` (SM100), FlashInfer's CUTLASS
  MoE only under ``VLLM_USE_FLASHINFER_MOE_FP4=1`` (flashinfer_fp4_moe.py:28), and falls back
  to the Marlin FP4 MoE below (line 46-49); 0.24.0 model_executor/layers/fused_moe/oracle/
  nvfp4.py ``select_nvfp4_moe_backend`` takes the first supported of FLASHINFER_TRTLLM,
  FLASHINFER_CUTEDSL, FLASHINFER_CUTEDSL_BATCHED, FLASHINFER_CUTLASS, VLLM_CUTLASS, MARLIN
  (line 165): TRT-LLM-gen kernels on SM100, Marlin below. The Marlin path is weight-only
  (fp4 weights dequantized into bf16): priced from the W4A16 Marlin tables.
"""

from __future__ import annotations

from moeplan.backends.capabilities import CapabilityTable, KvDefault, Nvfp4Moe, Release, family

_REG = "model_executor/models/registry.py"
_EP = "model_executor/layers/fused_moe/layer.py FusedMoE all2all prepare/finalize"
_DP = "v1/engine/core.py DPEngineCoreProc (any model)"
_NO_MTP = "no MTP draft mapping in config/speculative.py hf_config_override"
#: architecture -> (0.11.0 registry line, 0.24.0 registry line); 0: absent
_REGISTRY_LINES = {
    "DeepseekV2ForCausalLM": (71, 97),
    "DeepseekV3ForCausalLM": (72, 98),
    "DeepseekV32ForCausalLM": (73, 99),
    "DeepseekV4ForCausalLM": (0, 100),
    "KimiK25ForConditionalGeneration": (0, 461),
    "Qwen2MoeForCausalLM": (143, 199),
    "Qwen3MoeForCausalLM": (145, 201),
    "Qwen3VLMoeForConditionalGeneration": (272, 562),
    "MixtralForCausalLM": (122, 170),
    "GptOssForCausalLM": (89, 123),
    "Qwen3_5MoeForConditionalGeneration": (0, 567),
    "Gemma4ForConditionalGeneration": (0, 405),
    "Llama4ForConditionalGeneration": (245, 468),
    "NemotronHForCausalLM": (129, 178),
    "GlmMoeDsaForCausalLM": (0, 122),
    "MiMoV2FlashForCausalLM": (0, 175),
    "MiniMaxM2ForCausalLM": (0, 162),
    "Glm4MoeForCausalLM": (88, 120),
}
#: architecture -> (0.11.0 line, 0.24.0 line) of its MTP mapping in config/speculative.py
_MTP_LINES = {
    "DeepseekV3ForCausalLM": (149, 312),
    "DeepseekV32ForCausalLM": (149, 312),
    "GlmMoeDsaForCausalLM": (0, 312),
    "DeepseekV4ForCausalLM": (0, 323),
    "Qwen3_5MoeForConditionalGeneration": (0, 469),
    "NemotronHForCausalLM": (0, 441),
    "MiMoV2FlashForCausalLM": (0, 373),
    "Glm4MoeForCausalLM": (167, 390),
}


_NVFP4 = (
    Nvfp4Moe(
        runner="cutlass",
        runner_source=(
            "model_executor/layers/quantization/utils/nvfp4_moe_support.py:30 "
            "cutlass_fp4_supported: vLLM CUTLASS fp4 MoE on SM100 (0.11.0)"
        ),
        fallback="int4_wo",
        fallback_source=(
            "model_executor/layers/quantization/utils/nvfp4_moe_support.py:46 "
            "Marlin FP4 MoE fallback without cutlass fp4 (0.11.0)"
        ),
    ),
    Nvfp4Moe(
        runner="flashinfer_trtllm",
        runner_source=(
            "model_executor/layers/fused_moe/oracle/nvfp4.py:165 select_nvfp4_moe_backend: "
            "FLASHINFER_TRTLLM first (0.24.0)"
        ),
        fallback="int4_wo",
        fallback_source=(
            "model_executor/layers/fused_moe/oracle/nvfp4.py:171 MARLIN, the supported "
            "backend below SM100 (0.24.0)"
        ),
    ),
)


def _release(v: str, i: int, dbo: str, kv: KvDefault) -> Release:
    fams = {}
    for arch, lines in _REGISTRY_LINES.items():
        if not lines[i]:
            continue
        m = _MTP_LINES.get(arch, (0, 0))[i]
        fams[arch] = family(
            (True, f"{_EP} ({v})"),
            (True, f"{_DP} ({v})"),
            (True, f"{dbo} ({v})"),
            (True, f"config/speculative.py:{m} hf_config_override ({v})")
            if m
            else (False, f"{_NO_MTP} ({v})"),
        )
    return Release(
        version=v,
        registry=_REG,
        families=fams,
        kv_default=kv,
        deepep_moe_dtypes=frozenset({"fp8_block"}),
        deepep_moe_source=(
            f"model_executor/layers/fused_moe/deep_gemm_moe.py DeepGEMM fp8 block-scaled ({v})"
        ),
        nvfp4_moe=_NVFP4[i],
    )


VLLM_CAPS = CapabilityTable(
    engine="vllm",
    label="vLLM",
    releases=(
        _release(
            "0.11.0",
            0,
            "config/__init__.py:480 enable_dbo needs a DeepEP all2all backend",
            KvDefault(
                checkpoint_fp8=False,
                source="config/cache.py _verify_cache_dtype: auto is the model dtype (0.11.0)",
                fp8_from_sm={"DeepseekV32ForCausalLM": 0},
                fp8_from_sm_source="model_executor/models/config.py:419 fp8_ds_mla (0.11.0)",
            ),
        ),
        _release(
            "0.24.0",
            1,
            "config/vllm.py:1434 enable_dbo needs a DeepEP all2all backend",
            KvDefault(
                checkpoint_fp8=True,
                source="utils/torch_utils.py:373 resolve_kv_cache_dtype_string (0.24.0)",
            ),
        ),
    ),
)
