"""Weight quantization of a checkpoint: bytes per weight and GEMM compute dtype per module class.

A Hugging Face ``quantization_config`` (read by :mod:`.quant_parse`) becomes a
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

from collections.abc import Iterable
from dataclasses import dataclass, field

from moeplan.errors import MoeplanError, require, show
from moeplan.specs.patterns import PatternSet

#: compute dtypes a GEMM can run in (the tensor-core rate it is charged at)
COMPUTE = ("bf16", "fp8", "int8")
#: module classes, in display order
MODULE_CLASSES = ("attention", "experts", "shared", "dense", "router", "embedding", "lm_head")
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
    #: a 2-D scale block ``(block_n, block_k)``: output rows by input columns per scale
    #: (``weight_block_size``, compressed-tensors ``block_structure``); () otherwise
    block: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        p = f"weight format ({self.name})"
        require(1 <= self.bits <= 32, f"{p}.bits ({show(self.bits)}) must be in [1, 32]")
        require(self.group_size >= 0, f"{p}.group_size ({self.group_size}) must be >= 0")
        for f in ("scale_bytes", "zero_bytes"):
            v = getattr(self, f)
            require(0 <= v <= 8, f"{p}.{f} ({show(v)}) must be in [0, 8]")
        require(self.compute in COMPUTE, f"{p}.compute ({self.compute!r}) must be in {COMPUTE}")
        require(
            len(self.block) in (0, 2) and all(b >= 1 for b in self.block),
            f"{p}.block ({self.block}) must be () or (block_n, block_k)",
        )

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
            **({"block": list(self.block)} if self.block else {}),
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
        require(cls in MODULE_CLASSES, f"module class ({cls!r}) must be one of {MODULE_CLASSES}")
        q: ModuleQuant = getattr(self, cls)
        return q

    @property
    def quantized(self) -> bool:
        return any(self.module(c).format.quantized for c in MODULE_CLASSES)

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "modules": {c: self.module(c).to_dict() for c in MODULE_CLASSES},
            "ignore": list(self.ignore),
        }


UNQUANTIZED = WeightQuant()


# ---- matching module names (linear time, :mod:`moeplan.specs.patterns`) ----------------
def hf_excluded(name: str, patterns: Iterable[str]) -> bool:
    """Hugging Face ``modules_to_not_convert`` (see :class:`~.patterns.PatternSet` ``hf``)."""
    return PatternSet(tuple(patterns), "hf", "modules_to_not_convert").match(name)


def ct_match(name: str, targets: Iterable[str]) -> bool:
    """compressed-tensors targets / ignore: ``re:<regex>`` from the start of the name,
    ``Linear`` (every linear module), or the exact module name."""
    return PatternSet(tuple(targets), "ct", "targets").match(name)


@dataclass(frozen=True, kw_only=True, slots=True)
class QuantRules:
    """A parsed ``quantization_config``: which format covers which linear modules.

    ``groups``: ``(targets, format)`` in config order, the first whose targets match a module
    wins (an empty ``targets`` matches every linear module but the lm-head); ``ignore``: the
    excluded patterns, read with ``matcher`` (``hf`` or ``ct``); ``lm_head``: whether the
    lm-head is covered when no target names it (GPTQ's ``lm_head`` flag); ``layers``: a
    per-module map (ModelOpt ``MIXED_PRECISION`` ``quantized_layers``, module prefix ->
    format) used instead of ``groups`` when set (:meth:`layer_format`).
    """

    method: str
    groups: tuple[tuple[tuple[str, ...], WeightFormat], ...]
    ignore: tuple[str, ...] = ()
    matcher: str = "hf"
    lm_head: bool = False
    layers: tuple[tuple[str, WeightFormat], ...] = ()

    kv_bytes: int = 0  # bytes per cached KV value the checkpoint states (0: not stated)
    _ignore: PatternSet | None = field(default=None, repr=False, compare=False)
    _targets: tuple[PatternSet, ...] = field(default=(), repr=False, compare=False)
    _layers: dict[str, WeightFormat] = field(default_factory=dict, repr=False, compare=False)
    _under: dict[str, frozenset[WeightFormat]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        require(self.matcher in MATCHERS, f"matcher ({self.matcher!r}) must be in {MATCHERS}")
        if self._ignore is not None:  # compiled by the rules this copy was made from
            return
        object.__setattr__(self, "_ignore", PatternSet(self.ignore, self.matcher, "ignore"))
        under: dict[str, set[WeightFormat]] = {}
        for prefix, fmt in self.layers:
            self._layers[prefix] = fmt
            parts = prefix.split(".")
            for i in range(1, len(parts)):
                under.setdefault(".".join(parts[:i]), set()).add(fmt)
        self._under.update({k: frozenset(v) for k, v in under.items()})
        if self.matcher == "ct":
            sets = tuple(PatternSet(t, "ct", "targets") for t, _ in self.groups)
            object.__setattr__(self, "_targets", sets)

    def format_of(self, cls: str, name: str) -> WeightFormat:
        """The format of the linear module ``name`` of class ``cls`` (patterns compiled once,
        matched in linear time)."""
        assert self._ignore is not None
        if self.matcher == "ct":
            if self._ignore.match(name):
                return BF16
            for targets, (_, fmt) in zip(self._targets, self.groups, strict=True):
                if targets.match(name):
                    return fmt
            return BF16
        if self.layers:
            return BF16 if self._ignore.match(name) else self.layer_format(name, cls)
        if self._ignore.match(name) or (cls == "lm_head" and not self.lm_head):
            return BF16
        for targets, fmt in self.groups:
            if not targets or any(name.endswith(t) for t in targets):
                return fmt
        return BF16

    def layer_format(self, name: str, cls: str = "") -> WeightFormat:
        """The ``layers`` map's format of module ``name``: its own entry, else its nearest
        parent's (a fused expert tensor listed as ``...experts``), else the one format of the
        entries under it (a checkpoint that lists ``...experts.0.gate_proj`` where moeplan
        names a fused module) or, for routed experts (``cls``), under their ``experts``
        module (a fused ``experts.gate_up_proj`` whose checkpoint lists the unfused
        ``experts.0.gate_proj``: vLLM's FusedMoE prefix rule); a module the map does not
        reach is unquantized (bf16).
        Entries under one module that disagree are one error line: its bytes would be a
        guess. The lookup follows the engines' ``ModelOptMixedPrecisionConfig._resolve_quant_algo``
        (direct, then by prefix: vLLM 0.24.0 model_executor/layers/quantization/modelopt.py:2392,
        SGLang 0.5.23 python/sglang/srt/layers/quantization/modelopt_quant.py:978)."""
        fmt = self._layers.get(name)
        if fmt is not None:
            return fmt
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            fmt = self._layers.get(".".join(parts[:i]))
            if fmt is not None:
                return fmt
        below = self._under.get(name)
        if not below and cls == "experts" and ".experts" in name:
            below = self._under.get(name[: name.index(".experts") + len(".experts")])
        if not below:
            return BF16
        if len(below) > 1:
            raise MoeplanError(
                f"quantization_config.quantized_layers gives the modules under {name} "
                f"{len(below)} formats ({', '.join(sorted(f.name for f in below))}): one module "
                "must have one format"
            )
        return next(iter(below))

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


def unsupported(name: str, method: object, known: Iterable[str]) -> MoeplanError:
    """The one error line of an unknown ``quant_method`` (never read as bf16)."""
    return MoeplanError(
        f"config[{name}].quantization_config.quant_method ({show(method)}) is not supported: "
        f"known methods are {', '.join(sorted(known))}; moeplan does not guess the weight "
        "size of a quantized checkpoint"
    )
