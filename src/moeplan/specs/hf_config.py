"""Map a model ``config.json`` (Hugging Face or DeepSeek-native keys) to ModelSpec fields.

The uniform reader of the registry (:mod:`moeplan.specs.architectures`, entries with
``read=None``): families whose decoder layers are all alike — DeepSeek-V2/V3 and Kimi-K2 (MLA,
shared experts, ``first_k_dense_replace``, grouped routing), Qwen2-MoE / Qwen3-MoE (and the
language model of Qwen3-VL), Mixtral, GPT-OSS (its sliding / full ``layer_types``). Which
architectures reach this reader is the registry's decision; an unknown one is refused there.
DeepSeek's own inference configs (``dim``, ``n_layers``, ``inter_dim``, ``moe_inter_dim``...)
are translated first by :func:`native_to_hf`; DeepSeek's native ``dtype: fp8`` means its fp8
weights in 128x128 blocks. The weight quantization is read by
:mod:`moeplan.specs.model_reader` (``quantization_config`` and ``hf_quant_config.json``).

Every missing or ill-typed key raises :class:`MoeplanError` naming the key and the rule.

Bad bytes: :func:`read_json_file` is the bounded JSON reader of every user file
(config.json, plan.json): it opens regular files only (a FIFO or device would block), caps the
size (:data:`MAX_JSON_BYTES`), decodes strict UTF-8, refuses ``NaN``/``Infinity`` (model
configs excepted: Hugging Face writes them, and a key moeplan reads refuses them), integer
literals longer than :data:`MAX_INT_DIGITS` digits, floats that overflow, nesting deeper than
the interpreter can parse, and lone surrogates (they would crash the first print). Integer keys
are bounded by the model-size limits of :mod:`moeplan.specs.model` *before* anything is sized
from them, so the error names the config key. A checkpoint folder names its ``config.json``
(:func:`config_path`); the folder test opens the path the same non-blocking way.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from moeplan.errors import MoeplanError, check_float, check_int, show
from moeplan.specs.limits import (
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_ROUTED_SCALE,
    MAX_VOCAB,
)

MAX_JSON_BYTES = 16 * 2**20  # real config.json / plan.json files are < 1 MiB
MAX_INT_DIGITS = 30  # no size in a real config needs more digits (int64 has 19)
NATIVE_FP8_BLOCK = 128  # DeepSeek-V3 inference/model.py ModelArgs.block_size (fp8 weight blocks)

# per-key upper bounds (lower bound 0; ModelSpec then requires > 0 where it must)
_KEY_MAX = {
    "num_hidden_layers": MAX_LAYERS,
    "first_k_dense_replace": MAX_LAYERS,
    "num_nextn_predict_layers": MAX_LAYERS,
    "moe_layer_freq": MAX_LAYERS,
    "decoder_sparse_step": MAX_LAYERS,
    "hidden_size": MAX_HIDDEN,
    "vocab_size": MAX_VOCAB,
    "num_attention_heads": MAX_HEADS,
    "num_key_value_heads": MAX_HEADS,
    "head_dim": MAX_HEAD_DIM,
    "q_lora_rank": MAX_HIDDEN,
    "kv_lora_rank": MAX_HIDDEN,
    "qk_nope_head_dim": MAX_HEAD_DIM,
    "qk_rope_head_dim": MAX_HEAD_DIM,
    "v_head_dim": MAX_HEAD_DIM,
    "num_experts": MAX_EXPERTS,
    "num_local_experts": MAX_EXPERTS,
    "n_routed_experts": MAX_EXPERTS,
    "num_experts_per_tok": MAX_EXPERTS,
    "experts_per_token": MAX_EXPERTS,
    "n_shared_experts": MAX_EXPERTS,
    "n_group": MAX_EXPERTS,
    "topk_group": MAX_EXPERTS,
    "moe_intermediate_size": MAX_INTERMEDIATE,
    "intermediate_size": MAX_INTERMEDIATE,
    "shared_expert_intermediate_size": MAX_INTERMEDIATE,
    "sliding_window": MAX_CONTEXT,
}

# DeepSeek inference ModelArgs key -> Hugging Face key
_NATIVE_KEYS = {
    "dim": "hidden_size",
    "inter_dim": "intermediate_size",
    "moe_inter_dim": "moe_intermediate_size",
    "n_layers": "num_hidden_layers",
    "n_dense_layers": "first_k_dense_replace",
    "n_heads": "num_attention_heads",
    "n_routed_experts": "n_routed_experts",
    "n_shared_experts": "n_shared_experts",
    "n_activated_experts": "num_experts_per_tok",
    "n_expert_groups": "n_group",
    "n_limited_groups": "topk_group",
    "route_scale": "routed_scaling_factor",
    "score_func": "scoring_func",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
    "vocab_size": "vocab_size",
}


def is_native(config: dict[str, Any]) -> bool:
    """True for DeepSeek's inference ``ModelArgs`` key names (``dim``, ``n_layers``...)."""
    return "dim" in config and "n_layers" in config and "hidden_size" not in config


