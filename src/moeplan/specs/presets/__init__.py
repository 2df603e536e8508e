"""Shipped presets: model configs and cluster descriptions (package data, with sources).

Reading package data is the only file access in the specs layer; user files are read by the
CLI and handed over as dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from moeplan.errors import MoeplanError

AIC = "ai-dynamo/aiconfigurator @ 095f58a5 aic-core/src/aiconfigurator_core/model_configs/"


@dataclass(frozen=True, kw_only=True, slots=True)
class Preset:
    """One shipped model: its config file (package data), the Hugging Face repo the engines
    load (the launch scripts' default model path) and where the file comes from."""

    file: str
    repo: str
    source: str


def _verbatim(repo: str) -> str:
    return f"verbatim Hugging Face config.json of {repo}, as kept in {AIC} (Apache-2.0)"


def _glm(repo: str, card: str) -> str:
    """GLM-4.x: no verbatim copy of the Hugging Face config.json was found in a public source
    tree (aiconfigurator keeps an abridged GLM-4.7-FP8 one on a branch only); the file is a
    transcription of the Glm4MoeConfig keys, checked against the model card's sizes."""
    return (
        f"transcription of {repo} config.json (keys of transformers Glm4MoeConfig; shape "
        f"as in aiconfigurator's abridged zai-org--GLM-4.7-FP8_config.json and Megatron-Bridge "
        f"docs/models/llm/glm45.md), checked against the model card: {card}"
    )


#: GLM-4.x FP8 checkpoints: llm-compressor channel FP8 (compressed-tensors ``float-quantized``,
#: one scale per output row, dynamic per-token activations; routers and lm_head left in bf16)
_GLM_FP8 = "; quantization_config: compressed-tensors channel FP8 (llm-compressor)"
_GLM45 = "zai-org/GLM-4.5 card (355B total, 32B active; MTP layer not counted)"
_GLM45_AIR = "zai-org/GLM-4.5 card (GLM-4.5-Air: 106B total, 12B active)"
_GLM46 = "zai-org/GLM-4.6 card (GLM-4.5's shape, 355B; context 200K: max_position 202752)"
_GLM47 = "zai-org/GLM-4.7 card (GLM-4.6's shape, 355B)"


#: the one table of model presets (adding one: a row here and its file in ``configs/``)
PRESETS: dict[str, Preset] = {
    "deepseek-v2": Preset(file="DeepSeek-V2.json", repo="deepseek-ai/DeepSeek-V2",
                          source="derived from DeepSeek-V2.deepseek_native.json (SOURCES.json)"),
    "deepseek-v2-lite": Preset(file="DeepSeek-V2-Lite.json", repo="deepseek-ai/DeepSeek-V2-Lite",
                               source="derived from DeepSeek-V2-Lite.deepseek_native.json"),
    "deepseek-v3": Preset(file="DeepSeek-V3.json", repo="deepseek-ai/DeepSeek-V3",
                          source=_verbatim("deepseek-ai/DeepSeek-V3")),
    "kimi-k2": Preset(file="Kimi-K2-Instruct.json", repo="moonshotai/Kimi-K2-Instruct",
                      source=_verbatim("moonshotai/Kimi-K2-Instruct")),
    "qwen2-57b-a14b": Preset(file="Qwen2-57B-A14B.transcribed.json", repo="Qwen/Qwen2-57B-A14B",
                             source="QWEN2_57B_A14B_CONFIG in NVIDIA/TensorRT-LLM tests"),
    "qwen3-30b-a3b": Preset(file="Qwen3-30B-A3B.json", repo="Qwen/Qwen3-30B-A3B",
                            source=_verbatim("Qwen/Qwen3-30B-A3B")),
    "qwen3-235b-a22b": Preset(file="Qwen3-235B-A22B.json", repo="Qwen/Qwen3-235B-A22B",
                              source=_verbatim("Qwen/Qwen3-235B-A22B")),
    "qwen3-235b-a22b-2507-fp8": Preset(
        file="Qwen3-235B-A22B-Instruct-2507-FP8.transcribed.json",
        repo="Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
        source="transcription: Qwen3-235B-A22B.json (verbatim) with the Instruct-2507 card's "
               "context (max_position_embeddings 262144, rope_theta 5e6) and Qwen's FP8 "
               "quantization_config (fine-grained fp8, 128x128 blocks, dynamic activations; "
               "routers and lm_head in bf16), as the Qwen3-*-FP8 cards describe"),
    "mixtral-8x7b": Preset(file="Mixtral-8x7B-v0.1.json", repo="mistralai/Mixtral-8x7B-v0.1",
                           source=_verbatim("mistralai/Mixtral-8x7B-v0.1")),
    "gpt-oss-120b": Preset(file="GPT-OSS-120B.json", repo="openai/gpt-oss-120b",
                           source=_verbatim("openai/gpt-oss-120b")),
    "gpt-oss-20b": Preset(file="GPT-OSS-20B.json", repo="openai/gpt-oss-20b",
                          source=_verbatim("openai/gpt-oss-20b")),
    "deepseek-v4-flash": Preset(file="DeepSeek-V4-Flash.json", repo="deepseek-ai/DeepSeek-V4-Flash",
                                source=_verbatim("deepseek-ai/DeepSeek-V4-Flash")),
    "qwen3.5-35b-a3b": Preset(file="Qwen3.5-35B-A3B.json", repo="Qwen/Qwen3.5-35B-A3B",
                              source=_verbatim("Qwen/Qwen3.5-35B-A3B")),
    "kimi-k2.5": Preset(file="Kimi-K2.5.json", repo="moonshotai/Kimi-K2.5",
                        source=_verbatim("moonshotai/Kimi-K2.5")),
    "glm-4.5": Preset(file="GLM-4.5.transcribed.json", repo="zai-org/GLM-4.5",
                      source=_glm("zai-org/GLM-4.5", _GLM45)),
    "glm-4.5-air": Preset(file="GLM-4.5-Air.transcribed.json", repo="zai-org/GLM-4.5-Air",
                          source=_glm("zai-org/GLM-4.5-Air", _GLM45_AIR)),
    "glm-4.5-air-fp8": Preset(file="GLM-4.5-Air-FP8.transcribed.json",
                              repo="zai-org/GLM-4.5-Air-FP8",
                              source=_glm("zai-org/GLM-4.5-Air-FP8", _GLM45_AIR) + _GLM_FP8),
    "glm-4.6": Preset(file="GLM-4.6.transcribed.json", repo="zai-org/GLM-4.6",
                      source=_glm("zai-org/GLM-4.6", _GLM46)),
    "glm-4.6-fp8": Preset(file="GLM-4.6-FP8.transcribed.json", repo="zai-org/GLM-4.6-FP8",
                          source=_glm("zai-org/GLM-4.6-FP8", _GLM46) + _GLM_FP8),
    "glm-4.7": Preset(file="GLM-4.7.transcribed.json", repo="zai-org/GLM-4.7",
                      source=_glm("zai-org/GLM-4.7", _GLM47)),
    "glm-5-fp8": Preset(file="GLM-5-FP8.json", repo="zai-org/GLM-5-FP8",
                        source=_verbatim("zai-org/GLM-5-FP8")),
    "llama-4-scout": Preset(file="Llama-4-Scout-17B-16E-Instruct.json",
                            repo="meta-llama/Llama-4-Scout-17B-16E-Instruct",
                            source=_verbatim("meta-llama/Llama-4-Scout-17B-16E-Instruct")),
    "gemma-4-26b-a4b": Preset(file="gemma-4-26B-A4B.json", repo="google/gemma-4-26B-A4B",
                              source=_verbatim("google/gemma-4-26B-A4B")),
    "nemotron-3-nano-30b-a3b": Preset(
        file="NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json",
        repo="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        source=_verbatim("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")),
    "minimax-m3": Preset(file="MiniMax-M3.json", repo="MiniMaxAI/MiniMax-M3",
                         source=_verbatim("MiniMaxAI/MiniMax-M3")),
}  # fmt: skip
MODEL_FILES = {name: p.file for name, p in PRESETS.items()}
#: other names of a preset: DeepSeek-R1 is DeepSeek-V3's network; a Hugging Face repo name is
#: the preset that ships its config (a path on disk of that name still wins, see
#: :func:`moeplan.specs.load_model`); Qwen3-235B-A22B-Instruct-2507 is Qwen3-235B-A22B's network
#: (its config differs in the context only — max_position_embeddings 262144, rope_theta 5e6 —
#: Qwen/Qwen3-235B-A22B-Instruct-2507 model card, "Number of Parameters: 235B in total and 22B activated", 94 layers, 64 Q / 4 KV
#: heads, 128 experts, 8 activated)
ALIASES = {
    "deepseek-r1": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    **{p.repo: name for name, p in PRESETS.items()},
}


def _read(*parts: str) -> Any:
    path = resources.files(__package__).joinpath(*parts)
    return json.loads(path.read_text(encoding="utf-8"))


def preset_key(name: str) -> str | None:
    """The preset ``name`` names — itself, an alias or a Hugging Face repo (``None``: none)."""
    key = ALIASES.get(name, name)
    return key if key in MODEL_FILES else None


@cache
def model_config(name: str) -> dict[str, Any]:
    """The shipped config dict of preset ``name``."""
    key = preset_key(name)
    if key is None:
        raise MoeplanError(
            f"model ({name!r}) is not a preset; choose one of "
            f"{', '.join(MODEL_FILES)} or pass a config.json or checkpoint folder"
        )
    return _read("configs", MODEL_FILES[key])


@cache
def cluster_table() -> dict[str, Any]:
    return _read("clusters", "clusters.json")


def preset_hf_quant(name: str) -> Any:
    """The ``hf_quant_config.json`` shipped beside preset ``name``'s config (``None``: none;
    no shipped preset is a ModelOpt checkpoint today)."""
    del name
    return None


def model_sources() -> dict[str, str]:
    """Preset name -> where its config comes from."""
    return {name: p.source for name, p in PRESETS.items()}


def model_repos() -> dict[str, str]:
    """Preset name -> the Hugging Face repo the engines load."""
    return {name: p.repo for name, p in PRESETS.items()}
