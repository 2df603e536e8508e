"""Shipped presets: model configs and cluster descriptions (package data, with sources).

Reading package data is the only file access in the specs layer; user files are read by the
CLI and handed over as dicts.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from moeplan.errors import MoeplanError

MODEL_FILES = {
    "deepseek-v2": "DeepSeek-V2.json",
    "deepseek-v2-lite": "DeepSeek-V2-Lite.json",
    "deepseek-v3": "DeepSeek-V3.json",
    "kimi-k2": "Kimi-K2-Instruct.json",
    "qwen2-57b-a14b": "Qwen2-57B-A14B.transcribed.json",
    "qwen3-30b-a3b": "Qwen3-30B-A3B.json",
    "qwen3-235b-a22b": "Qwen3-235B-A22B.json",
    "mixtral-8x7b": "Mixtral-8x7B-v0.1.json",
    "gpt-oss-120b": "GPT-OSS-120B.json",
}
ALIASES = {"deepseek-r1": "deepseek-v3"}


def _read(*parts: str) -> Any:
    path = resources.files(__package__).joinpath(*parts)
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def model_config(name: str) -> dict[str, Any]:
    """The shipped config dict of preset ``name``."""
    key = ALIASES.get(name, name)
    if key not in MODEL_FILES:
        raise MoeplanError(f"model ({name!r}) is not a preset; choose one of "
                           f"{', '.join(MODEL_FILES)} or pass a path to a config.json")
    return _read("configs", MODEL_FILES[key])


@cache
def cluster_table() -> dict[str, Any]:
    return _read("clusters", "clusters.json")


@cache
def model_sources() -> dict[str, str]:
    return _read("configs", "SOURCES.json")