def native_to_hf(config: dict[str, Any]) -> dict[str, Any]:
    """Translate DeepSeek-native keys into a Hugging Face-style DeepSeek config dict."""
    out: dict[str, Any] = {_NATIVE_KEYS[k]: v for k, v in config.items() if k in _NATIVE_KEYS}
    version = (
        "DeepseekV3ForCausalLM"
        if config.get("score_func") == "sigmoid"
        else "DeepseekV2ForCausalLM"
    )
    out["architectures"] = [version]
    out["model_type"] = "deepseek_v3" if "V3" in version else "deepseek_v2"
    out["num_key_value_heads"] = out.get("num_attention_heads")
    out.setdefault("n_group", 1)
    out.setdefault("topk_group", 1)
    out.setdefault("scoring_func", "softmax")
    if config.get("dtype") == "fp8":  # DeepSeek inference/model.py: ModelArgs block_size = 128
        block = config.get("block_size", NATIVE_FP8_BLOCK)
        out["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "weight_block_size": [block, block],
        }
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer literal of {len(text)} digits exceeds {MAX_INT_DIGITS}")
    return int(text)


def _parse_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:20]} overflows a float")
    return v


def _constant(name: str) -> float:
    return float(name)  # "Infinity", "-Infinity", "NaN": what Python's json writes and reads


def read_json_file(path: str | os.PathLike[str], what: str, constants: bool = False) -> Any:
    """Parse the JSON file at ``path``; every failure is one :class:`MoeplanError` line.

    ``constants``: accept ``Infinity`` / ``NaN`` (Hugging Face writes them into model configs,
    e.g. Nemotron's ``time_step_limit``); a non-finite value in a key moeplan reads is then
    refused by that key's check, naming the key."""
    if "\x00" in str(path):
        raise MoeplanError(f"{what} ({show(str(path))}) must not contain a NUL byte")
    try:  # non-blocking, checked on the descriptor: a FIFO or device is refused, never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise MoeplanError(f"{what} ({path}) could not be read: {err.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise MoeplanError(f"{what} ({path}) must be a regular file")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_JSON_BYTES:
            raise MoeplanError(
                f"{what} ({path}, {st.st_size} bytes) must be at most {MAX_JSON_BYTES} bytes"
            )
        os.set_blocking(fd, True)
        try:
            data = fh.read(MAX_JSON_BYTES + 1)
        except OSError as err:
            raise MoeplanError(f"{what} ({path}) could not be read: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise MoeplanError(f"{what} ({path}) is not UTF-8 text: byte {err.start}") from None
    try:
        obj = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_constant if constants else _reject_constant,
        )
    except json.JSONDecodeError as err:
        raise MoeplanError(
            f"{what} ({path}) is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
        ) from None
    except RecursionError:
        raise MoeplanError(f"{what} ({path}) is nested too deeply to be JSON we read") from None
    except ValueError as err:
        raise MoeplanError(f"{what} ({path}) is not valid JSON: {err}") from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise MoeplanError(
            f"{what} ({path}) has a string with a lone surrogate (invalid Unicode)"
        ) from None
    return obj


