"""The one registry of model architectures moeplan reads.

Adding an architecture is one :class:`Architecture` entry in :data:`ARCHITECTURES` — its
``architectures[0]`` name, the reader mapping its keys onto per-layer records
(:mod:`moeplan.specs.arch_families`, :mod:`moeplan.specs.arch_sparse`; ``None``: the uniform
MoE reader of :mod:`moeplan.specs.hf_config`), how its publisher counts active parameters,
where its layers live in the checkpoint — plus a sample ``config.json`` in
``tests/data/configs/`` (the test that walks that folder covers it).

An architecture not in the registry is one error naming the file, the value and every
supported name: moeplan never guesses a shape. Multimodal configs keep the language model
under ``text_config`` / ``language_config``; their vision / audio towers are counted as
weights (:func:`towers`), never served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moeplan.errors import MoeplanError, show
from moeplan.specs import arch_families as fam
from moeplan.specs import arch_sparse as sp
from moeplan.specs.config_reader import Cfg
from moeplan.specs.layers import LayerSpec, Tower
from moeplan.specs.limits import MAX_LAYERS

Reader = Callable[[Cfg], tuple[LayerSpec, ...]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Architecture:
    """One supported architecture (see module docstring).

    ``mtp_keys``: where the config states its multi-token-prediction (MTP / NextN) modules —
    DeepSeek, GLM, Kimi, Step and MiniMax-M3 ``num_nextn_predict_layers``, Qwen3.5
    ``mtp_num_hidden_layers``, MiniMax-M2 ``num_mtp_modules`` (with ``use_mtp``).

    ``embedding_active``: the publisher counts the input-embedding table in "activated"
    parameters (Qwen, Mistral, Google, Meta, NVIDIA, StepFun do; DeepSeek, Moonshot, OpenAI,
    Zhipu, MiniMax, Xiaomi do not); ``lm_head_active``: it counts the lm-head (MiniMax does
    not: M2.5's "10B" and M3's "23B" activated are both without it; nor does Zhipu for GLM-4.x:
    GLM-4.5-Air's "12B" and GLM-4.5's "32B" are 12.18B / 32.08B without it, 12.80B / 32.86B
    with it). ``prefix``: the checkpoint's name of the decoder-layer
    list (quantization ignore lists name modules under it)."""

    name: str
    read: Reader | None
    embedding_active: bool
    sample: str
    source: str
    prefix: str = "model.layers"
    lm_head_active: bool = True
    #: config keys holding the number of multi-token-prediction modules, first present wins
    #: (each family's own name; absent: none)
    mtp_keys: tuple[str, ...] = ("num_nextn_predict_layers",)


_ENTRIES = (
    Architecture(name="DeepseekV2ForCausalLM", read=None, embedding_active=False,
                 sample="DeepSeek-V2-Lite.json", source="transformers DeepseekV2Config"),
    Architecture(name="DeepseekV3ForCausalLM", read=None, embedding_active=False,
                 sample="nvidia--DeepSeek-V3.1-NVFP4_config.json",
                 source="transformers DeepseekV3Config"),
    Architecture(name="KimiK25ForConditionalGeneration", read=None, embedding_active=False,
                 sample="moonshotai--Kimi-K2.5_config.json",
                 source="text_config: DeepseekV3Config (Kimi-K2.5 modeling_kimi_k25.py)",
                 prefix="language_model.model.layers"),
    Architecture(name="Qwen2MoeForCausalLM", read=None, embedding_active=True,
                 sample="Qwen2-57B-A14B.transcribed.json", source="transformers Qwen2MoeConfig"),
    Architecture(name="Qwen3MoeForCausalLM", read=None, embedding_active=True,
                 sample="Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json",
                 source="transformers Qwen3MoeConfig"),
    Architecture(name="Qwen3VLMoeForConditionalGeneration", read=None, embedding_active=True,
                 sample="Qwen--Qwen3-VL-30B-A3B-Instruct_config.json",
                 source="transformers Qwen3VLMoeTextConfig", prefix="model.language_model.layers"),
    Architecture(name="MixtralForCausalLM", read=None, embedding_active=True,
                 sample="mistralai--Mixtral-8x22B-v0.1_config.json",
                 source="transformers MixtralConfig"),
    Architecture(name="GptOssForCausalLM", read=None, embedding_active=False,
                 sample="openai--gpt-oss-20b_config.json", source="transformers GptOssConfig"),
    Architecture(name="Qwen3_5MoeForConditionalGeneration", read=fam.qwen3_5,
                 embedding_active=True, sample="Qwen--Qwen3.5-35B-A3B_config.json",
                 source="transformers Qwen3_5MoeTextConfig", prefix="model.language_model.layers",
                 mtp_keys=("mtp_num_hidden_layers",)),
    Architecture(name="Gemma4ForConditionalGeneration", read=fam.gemma4, embedding_active=True,
                 sample="google--gemma-4-26B-A4B_config.json",
                 source="transformers Gemma4TextConfig", prefix="model.language_model.layers"),
    Architecture(name="Llama4ForConditionalGeneration", read=fam.llama4, embedding_active=True,
                 sample="meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json",
                 source="transformers Llama4TextConfig", prefix="language_model.model.layers"),
    Architecture(name="NemotronHForCausalLM", read=fam.nemotron_h, embedding_active=True,
                 sample="nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json",
                 source="NemotronHConfig (configuration_nemotron_h.py)", prefix="backbone.layers"),
    Architecture(name="DeepseekV32ForCausalLM", read=sp.dsa, embedding_active=False,
                 sample="deepseek-ai--DeepSeek-V3.2_config.json",
                 source="DeepSeek-V3.2 inference/model.py"),
    Architecture(name="Glm4MoeForCausalLM", read=sp.glm4_moe, embedding_active=False,
                 lm_head_active=False, sample="zai-org--GLM-4.5-Air_config.json (transcribed)",
                 source="transformers Glm4MoeConfig (modeling_glm4_moe.py)"),
    Architecture(name="GlmMoeDsaForCausalLM", read=sp.dsa, embedding_active=False,
                 sample="zai-org--GLM-5-FP8_config.json", source="transformers GlmMoeDsaConfig"),
    Architecture(name="DeepseekV4ForCausalLM", read=sp.deepseek_v4, embedding_active=False,
                 sample="deepseek-ai--DeepSeek-V4-Flash_config.json",
                 source="DeepSeek-V4 inference/model.py"),
    Architecture(name="MiMoV2FlashForCausalLM", read=sp.mimo_v2, embedding_active=False,
                 sample="XiaomiMiMo--MiMo-V2-Flash_config.json",
                 source="MiMo-V2-Flash modeling_mimo_v2_flash.py"),
    Architecture(name="MiniMaxM2ForCausalLM", read=sp.minimax, embedding_active=False,
                 lm_head_active=False, mtp_keys=("num_nextn_predict_layers", "num_mtp_modules"),
                 sample="MiniMaxAI--MiniMax-M2.5_config.json",
                 source="MiniMax-M2 modeling_minimax_m2.py"),
    Architecture(name="MiniMaxM3ForCausalLM", read=sp.minimax, embedding_active=False,
                 lm_head_active=False,
                 sample="MiniMaxAI--MiniMax-M3_config.json", source="MiniMax-M3 model card"),
    Architecture(name="Step3p7FlashForCausalLM", read=sp.step3, embedding_active=True,
                 sample="stepfun-ai--Step-3.7-Flash-FP8_config.json",
                 source="Step-3.7-Flash modeling_step3p7.py"),
)  # fmt: skip
ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in _ENTRIES}
#: ``model_type`` of configs without ``architectures`` (and DeepSeek-native configs)
MODEL_TYPES = {
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM",
    "gpt_oss": "GptOssForCausalLM", "glm4_moe": "Glm4MoeForCausalLM",
}  # fmt: skip


def architecture_of(config: dict[str, Any], name: str) -> Architecture:
    """The registry entry of ``config`` (``architectures[0]``, else its ``model_type``)."""
    archs = config.get("architectures")
    key: Any = archs[0] if isinstance(archs, list) and archs else None
    field = "architectures"
    if key is None:
        key, field = MODEL_TYPES.get(config.get("model_type"), config.get("model_type")), \
            "model_type"  # fmt: skip
    if isinstance(key, str) and key in ARCHITECTURES:
        return ARCHITECTURES[key]
    raise MoeplanError(
        f"config[{name}].{field} ({show(key)}) is not a supported architecture: supported are "
        f"{', '.join(ARCHITECTURES)} (add one in moeplan.specs.architectures)"
    )


def mtp_layers(lm: Cfg, arch: Architecture) -> int:
    """Multi-token-prediction modules the config declares (``arch.mtp_keys``; 0 when none is
    present or ``use_mtp`` is false)."""
    if not lm.flag("use_mtp", True):
        return 0
    return lm.int(*arch.mtp_keys, default=0, hi=MAX_LAYERS)


def language_model(root: Cfg) -> Cfg:
    """The language model's keys: ``text_config`` / ``language_config`` when present."""
    return root.sub("text_config") or root.sub("language_config") or root


TOWER_KEYS = ("vision_config", "audio_config")


def towers(root: Cfg) -> tuple[Tower, ...]:
    """Vision / audio towers named by the config, with an estimate of their parameters:
    ``depth`` transformer blocks of width ``w`` and MLP width ``i`` (``4 w^2`` attention +
    ``2 w i`` MLP each) — the blocks only; patch embedding and projector are left out."""
    out = []
    for key in TOWER_KEYS:
        t = root.sub(key)
        if t is None:
            continue
        depth = t.int("depth", "num_hidden_layers", "vt_num_hidden_layers", default=0)
        width = t.int("hidden_size", "vt_hidden_size", default=0)
        inter = t.int("intermediate_size", "vt_intermediate_size", default=4 * width)
        params = depth * (4 * width * width + 2 * width * inter)
        out.append(
            Tower(
                name=key.removesuffix("_config"),
                params=params,
                source=f"{key}: {depth} blocks x width {width}, MLP {inter} (estimate)",
            )
        )
    return tuple(out)
