"""Read a Hugging Face ``quantization_config`` into :class:`~moeplan.specs.quant.QuantRules`.

One reader per ``quant_method``; the storage each assumes is what the
checkpoints of that method hold on disk:

- ``fp8`` (transformers FineGrainedFP8, DeepSeek-V3 / Kimi-K2): e4m3 weights, one fp32
  ``weight_scale_inv`` per ``weight_block_size`` block (per tensor without it: not counted);
  activations quantized per token group, so GEMMs run at the fp8 rate.
- ``mxfp4`` (GPT-OSS): 4-bit e2m1 weights with one 8-bit e8m0 scale per 32 (4.25 bits); bf16
  activations.
- ``awq`` (AutoAWQ; ``bits``/``w_bit``, ``group_size``/``q_group_size``, ``zero_point``):
  packed weights, one fp16 scale and, with ``zero_point``, one packed ``bits``-bit zero per
  group.
- ``gptq`` (AutoGPTQ / GPTQModel): packed weights, one fp16 scale and one packed zero per group
  (GPTQ checkpoints store ``qzeros`` even when symmetric); ``lm_head`` flag; optional
  ``modules_in_block_to_quantize`` and GPTQModel ``dynamic`` ``-:`` exclusions.
- ``bitsandbytes``: 4-bit nf4/fp4 in blocks of 64 with an fp32 absmax (double quantization:
  an 8-bit absmax plus one fp32 per 256 blocks), or 8-bit LLM.int8 (per-row fp32 scale, not
  counted); served dequantized, bf16 compute.
- ``compressed-tensors`` (llm-compressor): ``config_groups`` of ``targets`` + ``weights`` (+
  ``input_activations``), an ``ignore`` list; ``pack-quantized`` packs ``num_bits`` into int32,
  ``int-quantized`` / ``naive-quantized`` keep one int8 per weight; group scales in
  ``scale_dtype`` (default bf16, fp8 for 4-bit floats such as nvfp4), zero points
  (asymmetric) in ``num_bits``; ``block`` strategy: one scale per ``block_structure``.

- ``modelopt`` (NVIDIA ModelOpt ``quant_algo``, :data:`_MODELOPT`): FP8 e4m3 per tensor,
  NVFP4 e2m1 with one e4m3 scale per 16 (0.5625 bytes per weight), INT4 AWQ, MXFP4 / MXFP8;
  ``MIXED_PRECISION`` reads the per-module ``quantized_layers`` map exactly (a module it does
  not name stays bf16); ``ignore`` / ``exclude_modules`` are shell globs.

Anything else — a different ``quant_method``, a sparse compressed-tensors format, a value
of the wrong type — is one :class:`MoeplanError` line; never a silent bf16.
"""

from __future__ import annotations

import re
from typing import Any

from moeplan.errors import MoeplanError, check_int, require, show
from moeplan.specs.quant import BF16, QuantRules, WeightFormat, unsupported

FP16_SCALE = 2  # AWQ / GPTQ scales are fp16
FP32_SCALE = 4  # DeepSeek fp8 weight_scale_inv, bitsandbytes absmax
E8M0_SCALE = 1  # OCP microscaling (MXFP4) shared exponent
MXFP4_GROUP = 32  # OCP MX spec: 32 elements per shared scale
NVFP4_GROUP = 16  # NVIDIA NVFP4: 16 e2m1 elements share one e4m3 scale
BNB_BLOCK = 64  # bitsandbytes 4-bit blocksize (quantize_4bit default)
BNB_NESTED_BLOCK = 256  # double quantization: absmax quantized in blocks of 256
#: ignore / target entries a config may list: ModelOpt writes one per module it leaves out,
#: so a checkpoint that excludes every expert of a 1T model by name lists ~70k
#: (61 layers x 384 experts x 3 projections: Kimi-K2); 3 MB lists hold ~60k names
MAX_PATTERNS = 2**18
MAX_PATTERN_CHARS = 300
MAX_GROUP = 2**24
# a quantified group that itself contains a quantifier: catastrophic backtracking in re.match
_NESTED_QUANTIFIER = re.compile(r"\([^)]*[*+}][^)]*\)\s*[*+{]")
_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "float8_e4m3fn": 1,
    "float8_e8m0fnu": 1,
    "uint8": 1,
}


