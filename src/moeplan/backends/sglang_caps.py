"""SGLang's capability table (:mod:`moeplan.backends.capabilities`), read from the released
wheels' sources: 0.5.3 and 0.5.5.post1 (the lab's runs; 0.5.4.post2 inherits 0.5.3), 0.5.14
(the newest kernel tables; 0.5.6.post2, 0.5.9 and 0.5.10 inherit 0.5.5.post1) and 0.5.23 (the
launch facts of :mod:`moeplan.backends.sglang`). Paths are under ``python/sglang/srt/``;
``file:N`` is the line in that version's file.

How each fact is read:

- DeepEP: the model's sparse-MoE block builds its experts with ``get_moe_impl_class`` (the
  DeepEP MoE under ``--moe-a2a-backend deepep``, layers/moe/ep_moe/layer.py) and has a
  ``forward_deepep`` branch; gpt-oss has the class but raises "forward_deepep branch not
  implemented yet"; Mixtral, Llama-4 and Gemma-4 have no DeepEP branch.
- Attention DP: the attention divides its heads by ``attn_tp_size`` (the attention-TP group)
  rather than the whole ``tp_size``.
- TBO: batch_overlap/operations_strategy.py (``operations_strategy.py`` before 0.5.14)
  ``init_new_tbo`` has an operation split for the decoder layer class (DeepseekV2DecoderLayer,
  Qwen3MoeDecoderLayer; MiMoV2DecoderLayer from 0.5.14; DeepSeek-V4 from 0.5.23); any other
  layer raises.
- MTP: configs/model_config.py maps the target architecture onto its NextN / MTP draft class
  when ``is_draft_model`` (``--speculative-algorithm EAGLE`` with the checkpoint's own layer).

Rules over GPU and checkpoint:

- DeepEP's MoE GEMMs: fp8 block-scaled weights (``Fp8Config``: DeepGEMM) only. An unquantized
  (bf16) MoE raises "Unquantized DeepEP MoE currently supports low_latency mode only" in normal
  mode unless ``--moe-runner-backend deep_gemm`` is given (layers/moe/ep_moe/layer.py
  ``DeepEPMoE.run_moe_core`` in 0.5.14), so prefill cannot run it with the exported flags and
  no table prices it; other quantizations (int4 compressed-tensors: Kimi-K2.5) reach
  ``assert False, "forward_deepgemm_contiguous is deprecated"``.
- NVFP4 experts under DeepEP: from 0.5.3 (0.5.2 has no flashinfer_cutedsl branch in
  layers/moe/ep_moe/layer.py), ``--moe-runner-backend flashinfer_cutedsl`` runs ModelOpt
  NVFP4 experts on DeepEP's low-latency dispatch output (FlashInfer's CuTe DSL masked GEMM);
  its normal dispatch (prefill) has no NVFP4 handler. 0.5.3: ``DeepEPMoE.moe_impl`` sends
  low-latency output to ``forward_flashinfer_cutedsl`` (:489-491) and asserts DeepGEMM fp8 on
  normal output (:487); 0.5.5.post1: ``run_moe_core`` (:206-211; normal: :205); 0.5.14:
  ``DeepEPMoE.__init__`` hands modelopt_fp4 + flashinfer_cutedsl to the MoE runner
  (:98-102), whose ``register_fused_func("deepep", "flashinfer_cutedsl")`` takes
  ``DeepEPLLDispatchOutput`` (moe_runner/flashinfer_cutedsl.py:460-462; layers/moe/utils.py:372
  ``is_flashinfer_cutedsl_v1_path``); 0.5.23: the same at layer.py:118-124,
  flashinfer_cutedsl.py:624-626, utils.py:678, and arg_groups/moe_hook.py:363-378 forces
  ``--deepep-mode low_latency`` for that runner ("no DeepEP normal-dispatch handler") and
  refuses ``normal``. The decode server's launch flags: ``--moe-runner-backend
  flashinfer_cutedsl --deepep-mode low_latency`` (arg_groups/fields/exec_.py:884
  ``moe_runner_backend``, :898 ``deepep_mode``, 0.5.23).
- mxfp4 MoE (gpt-oss): layers/quantization/mxfp4.py runs OpenAI's triton_kernels
  ``matmul_ogs`` with tuned layouts for SM100 and SM90 (``_swizzle_mxfp4``) and otherwise
  upcasts the experts to bf16; on SM80 no table prices either path (the A100 tables hold
  bf16 and int4 MoE only) and the lab measured SGLang's gpt-oss on A100 17x slower than
  vLLM's: refused below SM90.
- Speculative decoding: ``max_running_requests`` defaults to 48 for the instance under
  EAGLE / NextN (server_args.py before 0.5.14, arg_groups/speculative_hook.py
  ``_handle_eagle_family`` from 0.5.14), split over the DP ranks
  (model_executor/model_runner_kv_cache_mixin.py ``_resolve_max_num_reqs``:
  ``max_num_reqs // self.dp_size``).
- NVFP4 MoE (ModelOpt ``modelopt_fp4``; 0.5.14 and 0.5.23):
  layers/quantization/modelopt_quant.py ``ModelOptNvFp4FusedMoEMethod.create_moe_runner``
  resolves ``--moe-runner-backend auto`` to ``flashinfer_trtllm`` (TRT-LLM-gen kernels via
  FlashInfer) on SM100 and to ``marlin`` on SM80-SM99; ``__init__`` accepts the Marlin
  fallback on SM80+ (W4A16: fp4 weights dequantized into bf16, priced from the W4A16 Marlin
  tables). Dense NVFP4 linears below SM100 need ``--fp4-gemm-backend marlin``
  (``ModelOptFp4LinearMethod.process_weights_after_loading``). DeepEP carries NVFP4
  activations in its low-latency dispatch when ``SGLANG_MOE_NVFP4_DISPATCH`` is set: the
  dispatcher gets the experts' ``input_global_scale`` (modelopt_quant.py), which selects
  ``DeepEPOutputDtype.NVFP4`` (layers/moe/utils.py ``get_deepep_output_dtype``) and
  ``low_latency_dispatch(..., use_nvfp4=True)`` (layers/moe/token_dispatcher/deepep.py).
- KV dtype ``auto``: model_executor/model_runner.py ``configure_kv_cache_dtype``: fp8_e4m3
  when the checkpoint's ``kv_cache_quant_algo`` is FP8, else the model dtype; DeepSeek's DSA
  models (V3.2, GLM-5) default to fp8_e4m3 on SM100+ and bf16 below
  (server_args.py ``_set_default_dsa_kv_cache_dtype``, 0.5.14).
"""

