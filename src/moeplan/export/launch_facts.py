"""Per-model launch facts of the pinned engines, as data with their sources.

- **Remote code.** A Hugging Face repository whose ``config.json`` has ``auto_map`` ships its
  own configuration/model/tokenizer classes, which transformers' ``AutoConfig`` /
  ``AutoTokenizer`` load only with ``trust_remote_code=True`` (transformers
  ``dynamic_module_utils.resolve_trust_remote_code``); SGLang and vLLM pass
  ``--trust-remote-code`` through to them (e.g. Kimi-K2's tiktoken tokenizer,
  ``tokenization_kimi.py``). :func:`needs_remote_code` reads the config dict.
- **Attention DP** (SGLang ``--attn-dp-size``): a model class runs attention data-parallel only
  when its attention layer splits heads by the *attention* TP size
  (``get_parallel().attn_tp_size``), not by the whole ``get_parallel().tp_size``. :data:`SGLANG_ATTN_DP` lists
  the architectures whose 0.5.23 model classes do; Mixtral's ``MixtralAttention``
  (``python/sglang/srt/models/mixtral.py``) splits by the whole ``tp_size``, so a Mixtral launch gets no ``--attn-dp-size``. vLLM's ``--data-parallel-size`` replicates the
  attention of any model (``vllm/v1/engine/core.py`` ``DPEngineCoreProc``), so every
  architecture runs it there.
- **DeepEP** per engine: :data:`moeplan.cost.a2a.DEEPEP_ARCHITECTURES` (one set of facts with
  the cost model) and the GPUs' compute capabilities in the cluster presets' GPU records.
- **Layer partition of a pipeline**: SGLang reads ``SGLANG_PP_LAYER_PARTITION`` (layers per
  stage, comma-separated; ``python/sglang/srt/distributed/utils.py`` ``get_pp_indices``),
  vLLM ``VLLM_PP_LAYER_PARTITION`` (``vllm/distributed/utils.py`` ``get_pp_indices``); both
  must sum to the model's ``num_hidden_layers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SGLANG_VERSION = "0.5.23"
VLLM_VERSION = "0.11.0"

#: architectures whose SGLang 0.5.23 attention splits heads by the attention-TP size
#: (sglang python/sglang/srt/models/<file>.py: the attention class divides its heads by
#: ``get_parallel().attn_tp_size``)
SGLANG_ATTN_DP: frozenset[str] = frozenset(
    {
        "DeepseekV2ForCausalLM",  # deepseek_v2.py (attn_tp_size)
        "DeepseekV3ForCausalLM",  # deepseek_v2.py (same classes)
        "DeepseekV4ForCausalLM",  # deepseek_v4.py
        "KimiK25ForConditionalGeneration",  # kimi_k25.py: the DeepseekV3ForCausalLM text model
        "Qwen2MoeForCausalLM",  # qwen2_moe.py Qwen2MoeAttention
        "Qwen3MoeForCausalLM",  # qwen3_moe.py Qwen3MoeAttention
        "Qwen3_5MoeForConditionalGeneration",  # qwen3_5.py
        "GptOssForCausalLM",  # gpt_oss.py GptOssAttention
        "GlmMoeDsaForCausalLM",  # glm4_moe.py
        "Llama4ForConditionalGeneration",  # mllama4.py: the llama4.py Llama4Attention
        "NemotronHForCausalLM",  # nemotron_h.py NemotronHAttention
        "MiniMaxM3ForCausalLM",  # minimax_m3.py
    }
)
#: architectures whose SGLang 0.5.23 attention splits heads by the whole ``tp_size``
#: (``get_parallel().tp_size``): the class that does it, for the message
SGLANG_NO_ATTN_DP = {
    "MixtralForCausalLM": "python/sglang/srt/models/mixtral.py MixtralAttention",
    "Gemma4ForConditionalGeneration": "python/sglang/srt/models/gemma4_causal.py Gemma4Attention",
}
#: where each SGLang fact is read (engine source file, pinned version)
FACT_SOURCES = {
    "attn_dp": f"sglang {SGLANG_VERSION} python/sglang/srt/models/*.py (attention head split)",
    "mixtral": f"sglang {SGLANG_VERSION} python/sglang/srt/models/mixtral.py MixtralAttention",
    "remote_code": "transformers dynamic_module_utils.resolve_trust_remote_code (auto_map)",
    "sglang_pp": f"sglang {SGLANG_VERSION} python/sglang/srt/distributed/utils.py get_pp_indices",
    "vllm_pp": f"vllm {VLLM_VERSION} vllm/distributed/utils.py get_pp_indices",
}
#: SGLang 0.5.23 KV page size forced per architecture
#: (python/sglang/srt/arg_groups/model_overrides/deepseek_v4.py: ``page_size = 256``). With
#: attention DP each rank's chunk is ``--chunked-prefill-size // attn_dp``
#: (arg_groups/parallel_hook.py) and must be a multiple of the page size
#: (arg_groups/validation_hook.py): the memory default (4096 below 60 GiB per GPU,
#: arg_groups/memory_hook.py) over attention DP 32 is 128, so the export sets the chunk.
SGLANG_PAGE_SIZE = {"DeepseekV4ForCausalLM": 256}
SGLANG_DEFAULT_CHUNK = 4096  # memory_hook.py: chunked_prefill_size for 40-60 GiB GPUs
#: architectures whose SGLang 0.5.23 default MoE runner is flashinfer_cutlass
#: (arg_groups/model_overrides/nemotron_h.py), which accepts ep_size 1 or tp_size only
#: (arg_groups/moe_hook.py). On SM100 without an all-to-all backend the override picks
#: flashinfer_trtllm instead, but the resolution with CUDA faked as SM100 still picked
#: flashinfer_cutlass (bench/check_exports.py), so the rule is applied on every GPU
SGLANG_EP_IS_TP = frozenset({"NemotronHForCausalLM"})
#: preset architectures without a model class in the pinned release (SGLang:
#: python/sglang/srt/models/*.py EntryClass; vLLM: vllm/model_executor/models/registry.py)
MISSING_MODEL_CLASS = {
    "sglang": frozenset({"MiniMaxM3ForCausalLM"}),  # 0.5.23 has MiniMaxM3SparseForCausalLM
    "vllm": frozenset(
        {
            "DeepseekV4ForCausalLM",
            "Qwen3_5MoeForConditionalGeneration",
            "KimiK25ForConditionalGeneration",
            "GlmMoeDsaForCausalLM",
            "Gemma4ForConditionalGeneration",
            "MiniMaxM3ForCausalLM",
        }
    ),
}
PP_PARTITION_ENV = {"sglang": "SGLANG_PP_LAYER_PARTITION", "vllm": "VLLM_PP_LAYER_PARTITION"}


def model_class_blocker(engine: str, architecture: str) -> str | None:
    """Why the pinned ``engine`` release cannot load ``architecture`` (None: it can)."""
    if architecture not in MISSING_MODEL_CLASS[engine]:
        return None
    version = SGLANG_VERSION if engine == "sglang" else VLLM_VERSION
    where = (
        "python/sglang/srt/models" if engine == "sglang" else "model_executor/models/registry.py"
    )
    return f"{engine} {version} has no model class for {architecture} ({where})"


def sglang_chunk(architecture: str, attn_dp: int) -> int | None:
    """``--chunked-prefill-size`` SGLang needs for ``architecture`` at attention DP ``attn_dp``
    (None: its default works): the smallest multiple of ``page x attn_dp`` at or above the
    memory default."""
    page = SGLANG_PAGE_SIZE.get(architecture)
    if page is None or attn_dp <= 1:
        return None
    unit = page * attn_dp
    return -(-SGLANG_DEFAULT_CHUNK // unit) * unit


def sglang_ep_blocker(architecture: str, tp: int, ep: int, sm: int | None, a2a: str) -> str | None:
    """Why SGLang 0.5.23's default MoE runner refuses ``ep`` for ``architecture``."""
    del sm, a2a  # kept for the SM100 case once it is confirmed (SGLANG_EP_IS_TP)
    if architecture not in SGLANG_EP_IS_TP or ep in (1, tp):
        return None
    return (
        f"SGLang {SGLANG_VERSION} runs {architecture}'s MoE with flashinfer_cutlass, which "
        f"needs ep_size 1 or tp_size ({ep} of {tp}; arg_groups/model_overrides/nemotron_h.py, "
        "moe_hook.py)"
    )


def needs_remote_code(config: Mapping[str, Any] | None) -> bool:
    """Whether a checkpoint with this ``config.json`` needs ``--trust-remote-code``."""
    return bool(config) and bool(config.get("auto_map"))  # type: ignore[union-attr]


def attn_dp_blocker(engine: str, architecture: str) -> str | None:
    """Why ``engine`` cannot run attention DP for ``architecture`` (None: it can)."""
    if engine == "sglang" and architecture not in SGLANG_ATTN_DP:
        where = SGLANG_NO_ATTN_DP.get(architecture, "no attention-DP model class is known")
        return (
            f"SGLang {SGLANG_VERSION} has no attention DP (--attn-dp-size) for {architecture}: "
            f"its attention splits heads by the whole tp_size ({where})"
        )
    return None