def _field(name: str, key: str) -> str:
    return f"config[{name}].quantization_config.{key}"


def _int(
    d: dict[str, Any], name: str, key: str, default: int, lo: int, hi: int, at: str = ""
) -> int:
    v = d.get(key)
    return default if v is None else check_int(_field(name, at + key), v, lo, hi)


def _bool(d: dict[str, Any], name: str, key: str, default: bool, at: str = "") -> bool:
    v = d.get(key)
    if v is None:
        return default
    require(isinstance(v, bool), f"{_field(name, at + key)} ({show(v)}) must be true or false")
    return bool(v)


def _choice(
    d: dict[str, Any], name: str, key: str, allowed: tuple[str, ...], default: str, at: str = ""
) -> str:
    v = d.get(key)
    if v is None:
        return default
    rule = f"must be one of {', '.join(allowed)}"
    require(isinstance(v, str) and v in allowed, f"{_field(name, at + key)} ({show(v)}) {rule}")
    return str(v)


def _patterns(v: Any, name: str, key: str) -> tuple[str, ...]:
    """A config's list of module names / patterns, bounded (see :data:`_NESTED_QUANTIFIER`)."""
    if v is None:
        return ()
    ok = (
        isinstance(v, list)
        and len(v) <= MAX_PATTERNS
        and all(isinstance(p, str) and 0 < len(p) <= MAX_PATTERN_CHARS for p in v)
    )
    require(ok, f"{_field(name, key)} ({show(v)}) must be a list of module names or patterns")
    bad = [p for p in v if "(" in p and _NESTED_QUANTIFIER.search(p)]  # needs a group
    require(not bad, f"{_field(name, key)} ({show(bad[:1])}) nests quantifiers in a pattern")
    return tuple(v)


def _not_convert(q: dict[str, Any], name: str, key: str = "modules_to_not_convert") -> tuple:
    return _patterns(q.get(key), name, key)


def _group(q: dict[str, Any], name: str, key: str) -> int:
    """``group_size``: -1 is per channel (scales not counted, 0 here)."""
    g = _int(q, name, key, 128, -1, MAX_GROUP)
    require(g != 0, f"{_field(name, key)} (0) must be -1 (per channel) or positive")
    return max(g, 0)


def _block(v: Any, name: str, key: str) -> tuple[int, int]:
    """A ``[rows, cols]`` scale block (``"128x128"`` accepted): rows of the output dimension
    (``block_n``), columns of the input one (``block_k``)."""
    if isinstance(v, str) and re.fullmatch(r"\d{1,4}x\d{1,4}", v):
        v = [int(x) for x in v.split("x")]
    require(
        isinstance(v, list) and len(v) == 2, f"{_field(name, key)} ({show(v)}) must be [rows, cols]"
    )
    rows, cols = (check_int(_field(name, key), b, 1, 2**12) for b in v)
    return rows, cols


def _one(method: str, fmt: WeightFormat, ignore: tuple, **kw: Any) -> QuantRules:
    return QuantRules(method=method, groups=(((), fmt),), ignore=ignore, **kw)


def _fp8(q: dict[str, Any], name: str) -> QuantRules:
    v = q.get("weight_block_size")
    block = () if v is None else _block(v, name, "weight_block_size")
    group = block[0] * block[1] if block else 0
    kind = "fp8_block" if group else "fp8"
    fmt = WeightFormat(
        name=kind,
        bits=8,
        group_size=group,
        block=block,
        scale_bytes=FP32_SCALE if group else 0,
        compute="fp8",
        kernel_dtype=kind,
    )
    return _one("fp8", fmt, _not_convert(q, name))


def _mxfp4(q: dict[str, Any], name: str) -> QuantRules:
    fmt = WeightFormat(
        name="mxfp4",
        bits=4,
        group_size=MXFP4_GROUP,
        scale_bytes=E8M0_SCALE,
        kernel_dtype="w4a16_mxfp4",
    )
    return _one("mxfp4", fmt, _not_convert(q, name))


