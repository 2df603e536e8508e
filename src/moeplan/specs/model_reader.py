"""A model ``config.json`` (and ModelOpt's ``hf_quant_config.json`` beside it) → the keyword
arguments of :class:`~moeplan.specs.model.ModelSpec` and its quantization rules.

The architecture is looked up in the registry (:mod:`moeplan.specs.architectures`); its
reader gives one record per decoder layer, from which the uniform fields are derived
(:func:`~moeplan.specs.layer_build.uniform_fields`). Families whose layers are all alike use
the uniform reader of :mod:`moeplan.specs.hf_config`. Quantization: the config's
``quantization_config`` (in the language model's keys or at the top) and the
``hf_quant_config.json`` ``quantization`` object. That file is read whole even when
config.json states the quantization too (both must agree on the method, algorithm, group size
and excluded modules, else one error line names both); a KV-cache algorithm moeplan does not
price (anything but FP8 or null, NVFP4 included) is one error line naming the field.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.errors import MoeplanError, show
from moeplan.specs.architectures import architecture_of, language_model, mtp_layers, towers
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
        towers=towers(root), module_prefix=arch.prefix, active_counts_lm_head=arch.lm_head_active,
        num_nextn_predict_layers=mtp_layers(lm, arch),
    )  # fmt: skip
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


#: ModelOpt ``kv_cache_quant_algo`` -> bytes per cached KV value moeplan prices (``None``
#: or absent: not stated). NVFP4 (e2m1 + scales) is a ModelOpt value moeplan does not price.
KV_ALGOS = {"FP8": 1}
#: compressed-tensors ``kv_cache_scheme.num_bits`` -> bytes per cached KV value
KV_SCHEME_BITS = {8: 1, 16: 0}


def _kv_bytes(q: dict[str, Any] | None, where: str) -> int:
    """Bytes per cached KV value a quantization object ``where`` states (0: not stated);
    a value moeplan does not price is one :class:`MoeplanError` line naming the field."""
    if not q:
        return 0
    algo = q.get("kv_cache_quant_algo")
    if algo is not None:
        field = f"{where}.kv_cache_quant_algo"
        if isinstance(algo, str) and algo.upper() == "NVFP4":
            raise MoeplanError(
                f"{field} ({show(algo)}): an NVFP4 KV cache is not modelled "
                f"(moeplan prices {', '.join(KV_ALGOS)} or an unquantized KV cache)"
            )
        if not (isinstance(algo, str) and algo.upper() in KV_ALGOS):
            raise MoeplanError(
                f"{field} ({show(algo)}) must be one of {', '.join(KV_ALGOS)} or null"
            )
        return KV_ALGOS[algo.upper()]
    scheme = q.get("kv_cache_scheme")
    if scheme is None:
        return 0
    bits = scheme.get("num_bits") if isinstance(scheme, dict) else None
    if type(bits) is not int or bits not in KV_SCHEME_BITS:
        raise MoeplanError(
            f"{where}.kv_cache_scheme ({show(scheme)}) must be an object whose num_bits is one of "
            f"{', '.join(map(str, KV_SCHEME_BITS))}"
        )
    return KV_SCHEME_BITS[bits]


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
    side_rules = _side_rules(side, name)
    rules = parse_quantization(q, name) if q is not None else side_rules
    if side_rules is not None and rules is not None:
        _agree_rules(rules, side_rules, name)
    where = f"config[{name}].quantization_config"
    kv_q, kv_side = _kv_bytes(q, where), _kv_bytes(side, f"{HF_QUANT_FILE}[{name}].quantization")
    if kv_q and kv_side and kv_q != kv_side:
        raise MoeplanError(
            f"{where} states {kv_q} byte(s) per KV value but {HF_QUANT_FILE} "
            f"kv_cache_quant_algo states {kv_side}: the two files must describe one checkpoint"
        )
    kv = kv_q or kv_side
    if rules is None or not kv:
        return rules
    return replace(rules, kv_bytes=kv)  # keeps the compiled pattern sets


def _side_rules(side: dict[str, Any] | None, name: str) -> QuantRules | None:
    """The rules ``hf_quant_config.json`` states on its own (every field it holds read and
    checked, even when config.json states them too); its errors name that file's field."""
    if side is None:
        return None
    try:
        return parse_quantization(_as_modelopt(side), name)
    except MoeplanError as err:
        prefix = f"config[{name}].quantization_config."
        raise MoeplanError(
            str(err).replace(prefix, f"{HF_QUANT_FILE}[{name}].quantization.")
        ) from None


def _agree_rules(rules: QuantRules, side: QuantRules, name: str) -> None:
    """config.json's and hf_quant_config.json's weight formats and excluded modules agree."""
    if rules.groups != side.groups or rules.layers != side.layers:
        raise MoeplanError(
            f"config[{name}].quantization_config weight format ({_formats(rules)}) contradicts "
            f"{HF_QUANT_FILE} quantization (quant_algo / group_size / quantized_layers: "
            f"{_formats(side)}): the two files must describe one checkpoint"
        )
    if set(rules.ignore) != set(side.ignore):
        extra = sorted(set(rules.ignore) ^ set(side.ignore))[:3]
        raise MoeplanError(
            f"config[{name}].quantization_config.ignore and {HF_QUANT_FILE} quantization."
            f"exclude_modules differ (e.g. {show(extra)}): the two files must describe one "
            "checkpoint"
        )


def _formats(rules: QuantRules) -> str:
    """The weight formats a rule set states, for an error line."""
    fmts = [f for _, f in rules.groups] + [f for _, f in rules.layers]
    names = sorted({f"{f.name}, group {f.group_size}" for f in fmts})
    more = f" over {len(rules.layers)} quantized_layers" if rules.layers else ""
    return "; ".join(names) + more


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
    # ``expert_dtype`` describes DeepSeek's own checkpoint (its fp8 ``quantization_config``
    # leaves the experts to it); a ModelOpt re-quantization states the experts itself
    experts = expert_format(config, name) if rules.method != "modelopt" else None
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
