"""Weight quantization of a checkpoint: bytes per weight and GEMM compute dtype per module class.

Issue 13 item 4. A Hugging Face ``quantization_config`` (read by :mod:`.quant_parse`) becomes a
:class:`QuantRules` — which linear modules each storage format covers and which are left
out — and :meth:`QuantRules.resolve` applies it to the model's linear modules, named as the
Hugging Face checkpoint names them (:func:`linear_modules`), giving a :class:`WeightQuant`:
for each module class (attention, routed experts, shared experts, dense MLP, router,
embedding, lm-head) the bytes per weight, *including* the per-group scales and zero points,
and the format most of its weights use.

Closed form (:attr:`WeightFormat.bytes_per_weight`): ``bits / 8 + (scale_bytes + zero_bytes) /
group_size``; e.g. AWQ / GPTQ int4, group 128, fp16 scale and 4-bit packed zero point:
``0.5 + 2.5 / 128``; DeepSeek-V3's fp8 with one fp32 scale per 128x128 block:
``1 + 4 / 16384``.

Decisions and departures:

- Per-channel and per-tensor scales (GPTQ / AWQ ``group_size = -1``, compressed-tensors
  ``channel`` / ``tensor``) are not counted: one scale per row of >= 1024 inputs is < 0.2 %
  of the weight bytes. GPTQ's ``g_idx`` (one int32 per input row) is not counted either.
- The router gate and the input embedding are always stored unquantized (bf16): vLLM and
  SGLang build them without a quantization method whatever the config says. Norms and biases
  are charged at their module's rate (< 0.1 % of a layer).
- A class whose projections differ (e.g. an ``ignore`` entry that catches only one of
  gate/up/down) gets the parameter-weighted mean of their bytes per weight over every layer
  it appears in; its ``format`` is the one holding most of its weights. Routed experts are
  matched by the name of expert 0 (every expert of a layer alike).
- GEMM compute dtype: ``bf16`` for weight-only methods (the weights are dequantized into the
  activation dtype), ``fp8`` / ``int8`` where activations are quantized too (fp8 checkpoints,
  compressed-tensors w8a8); 4-bit float activations (nvfp4 w4a4) are charged at the fp8 rate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol

from moeplan.errors import MoeplanError, require, show

#: compute dtypes a GEMM can run in (the tensor-core rate it is charged at)
COMPUTE = ("bf16", "fp8", "int8")
#: module classes, in display order
CLASSES = ("attention", "experts", "shared", "dense", "router", "embedding", "lm_head")
#: classes whose linear weights a quantization method may cover (router / embedding never)
QUANTIZABLE = ("attention", "experts", "shared", "dense", "lm_head")
#: how a pattern list is matched: Hugging Face ``modules_to_not_convert``, compressed-tensors
#: ``re:`` / ``Linear`` targets, or ModelOpt's shell-style ``ignore`` globs
MATCHERS = ("hf", "ct", "glob")


@dataclass(frozen=True, kw_only=True, slots=True)
class WeightFormat:
    """One storage format: ``bits`` per weight plus a scale (and zero point) per group."""

    name: str
    bits: int
    group_size: int = 0  # weights sharing one scale; 0 = per channel / tensor (not counted)
    scale_bytes: float = 0.0
    zero_bytes: float = 0.0
    compute: str = "bf16"
    kernel_dtype: str = "bfloat16"  # the measured kernel tables' ``moe_dtype`` / ``gemm_type``

    def __post_init__(self) -> None:
        p = f"weight format ({self.name})"
        require(1 <= self.bits <= 32, f"{p}.bits ({show(self.bits)}) must be in [1, 32]")
        require(self.group_size >= 0, f"{p}.group_size ({self.group_size}) must be >= 0")
        for f in ("scale_bytes", "zero_bytes"):
            v = getattr(self, f)
            require(0 <= v <= 8, f"{p}.{f} ({show(v)}) must be in [0, 8]")
        require(self.compute in COMPUTE, f"{p}.compute ({self.compute!r}) must be in {COMPUTE}")

    @property
    def bytes_per_weight(self) -> float:
        """``bits / 8 + (scale + zero) / group_size`` (closed form; see module docstring)."""
        extra = (self.scale_bytes + self.zero_bytes) / self.group_size if self.group_size else 0
        return self.bits / 8 + extra

    @property
    def quantized(self) -> bool:
        return self.bits < 16

    def to_dict(self) -> dict[str, object]:
        return {
            "format": self.name,
            "bits": self.bits,
            "group_size": self.group_size,
            "scale_bytes": self.scale_bytes,
            "zero_bytes": self.zero_bytes,
            "compute": self.compute,
            "kernel_dtype": self.kernel_dtype,
        }


BF16 = WeightFormat(name="bf16", bits=16)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleQuant:
    """One module class: bytes per weight (scales included) and its dominant format."""

    bytes_per_weight: float
    format: WeightFormat

    def __post_init__(self) -> None:
        v = self.bytes_per_weight
        require(0 < v <= 8, f"bytes_per_weight ({show(v)}) must be in (0, 8]")

    def to_dict(self) -> dict[str, object]:
        return {"bytes_per_weight": self.bytes_per_weight, **self.format.to_dict()}


def _plain(fmt: WeightFormat = BF16) -> ModuleQuant:
    return ModuleQuant(bytes_per_weight=fmt.bytes_per_weight, format=fmt)


@dataclass(frozen=True, kw_only=True, slots=True)
class WeightQuant:
    """Bytes per weight and compute dtype of every module class (see module docstring)."""

    method: str = "none"
    attention: ModuleQuant = field(default_factory=_plain)
    experts: ModuleQuant = field(default_factory=_plain)
    shared: ModuleQuant = field(default_factory=_plain)
    dense: ModuleQuant = field(default_factory=_plain)
    router: ModuleQuant = field(default_factory=_plain)
    embedding: ModuleQuant = field(default_factory=_plain)
    lm_head: ModuleQuant = field(default_factory=_plain)
    ignore: tuple[str, ...] = ()

    def module(self, cls: str) -> ModuleQuant:
        require(cls in CLASSES, f"module class ({cls!r}) must be one of {CLASSES}")
        q: ModuleQuant = getattr(self, cls)
        return q

    @property
    def quantized(self) -> bool:
        return any(self.module(c).format.quantized for c in CLASSES)

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "modules": {c: self.module(c).to_dict() for c in CLASSES},
            "ignore": list(self.ignore),
        }


UNQUANTIZED = WeightQuant()


# ---- matching module names ------------------------------------------------------------------
def _regex_match(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except (re.error, RecursionError, OverflowError):
        return False


def hf_excluded(name: str, patterns: Iterable[str]) -> bool:
    """Hugging Face ``modules_to_not_convert``: a pattern excludes a module when it equals the
    name, names one of its parent modules (``key.`` inside ``name.``), ends it, or matches it
    as a regular expression from its start up to a module boundary (transformers
    ``should_convert_module``; the boundary keeps ``model.layers.1`` off layer 10)."""
    return any(
        p == name
        or f"{p}." in f"{name}."
        or name.endswith(p)
        or _regex_match(f"(?:{p})(?:\\.|$)", name)
        for p in patterns
    )


def glob_excluded(name: str, patterns: Iterable[str]) -> bool:
    """ModelOpt ``ignore`` / ``exclude_modules``: a shell glob (``model.layers.*.self_attn*``)
    matching the module or one of its parents (``fnmatch``)."""
    return any(fnmatchcase(name, p) or fnmatchcase(name, f"{p}.*") for p in patterns)


def ct_match(name: str, targets: Iterable[str]) -> bool:
    """compressed-tensors targets / ignore: ``re:<regex>`` matched from the start of the name
    (``re.match``), ``Linear`` (every linear module), or the exact module name."""
    for t in targets:
        if t.startswith("re:"):
            if _regex_match(t[3:], name):
                return True
        elif t == "Linear" or t == name:
            return True
    return False


@dataclass(frozen=True, kw_only=True, slots=True)
class QuantRules:
    """A parsed ``quantization_config``: which format covers which linear modules.

    ``groups``: ``(targets, format)`` in config order, the first whose targets match a module
    wins (an empty ``targets`` matches every linear module but the lm-head); ``ignore``: the
    excluded patterns, read with ``matcher`` (``hf`` or ``ct``); ``lm_head``: whether the
    lm-head is covered when no target names it (GPTQ's ``lm_head`` flag).
    """

    method: str
    groups: tuple[tuple[tuple[str, ...], WeightFormat], ...]
    ignore: tuple[str, ...] = ()
    matcher: str = "hf"
    lm_head: bool = False

    def __post_init__(self) -> None:
        require(self.matcher in MATCHERS, f"matcher ({self.matcher!r}) must be in {MATCHERS}")

    def format_of(self, cls: str, name: str) -> WeightFormat:
        """The format of the linear module ``name`` of class ``cls``."""
        if self.matcher == "ct":
            if ct_match(name, self.ignore):
                return BF16
            for targets, fmt in self.groups:
                if ct_match(name, targets):
                    return fmt
            return BF16
        excluded = glob_excluded if self.matcher == "glob" else hf_excluded
        if excluded(name, self.ignore) or (cls == "lm_head" and not self.lm_head):
            return BF16
        for targets, fmt in self.groups:
            if not targets or any(name.endswith(t) for t in targets):
                return fmt
        return BF16

    def resolve(self, modules: Iterable[tuple[str, str, int]]) -> WeightQuant:
        """Apply to ``(class, name, params)`` linear modules (:func:`linear_modules`)."""
        mass: dict[str, float] = {}
        total: dict[str, float] = {}
        by_fmt: dict[str, dict[WeightFormat, float]] = {}
        for cls, name, params in modules:
            fmt = self.format_of(cls, name)
            mass[cls] = mass.get(cls, 0.0) + params * fmt.bytes_per_weight
            total[cls] = total.get(cls, 0.0) + params
            d = by_fmt.setdefault(cls, {})
            d[fmt] = d.get(fmt, 0.0) + params
        out: dict[str, ModuleQuant] = {}
        for cls in QUANTIZABLE:
            if total.get(cls, 0.0) > 0:
                dominant = max(by_fmt[cls].items(), key=lambda kv: kv[1])[0]
                out[cls] = ModuleQuant(bytes_per_weight=mass[cls] / total[cls], format=dominant)
        return WeightQuant(method=self.method, ignore=self.ignore, **out)


# ---- the model's linear modules, named as in its Hugging Face checkpoint -------------------
class Shape(Protocol):
    """What :func:`linear_modules` reads from a :class:`~moeplan.specs.ModelSpec`."""

    @property
    def architecture(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def attention(self) -> str: ...
    @property
    def q_lora_rank(self) -> int: ...
    @property
    def kv_lora_rank(self) -> int: ...
    @property
    def qk_nope_head_dim(self) -> int: ...
    @property
    def qk_rope_head_dim(self) -> int: ...
    @property
    def v_head_dim(self) -> int: ...
    @property
    def moe_intermediate_size(self) -> int: ...
    @property
    def shared_intermediate_size(self) -> int: ...
    @property
    def dense_intermediate_size(self) -> int: ...
    @property
    def lm_head_params(self) -> int: ...
    @property
    def q_dim(self) -> int: ...
    def is_moe_layer(self, layer: int) -> bool: ...


def _attention(m: Shape) -> list[tuple[str, int]]:
    h, nh = m.hidden_size, m.num_attention_heads
    if m.attention == "mla":
        out = [
            ("kv_a_proj_with_mqa", h * (m.kv_lora_rank + m.qk_rope_head_dim)),
            ("kv_b_proj", m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)),
            ("o_proj", nh * m.v_head_dim * h),
        ]
        if m.q_lora_rank:
            return [
                ("q_a_proj", h * m.q_lora_rank),
                ("q_b_proj", m.q_lora_rank * nh * m.q_dim),
            ] + out
        return [("q_proj", h * nh * m.q_dim), *out]
    kv = h * m.num_kv_heads * m.head_dim
    return [
        ("q_proj", h * nh * m.head_dim),
        ("k_proj", kv),
        ("v_proj", kv),
        ("o_proj", nh * m.head_dim * h),
    ]


def _swiglu(prefix: str, h: int, inter: int, names: tuple[str, str, str]) -> list[tuple[str, int]]:
    return [(f"{prefix}.{n}", h * inter) for n in names]


def linear_modules(m: Shape) -> Iterator[tuple[str, str, int]]:
    """``(class, name, params)`` of every linear module the quantization config can cover:
    attention projections, expert 0 of each MoE layer (all experts alike), shared experts,
    dense MLPs and the lm-head, under the checkpoint's Hugging Face names (Mixtral
    ``block_sparse_moe.experts.N.w1``, GPT-OSS fused ``mlp.experts.gate_up_proj``,
    Qwen2-MoE ``mlp.shared_expert``, DeepSeek ``mlp.shared_experts``)."""
    arch = m.architecture.lower().replace("_", "")
    h, i = m.hidden_size, m.moe_intermediate_size
    gated = ("gate_proj", "up_proj", "down_proj")
    if "mixtral" in arch:
        experts = _swiglu("block_sparse_moe.experts.0", h, i, ("w1", "w3", "w2"))
    elif "gptoss" in arch:
        experts = [("mlp.experts.gate_up_proj", 2 * h * i), ("mlp.experts.down_proj", h * i)]
    else:
        experts = _swiglu("mlp.experts.0", h, i, gated)
    shared_name = "mlp.shared_expert" if "qwen2moe" in arch else "mlp.shared_experts"
    shared = _swiglu(shared_name, h, m.shared_intermediate_size, gated)
    dense = _swiglu("mlp", h, m.dense_intermediate_size, gated)
    attention = _attention(m)
    for layer in range(m.num_layers):
        pre = f"model.layers.{layer}"
        for suffix, n in attention:
            yield "attention", f"{pre}.self_attn.{suffix}", n
        if m.is_moe_layer(layer):
            for suffix, n in experts:
                yield "experts", f"{pre}.{suffix}", n
            if m.shared_intermediate_size:
                for suffix, n in shared:
                    yield "shared", f"{pre}.{suffix}", n
        else:
            for suffix, n in dense:
                yield "dense", f"{pre}.{suffix}", n
    if m.lm_head_params:
        yield "lm_head", "lm_head", m.lm_head_params


def unsupported(name: str, method: object, known: Iterable[str]) -> MoeplanError:
    """The one error line of an unknown ``quant_method`` (never read as bf16)."""
    return MoeplanError(
        f"config[{name}].quantization_config.quant_method ({show(method)}) is not supported: "
        f"known methods are {', '.join(sorted(known))}; moeplan does not guess the weight "
        "size of a quantized checkpoint"
    )