def read_config_file(path: str | os.PathLike[str]) -> Any:
    """A user's model ``config.json`` as parsed JSON (see :func:`read_json_file`)."""
    return read_json_file(Path(path), "model config", constants=True)


def _mode(path: Path) -> int | None:
    """``st_mode`` of ``path`` (``None``: nothing there), read on a non-blocking descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError):  # ValueError: a NUL byte, refused by the reader
        return None
    try:
        return os.fstat(fd).st_mode
    finally:
        os.close(fd)


def exists(path: str | os.PathLike[str]) -> bool:
    """True when something is at ``path`` (a file or a folder a user may name as a model)."""
    return _mode(Path(path)) is not None


def is_folder(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder (a checkpoint folder, as Hugging Face downloads one)."""
    mode = _mode(Path(path))
    return mode is not None and stat.S_ISDIR(mode)


def config_path(path: str | os.PathLike[str]) -> Path:
    """The model config a user's path names: ``path`` itself, or the ``config.json`` of a
    checkpoint folder (the ``hf_quant_config.json`` beside it is then read too); a folder
    without a ``config.json`` is one line naming it."""
    p = Path(path)
    if not is_folder(p):
        return p
    if _mode(p / "config.json") is None:
        raise MoeplanError(
            f"model folder ({p}) holds no config.json: give a Hugging Face "
            "checkpoint folder or the path of its config.json"
        )
    return p / "config.json"


def _get(cfg: dict[str, Any], name: str, *keys: str, default: Any = None, kind: type = int) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            field = f"config[{name}].{k}"
            if kind is int:
                return check_int(field, v, 0, _KEY_MAX.get(k))
            if kind is float:
                return check_float(field, v, 0.0)
            return v
    if default is None:
        raise MoeplanError(f"config[{name}] is missing required key {' or '.join(keys)!r}")
    return default


def _text(cfg: dict[str, Any], name: str, key: str, default: str) -> str:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, str) or len(v) > 200:
        raise MoeplanError(f"config[{name}].{key} ({show(v)}) must be a short string")
    return v


def _flag(cfg: dict[str, Any], name: str, key: str, default: bool) -> bool:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise MoeplanError(f"config[{name}].{key} ({show(v)}) must be true or false")
    return v


def _arch(cfg: dict[str, Any], name: str) -> str:
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return _text({"architectures": archs[0]}, name, "architectures", "")
    return _text(cfg, name, "model_type", "unknown")


def spec_kwargs_from_config(config: dict[str, Any], name: str) -> dict[str, Any]:
    """Keyword arguments of :class:`ModelSpec` for ``config`` (HF or DeepSeek-native)."""
    if not isinstance(config, dict):
        raise MoeplanError(f"config[{name}] must be a JSON object, got {type(config).__name__}")
    cfg = native_to_hf(config) if is_native(config) else config
    arch = _arch(cfg, name)
    g = lambda *keys, **kw: _get(cfg, name, *keys, **kw)  # noqa: E731
    hidden = g("hidden_size")
    heads = g("num_attention_heads")
    mla = "kv_lora_rank" in cfg and cfg.get("kv_lora_rank")
    kw: dict[str, Any] = dict(
        name=name,
        architecture=arch,
        num_layers=g("num_hidden_layers"),
        hidden_size=hidden,
        vocab_size=g("vocab_size"),
        num_attention_heads=heads,
        num_kv_heads=g("num_key_value_heads", default=heads),
        head_dim=g("head_dim", default=_split_hidden(cfg, name, hidden, heads, mla)),
        num_experts=g("num_experts", "num_local_experts", "n_routed_experts"),
        top_k=g("num_experts_per_tok", "experts_per_token"),
        moe_intermediate_size=g("moe_intermediate_size", "intermediate_size"),
        tie_word_embeddings=_flag(cfg, name, "tie_word_embeddings", False),
    )
    model_type = _text(cfg, name, "model_type", "")
    kw["active_counts_embedding"] = model_type.startswith(("qwen", "mixtral"))
    if mla:
        kw.update(
            attention="mla",
            q_lora_rank=g("q_lora_rank", default=0),
            kv_lora_rank=g("kv_lora_rank"),
            qk_nope_head_dim=g("qk_nope_head_dim"),
            qk_rope_head_dim=g("qk_rope_head_dim"),
            v_head_dim=g("v_head_dim"),
        )
    _family_fields(cfg, name, model_type, kw)
    return kw


