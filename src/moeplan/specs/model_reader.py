"""A model ``config.json`` (and ModelOpt's ``hf_quant_config.json`` beside it) → the keyword
arguments of :class:`~moeplan.specs.model.ModelSpec` and its quantization rules.

The architecture is looked up in the registry (:mod:`moeplan.specs.architectures`); its
reader gives one record per decoder layer, from which the uniform fields are derived
(:func:`~moeplan.specs.layer_build.uniform_fields`). Families whose layers are all alike use
the uniform reader of :mod:`moeplan.specs.hf_config`. Quantization: the config's
``quantization_config`` (in the language model's keys or at the top) and the
``hf_quant_config.json`` ``quantization`` object; when both are present they must agree on
the method and algorithm, else one error line names both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.errors import MoeplanError, show
from moeplan.specs.architectures import architecture_of, language_model, towers
from moeplan.specs.config_reader import Cfg
from moeplan.specs.hf_config import is_native, native_to_hf, spec_kwargs_from_config
from moeplan.specs.layer_build import uniform_fields
from moeplan.specs.limits import MAX_ROUTED_SCALE
from moeplan.specs.quant import ModuleQuant, QuantRules, WeightFormat
from moeplan.specs.quant_modules import linear_modules
from moeplan.specs.quant_parse import E8M0_SCALE, MXFP4_GROUP, parse_quantization

HF_QUANT_FILE = "hf_quant_config.json"


def spec_kwargs(config: Any, name: str) -> dict[str, Any]:
    """ModelSpec keyword arguments of ``config`` (see module docstring)."""
    if not isinstance(config, dict):
        raise MoeplanError(f"config[{name}] must be a JSON object, got {type(config).__name__}")
    if is_native(config):
        return spec_kwargs_from_config(config, name)
    arch = architecture_of(config, name)
    root = Cfg(config, name)
    lm = language_model(root)
    extra = dict(
        towers=towers(root), module_prefix=arch.prefix, active_counts_lm_head=arch.lm_head_active
    )
    tie = lm.flag("tie_word_embeddings", root.flag("tie_word_embeddings", False))
    if arch.read is None:
        kw = spec_kwargs_from_config(lm.data if lm is not root else config, name)
        kw.update(extra, tie_word_embeddings=tie, active_counts_embedding=arch.embedding_active)
        if lm is not root:
            kw["architecture"] = arch.name
        return kw
    layers = arch.read(lm)
    scale = lm.float("routed_scaling_factor", 0.0, MAX_ROUTED_SCALE) or lm.float(
        "moe_router_scaling_factor", 1.0, MAX_ROUTED_SCALE
    )
    return dict(
        name=name, architecture=arch.name, num_layers=len(layers),
        hidden_size=lm.int("hidden_size", lo=1), vocab_size=lm.int("vocab_size", lo=1),
        tie_word_embeddings=tie, active_counts_embedding=arch.embedding_active,
        routed_scaling_factor=scale or 1.0, layers=layers, **uniform_fields(layers), **extra,
    )  # fmt: skip


def _kv_bytes(q: dict[str, Any] | None) -> int:
    """Bytes per cached KV value a quantization object states (0: not stated)."""
    if not q:
        return 0
    algo = q.get("kv_cache_quant_algo")
    if isinstance(algo, str) and algo.upper() == "FP8":
        return 1
    scheme = q.get("kv_cache_scheme")
    if isinstance(scheme, dict) and scheme.get("num_bits") == 8:
        return 1
    return 0


def quant_rules(config: Any, name: str, hf_quant: Any = None) -> QuantRules | None:
    """The checkpoint's weight (and KV-cache) quantization, ``None`` when unquantized."""
    cfg = native_to_hf(config) if is_native(config) else config
    lm = cfg.get("text_config") or cfg.get("language_config") or {}
    q = (lm.get("quantization_config") if isinstance(lm, dict) else None) or cfg.get(
        "quantization_config"
    )
    side = None
    if hf_quant is not None:
        side = hf_quant.get("quantization") if isinstance(hf_quant, dict) else None
        if not isinstance(side, dict):
            raise MoeplanError(f"{HF_QUANT_FILE}[{name}].quantization ({show(side)}) must be an "
                               "object")  # fmt: skip
        _agree(q, side, name)
    rules = parse_quantization(q if q is not None else _as_modelopt(side), name)
    kv = _kv_bytes(q) or _kv_bytes(side)
    if rules is None or not kv:
        return rules
    return replace(rules, kv_bytes=kv)  # keeps the compiled pattern sets


def _as_modelopt(side: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if side is None else {**side, "quant_method": "modelopt"}


def _agree(q: Any, side: dict[str, Any], name: str) -> None:
    """config.json's ``quantization_config`` and hf_quant_config.json must not contradict."""
    if q is None:
        return
    method = q.get("quant_method") if isinstance(q, dict) else q
    algo, side_algo = (q.get("quant_algo") if isinstance(q, dict) else None), side.get("quant_algo")
    if method != "modelopt" or (algo is not None and algo != side_algo):
        raise MoeplanError(
            f"config[{name}].quantization_config (quant_method {show(method)}, quant_algo "
            f"{show(algo)}) contradicts {HF_QUANT_FILE} quantization.quant_algo "
            f"({show(side_algo)}): the two files must describe one checkpoint"
        )


#: DeepSeek-V4 ``expert_dtype``: routed experts stored apart from ``quantization_config``.
#: ``fp4``: e2m1 weights with one ue8m0 scale per 32 (OCP MX FP4, ``scale_fmt: ue8m0``).
EXPERT_DTYPES = {
    "fp4": WeightFormat(
        name="mxfp4",
        bits=4,
        group_size=MXFP4_GROUP,
        scale_bytes=E8M0_SCALE,
        compute="fp8",
        kernel_dtype="w4a16_mxfp4",
    ),
}


def expert_format(config: Any, name: str) -> WeightFormat | None:
    """The routed experts' own storage when the config states one (``expert_dtype``)."""
    if not isinstance(config, dict) or config.get("expert_dtype") is None:
        return None
    v = config["expert_dtype"]
    if not isinstance(v, str) or v not in EXPERT_DTYPES:
        raise MoeplanError(f"config[{name}].expert_dtype ({show(v)}) is not supported: supported "
                           f"values are {', '.join(EXPERT_DTYPES)}")  # fmt: skip
    return EXPERT_DTYPES[v]


def with_quantization(spec: Any, config: Any, name: str, hf_quant: Any = None) -> Any:
    """``spec`` (a :class:`~moeplan.specs.model.ModelSpec`) with the checkpoint's stored
    weight formats per module class and, when stated, its KV-cache dtype on every cache."""
    rules = quant_rules(config, name, hf_quant)
    if rules is None:
        return spec
    quant = rules.resolve(linear_modules(spec))
    experts = expert_format(config, name)
    if experts is not None:
        mq = ModuleQuant(bytes_per_weight=experts.bytes_per_weight, format=experts)
        quant = replace(quant, experts=mq)
    spec = replace(spec, quant=quant)
    if not rules.kv_bytes:
        return spec
    layers = tuple(
        replace(x, mixer=replace(x.mixer, kv_bytes=rules.kv_bytes)) if x.mixer.has_kv_cache else x
        for x in spec.layer_specs
    )
    return replace(spec, layers=layers, _layers=(), _moe_flags=())