from __future__ import annotations

from typing import Any

from moeplan.backends.capabilities import CapabilityTable, KvDefault, Nvfp4Moe, Release, family

_REGISTRY = "python/sglang/srt/models: no EntryClass for it"
_NO = "no forward_deepep branch"
_TP = "attention divides heads by the whole tp_size"
_NO_TBO = "no operation split in operations_strategy init_new_tbo"
_NO_MTP = "no draft class in configs/model_config.py"
_DSA_KV = {"DeepseekV32ForCausalLM": 100, "GlmMoeDsaForCausalLM": 100}
_FP8_BLOCK = frozenset({"fp8_block"})
#: NVFP4 experts under DeepEP's low-latency dispatch only, and the runner that takes it
_NVFP4_LL = {"nvfp4": "flashinfer_cutedsl"}
_MXFP4_FLOOR = {
    "w4a16_mxfp4": (90, "layers/quantization/mxfp4.py _swizzle_mxfp4: SM100/SM90 layouts only"),
}


def _deepseek(v: str, dsv2: int, attn: int, ops: int, mtp: tuple[bool, str]):  # type: ignore[no-untyped-def]
    return family(
        (True, f"models/deepseek_v2.py:{dsv2} forward_deepep ({v})"),
        (True, f"models/deepseek_v2.py:{attn} attn_tp_size ({v})"),
        (True, f"{ops} DeepseekV2DecoderLayer ({v})"),
        mtp,
    )


