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
    "mixtral-8x7b": Preset(file="Mixtral-8x7B-v0.1.json", repo="mistralai/Mixtral-8x7B-v0.1",
                           source=_verbatim("mistralai/Mixtral-8x7B-v0.1")),
    "gpt-oss-120b": Preset(file="GPT-OSS-120B.json", repo="openai/gpt-oss-120b",
                           source=_verbatim("openai/gpt-oss-120b")),
    "deepseek-v4-flash": Preset(file="DeepSeek-V4-Flash.json", repo="deepseek-ai/DeepSeek-V4-Flash",
                                source=_verbatim("deepseek-ai/DeepSeek-V4-Flash")),
    "qwen3.5-35b-a3b": Preset(file="Qwen3.5-35B-A3B.json", repo="Qwen/Qwen3.5-35B-A3B",
                              source=_verbatim("Qwen/Qwen3.5-35B-A3B")),
    "kimi-k2.5": Preset(file="Kimi-K2.5.json", repo="moonshotai/Kimi-K2.5",
                        source=_verbatim("moonshotai/Kimi-K2.5")),
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
ALIASES = {"deepseek-r1": "deepseek-v3"}


def _read(*parts: str) -> Any:
    path = resources.files(__package__).joinpath(*parts)
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def model_config(name: str) -> dict[str, Any]:
    """The shipped config dict of preset ``name``."""
    key = ALIASES.get(name, name)
    if key not in MODEL_FILES:
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