def _split_hidden(cfg: dict[str, Any], name: str, hidden: int, heads: int, mla: Any) -> int:
    """``hidden / heads`` when ``head_dim`` is absent (the modelling code's split); GQA needs
    it exact."""
    if heads and hidden % heads and not mla and cfg.get("head_dim") is None:
        raise MoeplanError(
            f"config[{name}].hidden_size ({hidden}) must be num_attention_heads "
            f"({heads}) x head_dim when head_dim is not given"
        )
    return hidden // heads if heads else 0


def _family_fields(cfg: dict[str, Any], name: str, model_type: str, kw: dict[str, Any]) -> None:
    g = lambda *keys, **kw2: _get(cfg, name, *keys, **kw2)  # noqa: E731
    n_layers = kw["num_layers"]
    if "n_routed_experts" in cfg or model_type.startswith(("deepseek", "kimi")):
        n_shared = g("n_shared_experts", default=0)
        kw.update(
            num_shared_experts=n_shared,
            shared_intermediate_size=n_shared * kw["moe_intermediate_size"],
            dense_intermediate_size=g("intermediate_size", default=0),
            first_k_dense=g("first_k_dense_replace", default=0),
            num_nextn_predict_layers=g("num_nextn_predict_layers", default=0),
            moe_layer_freq=g("moe_layer_freq", default=1),
            n_group=g("n_group", default=1),
            topk_group=g("topk_group", default=1),
            routed_scaling_factor=check_float(
                f"config[{name}].routed_scaling_factor",
                g("routed_scaling_factor", default=1.0, kind=float),
                hi=MAX_ROUTED_SCALE,
                positive=True,
            ),
            scoring_func=_text(cfg, name, "scoring_func", "softmax"),
            router_bias=cfg.get("topk_method") == "noaux_tc"
            or cfg.get("scoring_func") == "sigmoid",
        )
        return
    if model_type.startswith("qwen"):
        shared = g("shared_expert_intermediate_size", default=0)
        mlp_only = cfg.get("mlp_only_layers") or []
        if (
            not isinstance(mlp_only, list)
            or len(mlp_only) > n_layers
            or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers
                for i in mlp_only
            )
        ):
            raise MoeplanError(
                f"config[{name}].mlp_only_layers ({show(mlp_only)}) must be a "
                f"list of layer indices in [0, {n_layers})"
            )
        kw.update(
            num_shared_experts=1 if shared else 0,
            shared_intermediate_size=shared,
            shared_expert_gate=bool(shared),
            dense_layers=tuple(sorted(set(mlp_only))),
            dense_intermediate_size=g("intermediate_size", default=0),
            moe_layer_freq=g("decoder_sparse_step", default=1),
            qk_norm=model_type.startswith("qwen3"),
            attention_bias=_flag(cfg, name, "attention_bias", model_type == "qwen2_moe"),
        )
        return
    if model_type == "gpt_oss":
        types = cfg.get("layer_types") or []
        if not isinstance(types, list) or len(types) not in (0, n_layers):
            raise MoeplanError(
                f"config[{name}].layer_types ({show(types)}) must list "
                f"one type per layer ({n_layers})"
            )
        kw.update(
            attention_bias=True,
            attention_out_bias=True,
            attention_sinks=True,
            expert_bias=True,
            router_bias=True,
            moe_intermediate_size=g("intermediate_size"),
            sliding_window=g("sliding_window", default=0),
            sliding_layers=tuple(i for i, t in enumerate(types) if t == "sliding_attention"),
        )
        return
    # Mixtral and unknown architectures with the usual keys
    kw.update(attention_bias=_flag(cfg, name, "attention_bias", False), sliding_window=0)
    if "moe_intermediate_size" not in cfg:
        kw["moe_intermediate_size"] = g("intermediate_size")