def _r053() -> Release:
    v = "0.5.3"
    ops = "operations_strategy.py:36"
    mc = "configs/model_config.py:222"
    no_mtp = (False, f"{_NO_MTP} ({v})")
    ds = _deepseek(v, 830, 1026, ops, no_mtp)
    return Release(
        version=v,
        registry=_REGISTRY,
        families={
            "DeepseekV2ForCausalLM": ds,
            "DeepseekV3ForCausalLM": _deepseek(
                v, 830, 1026, ops, (True, f"{mc} DeepseekV3ForCausalLMNextN ({v})")
            ),
            "DeepseekV32ForCausalLM": ds,
            "Qwen2MoeForCausalLM": family(
                (True, f"models/qwen2_moe.py:216 _forward_deepep ({v})"),
                (True, f"models/qwen2_moe.py:320 attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "Qwen3MoeForCausalLM": family(
                (True, f"models/qwen3_moe.py:177 forward_deepep ({v})"),
                (True, f"models/qwen3_moe.py:307 attn_tp_size ({v})"),
                (True, f"operations_strategy.py:45 Qwen3MoeDecoderLayer ({v})"),
                no_mtp,
            ),
            "Qwen3VLMoeForConditionalGeneration": family(
                (True, f"models/qwen3_vl_moe.py: Qwen3MoeModel, qwen3_moe.py:177 ({v})"),
                (True, f"models/qwen3_moe.py:307 attn_tp_size ({v})"),
                (True, f"operations_strategy.py:45 Qwen3MoeDecoderLayer ({v})"),
                no_mtp,
            ),
            "GptOssForCausalLM": family(
                (False, f"models/gpt_oss.py:173 forward_deepep not implemented ({v})"),
                (True, f"models/gpt_oss.py:224 attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "MixtralForCausalLM": family(
                (False, f"models/mixtral.py: {_NO} ({v})"),
                (False, f"models/mixtral.py MixtralAttention: {_TP} ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "Llama4ForConditionalGeneration": family(
                (False, f"models/llama4.py: {_NO} ({v})"),
                (True, f"models/llama4.py:215 attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "Glm4MoeForCausalLM": family(
                (False, f"models/glm4_moe.py: {_NO} ({v})"),
                (True, f"models/glm4_moe.py:195 Glm4MoeAttention attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                (True, f"configs/model_config.py:226 Glm4MoeForCausalLMNextN ({v})"),
            ),
        },
        kv_default=KvDefault(
            checkpoint_fp8=True,
            source=f"model_executor/model_runner.py configure_kv_cache_dtype ({v})",
        ),
        deepep_moe_dtypes=_FP8_BLOCK,
        deepep_moe_source=(
            f"layers/moe/ep_moe/layer.py:487 DeepEPMoE.moe_impl asserts DeepGEMM fp8 ({v})"
        ),
        deepep_ll_runners=_NVFP4_LL,
        deepep_ll_source=(
            f"layers/moe/ep_moe/layer.py:489-491 DeepEPMoE.moe_impl: low-latency output to "
            f"forward_flashinfer_cutedsl; normal output asserts DeepGEMM fp8 (:487) ({v})"
        ),
        spec_running_cap=48,
        spec_running_source=f"server_args.py:1060 max_running_requests = 48 (EAGLE, {v})",
        moe_kernel_floor=_MXFP4_FLOOR,
    )


def _r055() -> Release:
    v = "0.5.5.post1"
    ops = "operations_strategy.py:36"
    mc = "configs/model_config.py:254"  # DeepseekV3ForCausalLM only (not V3.2)
    no_mtp = (False, f"{_NO_MTP} ({v})")
    nextn = (True, f"{mc} DeepseekV3ForCausalLMNextN ({v})")
    r = _r053()
    fams = dict(r.families)
    fams.update(
        {
            "DeepseekV2ForCausalLM": _deepseek(v, 926, 1119, ops, no_mtp),
            "DeepseekV3ForCausalLM": _deepseek(v, 926, 1119, ops, nextn),
            "DeepseekV32ForCausalLM": _deepseek(v, 926, 1119, ops, no_mtp),
            "Qwen2MoeForCausalLM": family(
                (True, f"models/qwen2_moe.py:217 _forward_deepep ({v})"),
                (True, f"models/qwen2_moe.py:317 attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "Qwen3MoeForCausalLM": family(
                (True, f"models/qwen3_moe.py:177 forward_deepep ({v})"),
                (True, f"models/qwen3_moe.py:288 attn_tp_size ({v})"),
                (True, f"operations_strategy.py:45 Qwen3MoeDecoderLayer ({v})"),
                no_mtp,
            ),
            "Qwen3VLMoeForConditionalGeneration": family(
                (True, f"models/qwen3_vl_moe.py: Qwen3MoeModel, qwen3_moe.py:177 ({v})"),
                (True, f"models/qwen3_moe.py:288 attn_tp_size ({v})"),
                (True, f"operations_strategy.py:45 Qwen3MoeDecoderLayer ({v})"),
                no_mtp,
            ),
            "GptOssForCausalLM": family(
                (False, f"models/gpt_oss.py:164 forward_deepep not implemented ({v})"),
                (True, f"models/gpt_oss.py:215 attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "Llama4ForConditionalGeneration": family(
                (False, f"models/llama4.py: {_NO} ({v})"),
                (True, f"models/llama4.py:216 attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "MiniMaxM2ForCausalLM": family(
                (True, f"models/minimax_m2.py:255 forward_deepep ({v})"),
                (False, f"models/minimax_m2.py: {_TP} ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "NemotronHForCausalLM": family(
                (False, f"models/nemotron_h.py: {_NO} ({v})"),
                (False, f"models/nemotron_h.py: {_TP} ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                no_mtp,
            ),
            "Glm4MoeForCausalLM": family(
                (True, f"models/glm4_moe.py:492 forward_deepep ({v})"),
                (True, f"models/glm4_moe.py:183 Glm4MoeAttention attn_tp_size ({v})"),
                (False, f"{_NO_TBO} ({v})"),
                (True, f"configs/model_config.py:258 Glm4MoeForCausalLMNextN ({v})"),
            ),
        }
    )
    return Release(
        version=v,
        registry=_REGISTRY,
        families=fams,
        kv_default=r.kv_default,
        deepep_moe_dtypes=_FP8_BLOCK,
        deepep_moe_source=f"layers/moe/ep_moe/layer.py DeepEPMoE: fp8 w8a8 or w4afp8 ({v})",
        deepep_ll_runners=_NVFP4_LL,
        deepep_ll_source=(
            f"layers/moe/ep_moe/layer.py:206-211 DeepEPMoE.run_moe_core: low-latency output "
            f"with flashinfer_cutedsl + modelopt_fp4 to forward_flashinfer_cutedsl; normal "
            f"output: 'forward_deepgemm_contiguous is deprecated' (:205) ({v})"
        ),
        spec_running_cap=48,
        spec_running_source=f"server_args.py:1514 max_running_requests = 48 (EAGLE, {v})",
        moe_kernel_floor=_MXFP4_FLOOR,
    )


def _newer(v: str, lines: dict[str, Any], ops: dict[str, int], mc: dict[str, int]) -> Release:
    """0.5.14 and 0.5.23: the same families, at each version's lines."""
    ops_f = "batch_overlap/operations_strategy.py"
    no_mtp = (False, f"{_NO_MTP} ({v})")

    def mtp(arch: str) -> tuple[bool, str]:
        n = mc.get(arch)
        return (True, f"configs/model_config.py:{n} draft class ({v})") if n else no_mtp

    def tbo(layer: str) -> tuple[bool, str]:
        n = ops.get(layer)
        return (True, f"{ops_f}:{n} {layer} ({v})") if n else (False, f"{_NO_TBO} ({v})")

    def ep(file: str) -> tuple[bool, str]:
        return (True, f"models/{file}.py:{lines[file + '.ep']} forward_deepep ({v})")

    def adp(file: str) -> tuple[bool, str]:
        return (True, f"models/{file}.py:{lines[file + '.attn']} attn_tp_size ({v})")

    def no(file: str, why: str) -> tuple[bool, str]:
        return (False, f"models/{file}.py: {why} ({v})")

    ds = ("deepseek_v2", "DeepseekV2DecoderLayer")
    fams = {
        "DeepseekV2ForCausalLM": family(ep(ds[0]), adp(ds[0]), tbo(ds[1]), no_mtp),
        "DeepseekV3ForCausalLM": family(
            ep(ds[0]), adp(ds[0]), tbo(ds[1]), mtp("DeepseekV3ForCausalLM")
        ),
        "DeepseekV32ForCausalLM": family(
            ep(ds[0]), adp(ds[0]), tbo(ds[1]), mtp("DeepseekV3ForCausalLM")
        ),
        # glm4_moe.py: class GlmMoeDsaForCausalLM(DeepseekV2ForCausalLM)
        "GlmMoeDsaForCausalLM": family(
            ep(ds[0]),
            adp(ds[0]),
            tbo(ds[1]),
            mtp(
                "GlmMoeDsaForCausalLM" if "GlmMoeDsaForCausalLM" in mc else "DeepseekV3ForCausalLM"
            ),
        ),
        # kimi_k25.py: the language model is DeepseekV3ForCausalLM; no draft mapping
        "KimiK25ForConditionalGeneration": family(ep(ds[0]), adp(ds[0]), tbo(ds[1]), no_mtp),
        "DeepseekV4ForCausalLM": family(
            (True, f"models/{lines['deepseek_v4.ep_file']} DeepEP transport ({v})"),
            adp("deepseek_v4"),
            tbo("DeepseekV4DecoderLayer"),
            mtp("DeepseekV4ForCausalLM"),
        ),
        "Qwen2MoeForCausalLM": family(
            ep("qwen2_moe"), adp("qwen2_moe"), tbo("Qwen2MoeDecoderLayer"), no_mtp
        ),
        "Qwen3MoeForCausalLM": family(
            ep("qwen3_moe"),
            adp("qwen3_moe"),
            tbo("Qwen3MoeDecoderLayer"),
            mtp("Qwen3MoeForCausalLM"),
        ),
        # qwen3_vl_moe.py imports Qwen3MoeDecoderLayer
        "Qwen3VLMoeForConditionalGeneration": family(
            ep("qwen3_moe"), adp("qwen3_moe"), tbo("Qwen3MoeDecoderLayer"), no_mtp
        ),
        # qwen3_5.py builds its MoE with qwen2_moe.py's Qwen2MoeSparseMoeBlock
        "Qwen3_5MoeForConditionalGeneration": family(
            ep("qwen2_moe"),
            adp("qwen3_5"),
            tbo("Qwen3_5DecoderLayer"),
            mtp("Qwen3_5MoeForConditionalGeneration"),
        ),
        "GptOssForCausalLM": family(
            (
                False,
                f"models/gpt_oss.py:{lines['gpt_oss.ep']} forward_deepep not implemented ({v})",
            ),
            adp("gpt_oss"),
            tbo("GptOssDecoderLayer"),
            no_mtp,
        ),
        "MixtralForCausalLM": family(
            no("mixtral", _NO), no("mixtral", f"MixtralAttention: {_TP}"), tbo("-"), no_mtp
        ),
        "Llama4ForConditionalGeneration": family(
            no("llama4", _NO), adp("llama4"), tbo("Llama4DecoderLayer"), no_mtp
        ),
        "Gemma4ForConditionalGeneration": family(
            no("gemma4_causal", _NO),
            no("gemma4_causal", f"Gemma4Attention: {_TP}"),
            tbo("-"),
            no_mtp,
        ),
        "NemotronHForCausalLM": family(
            no("nemotron_h", _NO),
            adp("nemotron_h"),
            tbo("NemotronHDecoderLayer"),
            mtp("NemotronHForCausalLM"),
        ),
        "MiniMaxM2ForCausalLM": family(
            ep("minimax_m2"), adp("minimax_m2"), tbo("MiniMaxM2DecoderLayer"), no_mtp
        ),
        "MiMoV2FlashForCausalLM": family(
            ep("mimo_v2"), adp("mimo_v2"), tbo("MiMoV2DecoderLayer"), mtp("MiMoV2FlashForCausalLM")
        ),
        "Glm4MoeForCausalLM": family(
            ep("glm4_moe"), adp("glm4_moe"), tbo("Glm4MoeDecoderLayer"), mtp("Glm4MoeForCausalLM")
        ),
    }
    if "step3p7.ep" in lines:  # step3p7.py: Step3p5ForCausalLM's text model
        fams["Step3p7FlashForCausalLM"] = family(
            (True, f"models/step3p5.py:{lines['step3p7.ep']} forward_deepep ({v})"),
            (True, f"models/step3p5.py:{lines['step3p7.attn']} attn_tp_size ({v})"),
            tbo("Step3p5DecoderLayer"),
            no_mtp,
        )
    return Release(
        version=v,
        registry=_REGISTRY,
        families=fams,
        kv_default=KvDefault(
            checkpoint_fp8=True,
            source=f"model_executor/model_runner.py:{lines['kv']} configure_kv_cache_dtype ({v})",
            fp8_from_sm=_DSA_KV,
            fp8_from_sm_source=f"{lines['dsa_kv']} ({v})",
        ),
        deepep_moe_dtypes=_FP8_BLOCK,
        deepep_moe_source=(
            f"layers/moe/ep_moe/layer.py DeepEPMoE: Fp8Config runs DeepGEMM (:{lines['ep_fp8']}); "
            f"unquantized runs low_latency only (:{lines['ep_bf16']}); other quantizations "
            f"hit 'forward_deepgemm_contiguous is deprecated' (:{lines['ep_bf16'] + 5}) ({v})"
        ),
        deepep_ll_runners=_NVFP4_LL,
        deepep_ll_source=(
            f"layers/moe/ep_moe/layer.py:{lines['ll_layer']} DeepEPMoE.__init__ hands "
            f"modelopt_fp4 + flashinfer_cutedsl to the MoE runner; "
            f"moe_runner/flashinfer_cutedsl.py:{lines['ll_runner']} takes DeepEPLLDispatchOutput "
            f"only; layers/moe/utils.py:{lines['ll_v1']} is_flashinfer_cutedsl_v1_path{lines['ll_mode']} "
            f"({v})"
        ),
        spec_running_cap=48,
        spec_running_source=(
            f"arg_groups/speculative_hook.py:{lines['spec']} _handle_eagle_family "
            f"max_running_requests = 48 ({v})"
        ),
        moe_kernel_floor=_MXFP4_FLOOR,
        nvfp4_moe=Nvfp4Moe(
            runner="flashinfer_trtllm",
            runner_source=(
                f"layers/quantization/modelopt_quant.py:{lines['nvfp4_runner']} create_moe_runner: "
                f"auto is FLASHINFER_TRTLLM on SM100, MARLIN on SM80-SM99 ({v})"
            ),
            fallback="int4_wo",
            fallback_source=(
                f"layers/quantization/modelopt_quant.py:{lines['nvfp4_marlin']} "
                f"ModelOptNvFp4FusedMoEMethod: Marlin W4A16 fallback on SM80-SM99 ({v})"
            ),
            dispatch_phases=("generation",),
            dispatch_source=(
                f"layers/quantization/modelopt_quant.py:{lines['nvfp4_dispatch']} input_global_scale "
                f"under SGLANG_MOE_NVFP4_DISPATCH -> layers/moe/token_dispatcher/deepep.py:"
                f"{lines['nvfp4_ll']} low_latency_dispatch(use_nvfp4=True) ({v})"
            ),
            # environ.py SGLANG_MOE_NVFP4_DISPATCH = EnvBool(False) (0.5.23: :1185)
            dispatch_env=(("SGLANG_MOE_NVFP4_DISPATCH", "1"),),
        ),
    )


def _r0514() -> Release:
    lines = {
        "deepseek_v2.ep": 1136, "deepseek_v2.attn": 1519, "qwen2_moe.ep": 438,
        "qwen2_moe.attn": 613, "qwen3_moe.ep": 347, "qwen3_moe.attn": 461,
        "qwen3_5.attn": 156, "gpt_oss.ep": 263, "gpt_oss.attn": 355, "llama4.attn": 223,
        "nemotron_h.attn": 572, "minimax_m2.ep": 597, "minimax_m2.attn": 735,
        "mimo_v2.ep": 356, "mimo_v2.attn": 470, "deepseek_v4.attn": 281,
        "glm4_moe.ep": 649, "glm4_moe.attn": 205,
        "deepseek_v4.ep_file": "deepseek_v4.py:1587", "kv": 2337, "spec": 270,
        "ep_bf16": 210, "ep_fp8": 91, "dsa_kv": "server_args.py:3416 _set_default_dsa_kv_cache_dtype",
        "nvfp4_runner": 2317, "nvfp4_marlin": 1771, "nvfp4_dispatch": 2108, "nvfp4_ll": 729,
        "ll_layer": "98-102", "ll_runner": "460-462", "ll_v1": 372, "ll_mode": "",
    }  # fmt: skip
    ops = {"DeepseekV2DecoderLayer": 39, "Qwen3MoeDecoderLayer": 48, "MiMoV2DecoderLayer": 57}
    mc = {
        "DeepseekV3ForCausalLM": 526, "DeepseekV4ForCausalLM": 535, "Qwen3MoeForCausalLM": 588,
        "Qwen3_5MoeForConditionalGeneration": 592, "NemotronHForCausalLM": 604,
        "MiMoV2FlashForCausalLM": 562, "Glm4MoeForCausalLM": 540,
    }  # fmt: skip
    return _newer("0.5.14", lines, ops, mc)


def _r0523() -> Release:
    lines = {
        "deepseek_v2.ep": 1524, "deepseek_v2.attn": 2051, "qwen2_moe.ep": 554,
        "qwen2_moe.attn": 911, "qwen3_moe.ep": 353, "qwen3_moe.attn": 502,
        "qwen3_5.attn": 370, "gpt_oss.ep": 277, "gpt_oss.attn": 391, "llama4.attn": 221,
        "nemotron_h.attn": 694, "minimax_m2.ep": 607, "minimax_m2.attn": 643,
        "mimo_v2.ep": 583, "mimo_v2.attn": 688, "deepseek_v4.attn": 1025,
        "glm4_moe.ep": 630, "glm4_moe.attn": 234,
        "deepseek_v4.ep_file": "deepseek_common/moe_transport.py:167",
        "step3p7.ep": 240, "step3p7.attn": 295, "kv": 1551, "spec": 1086,
        "ep_bf16": 291, "ep_fp8": 110, "dsa_kv": "arg_groups/overrides.py:534 (fp8_e4m3 if major >= 10)",
        "nvfp4_runner": 3117, "nvfp4_marlin": 2379, "nvfp4_dispatch": 2923, "nvfp4_ll": 855,
        "ll_layer": "118-124", "ll_runner": "624-626", "ll_v1": 678,
        "ll_mode": "; arg_groups/moe_hook.py:363-378 forces --deepep-mode low_latency, refuses normal",
    }  # fmt: skip
    ops = {
        "DeepseekV2DecoderLayer": 39, "Qwen3MoeDecoderLayer": 48, "MiMoV2DecoderLayer": 57,
        "DeepseekV4DecoderLayer": 69,
    }  # fmt: skip
    mc = {
        "DeepseekV3ForCausalLM": 1032, "GlmMoeDsaForCausalLM": 1038,
        "DeepseekV4ForCausalLM": 1043, "Qwen3MoeForCausalLM": 1155,
        "Qwen3_5MoeForConditionalGeneration": 1159, "NemotronHForCausalLM": 1198,
        "MiMoV2FlashForCausalLM": 1094, "Glm4MoeForCausalLM": 1063,
    }  # fmt: skip
    return _newer("0.5.23", lines, ops, mc)


SGLANG_CAPS = CapabilityTable(
    engine="sglang", label="SGLang", releases=(_r053(), _r055(), _r0514(), _r0523())
)