def _int_format(bits: int, group: int, zero: bool) -> WeightFormat:
    """Packed ``bits``-bit integers, an fp16 scale and a packed ``bits``-bit zero per group."""
    return WeightFormat(
        name=f"int{bits}",
        bits=bits,
        group_size=group,
        scale_bytes=FP16_SCALE if group else 0,
        zero_bytes=bits / 8 if zero and group else 0,
        kernel_dtype="int4_wo" if bits <= 4 else "int8_wo",
    )


def _awq(q: dict[str, Any], name: str) -> QuantRules:
    bits = _int(q, name, "bits" if "bits" in q else "w_bit", 4, 2, 8)
    group = _group(q, name, "group_size" if "group_size" in q else "q_group_size")
    fmt = _int_format(bits, group, _bool(q, name, "zero_point", True))
    return _one("awq", fmt, _not_convert(q, name))


def _gptq(q: dict[str, Any], name: str) -> QuantRules:
    fmt = _int_format(_int(q, name, "bits", 4, 2, 8), _group(q, name, "group_size"), True)
    blocks, key = q.get("modules_in_block_to_quantize"), "modules_in_block_to_quantize"
    targets: tuple[str, ...] = ()
    if blocks is not None:
        ok = isinstance(blocks, list) and all(isinstance(b, list) for b in blocks)
        require(ok, f"{_field(name, key)} ({show(blocks)}) must be a list of lists of names")
        targets = _patterns([p for b in blocks for p in b], name, key)
        require(bool(targets), f"{_field(name, key)} ({show(blocks)}) names no module")
    dynamic = q.get("dynamic") or {}
    require(
        isinstance(dynamic, dict), f"{_field(name, 'dynamic')} ({show(dynamic)}) must be an object"
    )
    skip = _patterns(
        [k[2:] for k in dynamic if isinstance(k, str) and k.startswith("-:")], name, "dynamic"
    )
    return QuantRules(
        method="gptq",
        groups=((targets, fmt),),
        ignore=_not_convert(q, name) + skip,
        lm_head=_bool(q, name, "lm_head", False),
    )


def _bnb(q: dict[str, Any], name: str) -> QuantRules:
    four = _bool(q, name, "load_in_4bit", False)
    eight = _bool(q, name, "load_in_8bit", False)
    require(
        four != eight,
        f"{_field(name, 'load_in_4bit')} ({four}) and load_in_8bit ({eight}) "
        "must have exactly one true",
    )
    if four:
        kind = _choice(q, name, "bnb_4bit_quant_type", ("nf4", "fp4"), "fp4")
        nested = _bool(q, name, "bnb_4bit_use_double_quant", False)
        absmax = 1 + FP32_SCALE / BNB_NESTED_BLOCK if nested else FP32_SCALE
        fmt = WeightFormat(
            name=kind, bits=4, group_size=BNB_BLOCK, scale_bytes=absmax, kernel_dtype="int4_wo"
        )
    else:
        fmt = WeightFormat(name="int8", bits=8, kernel_dtype="int8_wo")
    return _one("bitsandbytes", fmt, _not_convert(q, name, "llm_int8_skip_modules"))


_CT_PACKED = ("pack-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized")
_CT_UNPACKED = ("int-quantized", "naive-quantized", "float-quantized")
_CT_STRATEGIES = ("tensor", "channel", "group", "tensor_group", "block")


def _ct_compute(a: Any, name: str, at: str) -> str:
    """GEMM compute dtype from ``input_activations`` (``None``: weight-only, bf16)."""
    if a is None:
        return "bf16"
    require(isinstance(a, dict), f"{_field(name, at[:-1])} ({show(a)}) must be an object or null")
    if _int(a, name, "num_bits", 8, 1, 16, at) >= 16:
        return "bf16"
    return "fp8" if _choice(a, name, "type", ("int", "float"), "int", at) == "float" else "int8"


def _ct_weights(g: dict[str, Any], name: str, at: str, packed: bool) -> WeightFormat:
    """One config group's weight format (``at``: the group's key path, ending in a dot)."""
    w: Any = g.get("weights")
    require(isinstance(w, dict), f"{_field(name, at + 'weights')} ({show(w)}) must be an object")
    compute = _ct_compute(g.get("input_activations"), name, at + "input_activations.")
    wat = at + "weights."
    bits = check_int(_field(name, wat + "num_bits"), w.get("num_bits"), 1, 16)
    kind = _choice(w, name, "type", ("int", "float"), "int", wat)
    strategy = _choice(w, name, "strategy", _CT_STRATEGIES, "tensor", wat)
    group, block = 0, ()
    if strategy in ("group", "tensor_group"):
        group = check_int(_field(name, wat + "group_size"), w.get("group_size"), 1, MAX_GROUP)
    elif strategy == "block":
        block = _block(w.get("block_structure"), name, wat + "block_structure")
        group = block[0] * block[1]
    if bits >= 16:
        return BF16
    scale = _DTYPE_BYTES.get(str(w.get("scale_dtype") or "").removeprefix("torch."))
    if scale is None:  # fp8 (nvfp4) / e8m0 (mxfp4) scales for 4-bit floats, else the bf16 model
        scale = 1 if kind == "float" and bits == 4 else 2
    stored = bits if packed or bits >= 8 else 8
    zero = 0.0 if _bool(w, name, "symmetric", True, wat) or not group else stored / 8
    if kind == "float" and bits == 4 and group == NVFP4_GROUP and compute == "fp8":
        kdt = "nvfp4"  # W4A4 NVFP4 (fp4 activations): the tables' nvfp4 rows
    elif kind == "float":
        kdt = ("fp8_block" if strategy == "block" else "fp8") if bits == 8 else "int4_wo"
    else:
        kdt = "int4_wo" if bits <= 4 else ("int8" if compute == "int8" else "int8_wo")
    return WeightFormat(
        name=f"{'fp' if kind == 'float' else 'int'}{bits}",
        bits=stored,
        group_size=group,
        block=block,
        scale_bytes=scale,
        zero_bytes=zero,
        compute=compute,
        kernel_dtype=kdt,
    )


def _compressed_tensors(q: dict[str, Any], name: str) -> QuantRules:
    fmt_name = q.get("format") or "pack-quantized"
    known = _CT_PACKED + _CT_UNPACKED
    require(
        fmt_name in known,
        f"{_field(name, 'format')} ({show(fmt_name)}) is not supported: "
        f"known formats are {', '.join(known)} (sparse formats are not modelled)",
    )
    require(
        not q.get("sparsity_config"),
        f"{_field(name, 'sparsity_config')} (set) is not "
        "supported: sparse compressed-tensors checkpoints are not modelled",
    )
    cfg: Any = q.get("config_groups")
    ok = isinstance(cfg, dict) and 0 < len(cfg) <= MAX_PATTERNS
    require(ok, f"{_field(name, 'config_groups')} ({show(cfg)}) must be a non-empty object")
    groups = []
    for gname, g in cfg.items():
        at = f"config_groups.{str(gname)[:40]}."
        require(isinstance(g, dict), f"{_field(name, at[:-1])} ({show(g)}) must be an object")
        targets = _patterns(g.get("targets"), name, at + "targets")
        require(bool(targets), f"{_field(name, at + 'targets')} (empty) must name a module")
        packed = (g.get("format") or fmt_name) in _CT_PACKED
        groups.append((targets, _ct_weights(g, name, at, packed)))
    return QuantRules(
        method="compressed-tensors",
        groups=tuple(groups),
        ignore=_not_convert(q, name, "ignore"),
        matcher="ct",
    )


E4M3_SCALE = 1  # NVFP4's per-block scale is one fp8 (e4m3) byte
AWQ_GROUP = 128  # ModelOpt INT4 AWQ block size (``awq_block_size``) when a layer omits it


def _nvfp4(group: int, compute: str) -> WeightFormat:
    """NVIDIA NVFP4: e2m1 weights, one e4m3 scale per ``group`` (16) and one fp32 scale per
    tensor (``weight_scale_2``, not counted): ``0.5 + 1/16 = 0.5625`` bytes per weight.
    W4A4 (activations quantized the same way) runs the FP4 tensor cores; its price comes from
    the kernel tables' ``nvfp4`` rows (``compute`` ``fp8`` is only the roofline's rate, moeplan
    has no fp4 datasheet rate). Source: NVIDIA ModelOpt
    ``modelopt/torch/quantization/qtensor/nvfp4_tensor.py`` (``NVFP4QTensor``: block 16,
    ``float8_e4m3fn`` per-block scale, fp32 ``weights_scaling_factor_2``)."""
    return WeightFormat(
        name="nvfp4",
        bits=4,
        group_size=group,
        scale_bytes=E4M3_SCALE,
        compute=compute,
        # W4A16 NVFP4 runs weight-only (Marlin in vLLM ``ModelOptNvFp4FusedMoE`` with
        # ``use_a16``): priced from the W4A16 Marlin tables
        kernel_dtype="nvfp4" if compute == "fp8" else "int4_wo",
    )


def _int4_awq(group: int, compute: str) -> WeightFormat:
    """ModelOpt INT4 AWQ: packed int4, one scale in the model dtype (2 bytes) per group, no
    zero point (``has_zero_point: false``), a per-input-channel ``pre_quant_scale`` (not
    counted); W4A8 adds per-tensor fp8 activations."""
    return WeightFormat(
        name="int4", bits=4, group_size=group, scale_bytes=FP16_SCALE, compute=compute,
        kernel_dtype="int4_wo",
    )  # fmt: skip


#: ModelOpt ``quant_algo`` -> its weight format, given the layer's ``group_size`` (``None``:
#: the algorithm's default). The names are those ModelOpt writes
#: (``modelopt/torch/export/quant_utils.py`` ``process_layer_quant_config``: FP8,
#: FP8_PER_CHANNEL_PER_TOKEN, W4A16_AWQ, W4A8_AWQ, W8A8_SQ_PER_CHANNEL, NVFP4, NVFP4_AWQ,
#: W4A8_MXFP4_FP8) plus W4A16_NVFP4 and MXFP8, which vLLM 0.24.0 also loads
#: (``model_executor/layers/quantization/modelopt.py:105-118``). Per-channel / per-tensor
#: scales are not counted (module docstring of :mod:`.quant`). FP8_PB_WO (vLLM's list) is
#: refused: its scale layout is not read here.
_MODELOPT: dict[str, Any] = {
    "FP8": lambda g: WeightFormat(name="fp8", bits=8, compute="fp8", kernel_dtype="fp8"),
    "FP8_PER_CHANNEL_PER_TOKEN": lambda g: WeightFormat(
        name="fp8", bits=8, compute="fp8", kernel_dtype="fp8"
    ),
    "NVFP4": lambda g: _nvfp4(g or NVFP4_GROUP, "fp8"),
    "NVFP4_AWQ": lambda g: _nvfp4(g or NVFP4_GROUP, "fp8"),
    "W4A16_NVFP4": lambda g: _nvfp4(g or NVFP4_GROUP, "bf16"),
    "W4A16_AWQ": lambda g: _int4_awq(g or AWQ_GROUP, "bf16"),
    "W4A8_AWQ": lambda g: _int4_awq(g or AWQ_GROUP, "fp8"),
    "W8A8_SQ_PER_CHANNEL": lambda g: WeightFormat(
        name="int8", bits=8, compute="int8", kernel_dtype="int8"
    ),
    # OCP MX: e2m1 / e4m3 elements with one e8m0 scale per 32
    "W4A8_MXFP4_FP8": lambda g: WeightFormat(
        name="mxfp4",
        bits=4,
        group_size=g or MXFP4_GROUP,
        scale_bytes=E8M0_SCALE,
        compute="fp8",
        kernel_dtype="w4a8_mxfp4_mxfp8",
    ),  # fmt: skip
    "MXFP8": lambda g: WeightFormat(
        name="mxfp8",
        bits=8,
        group_size=g or MXFP4_GROUP,
        scale_bytes=E8M0_SCALE,
        compute="fp8",
        kernel_dtype="fp8_block",
    ),  # fmt: skip
}
MIXED = "MIXED_PRECISION"


def _modelopt_format(d: dict[str, Any], name: str, at: str, group: int | None) -> WeightFormat:
    """The format one ``quant_algo`` (+ ``group_size``) object states; an algorithm moeplan
    does not know is one error line (never read as bf16)."""
    algo = d.get("quant_algo")
    key = algo.upper() if isinstance(algo, str) else None
    require(
        key in _MODELOPT,
        f"{_field(name, at + 'quant_algo')} ({show(algo)}) is not supported: known ModelOpt "
        f"algorithms are {', '.join(_MODELOPT)}, {MIXED}; moeplan does not guess the weight "
        "size of a quantized checkpoint",
    )
    g = d.get("group_size")
    own = group if g is None else check_int(_field(name, at + "group_size"), g, 1, MAX_GROUP)
    fmt: WeightFormat = _MODELOPT[key](own)
    return fmt


def _modelopt(q: dict[str, Any], name: str) -> QuantRules:
    """ModelOpt ``quant_algo``: one algorithm for every linear module but ``exclude_modules``
    (``ignore``), or ``MIXED_PRECISION`` with ``quantized_layers``, one ``{quant_algo,
    group_size}`` per module prefix; a module the map does not name stays unquantized
    (ModelOpt lists every quantized layer there, ``process_layer_quant_config``). An explicit
    ``null`` is ModelOpt's own value for weights left unquantized (a KV-cache-only export);
    a missing key is refused."""
    key = "ignore" if "ignore" in q else "exclude_modules"
    ignore = _not_convert(q, name, key)
    algo = q.get("quant_algo")
    if "quant_algo" in q and algo is None:  # ModelOpt's export of a KV-cache-only checkpoint
        return QuantRules(method="modelopt", groups=(), ignore=ignore, matcher="glob")
    if not (isinstance(algo, str) and algo.upper() == MIXED):
        fmt = _modelopt_format(q, name, "", None)
        return QuantRules(method="modelopt", groups=(((), fmt),), ignore=ignore, matcher="glob")
    layers = q.get("quantized_layers")
    ok = isinstance(layers, dict) and 0 < len(layers) <= MAX_PATTERNS
    require(
        ok,
        f"{_field(name, 'quantized_layers')} ({show(layers)}) must be a non-empty object of "
        f"module prefix -> {{quant_algo, group_size}} ({MIXED})",
    )
    top = q.get("group_size")
    group = None if top is None else check_int(_field(name, "group_size"), top, 1, MAX_GROUP)
    out: list[tuple[str, WeightFormat]] = []
    for prefix, d in layers.items():
        at = f"quantized_layers[{str(prefix)[:80]!r}]."
        ok = isinstance(d, dict) and 0 < len(prefix) <= MAX_PATTERN_CHARS
        require(ok, f"{_field(name, at[:-1])} ({show(d)}) must be an object with quant_algo")
        out.append((prefix, _modelopt_format(d, name, at, group)))
    return QuantRules(
        method="modelopt", groups=(), layers=tuple(out), ignore=ignore, matcher="glob"
    )


READERS = {
    "modelopt": _modelopt,
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "awq": _awq,
    "gptq": _gptq,
    "bitsandbytes": _bnb,
    "compressed-tensors": _compressed_tensors,
}


def parse_quantization(q: Any, name: str) -> QuantRules | None:
    """The rules of ``config.quantization_config`` (``None``: an unquantized checkpoint)."""
    if q is None:
        return None
    if not isinstance(q, dict):
        raise MoeplanError(f"config[{name}].quantization_config ({show(q)}) must be an object")
    method = q.get("quant_method")
    if not isinstance(method, str) or method.lower() not in READERS:
        raise unsupported(name, method, READERS)
    return READERS[method.lower()](q, name)
