"""Read an engine's own launch command (``vllm serve …``, ``python -m sglang.launch_server …``,
``trtllm-serve …``) into the instance moeplan simulates.

Users paste the command their benchmark ran against; ``serve-sim --launch`` reads it exactly
or refuses it. Every flag of the command is one of:

- a **setting** moeplan models: the parallel degrees, the memory fraction, the step token
  budget, the running-request cap, the KV dtype, speculative decoding (MTP), two-batch
  overlap, the all-to-all backend, the context limit;
- **no effect** on a performance figure (host, port, parsers, names): read and dropped, with
  the reason;
- **not priced**: it changes the engine's speed in a way moeplan does not model (an attention
  backend other than the tables', CUDA-graph limits, asynchronous scheduling); the figure is
  produced and each such flag is listed with why, in the text output and in ``--json``
  (``launch.not_priced``) — never dropped silently.

A flag the engine's table does not know is refused with one line naming it, so a command
moeplan cannot read exactly is never guessed. Each engine's flags, their meaning and the
parallel arithmetic live in its module (:mod:`moeplan.backends.sglang_args`,
:mod:`moeplan.backends.vllm_args`, :mod:`moeplan.backends.trtllm_args`), each fact with its
engine source; :func:`moeplan.backends.launch_grammars.grammars` lists them.

Pure: parses a string, no I/O.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.errors import MoeplanError, show

#: what :class:`LaunchSettings` keeps of a command, by setting name
SETTING_NAMES = (
    "model",
    "tp",
    "dp",
    "ep",
    "pp",
    "dp_attention",
    "expert_parallel",
    "mem_fraction",
    "step_tokens",
    "max_running",
    "kv_dtype",
    "mtp",
    "tbo",
    "overlap_on",
    "overlap_off",
    "a2a",
    "max_model_len",
    "quantization",
    "attention_backend",
    "moe_runner",
)


@dataclass(frozen=True)
class Flag:
    """One flag of an engine's launch command.

    ``setting`` names the :class:`LaunchSettings` field it sets (``None`` for a flag with
    no effect or one moeplan does not price); ``value`` parses its text (``None``: a switch
    that takes no value and sets ``True``); ``effect`` is ``setting``, ``none`` (no
    performance effect) or ``unpriced``; ``why`` the reason and source."""

    names: tuple[str, ...]
    setting: str | None
    value: Callable[[str, str], Any] | None
    effect: str
    why: str


def setting(names: tuple[str, ...], name: str, value: Callable[[str, str], Any] | None,
            why: str) -> Flag:  # fmt: skip
    """A flag that sets one modelled setting."""
    if name not in SETTING_NAMES:
        raise ValueError(f"unknown setting {name!r}")
    return Flag(names, name, value, "setting", why)


def no_effect(names: tuple[str, ...], why: str, takes_value: bool = True,
              value: Callable[[str, str], Any] | None = None) -> Flag:  # fmt: skip
    """A flag with no effect on any performance figure (read, checked by ``value`` when
    given, and dropped)."""
    return Flag(names, None, value or (_text if takes_value else None), "none", why)


def unpriced(names: tuple[str, ...], why: str, takes_value: bool = True) -> Flag:
    """A flag that changes the engine's speed in a way moeplan does not model."""
    return Flag(names, None, _text if takes_value else None, "unpriced", why)


def group(names: tuple[str, ...], value: Callable[[str, str], Any] | None, why: str) -> Flag:
    """A flag read together with others of its group (:attr:`EngineArgs.mtp_steps`)."""
    return Flag(names, None, value, "group", why)


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, smallest first (a launch space's degrees)."""
    return [k for k in range(1, n + 1) if n % k == 0]


def _text(flag: str, text: str) -> str:
    del flag
    return text


def positive_int(flag: str, text: str) -> int:
    """A launch flag's positive integer (the engines' argparse ``type=int``)."""
    try:
        v = int(text, 10)
    except ValueError:
        raise MoeplanError(f"launch command {flag} ({show(text)}) must be an integer") from None
    if v < 1:
        raise MoeplanError(f"launch command {flag} ({v}) must be >= 1")
    return v


def fraction(flag: str, text: str) -> float:
    """A launch flag's fraction of GPU memory, in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        raise MoeplanError(f"launch command {flag} ({show(text)}) must be a number") from None
    if not 0.0 < v <= 1.0:
        raise MoeplanError(f"launch command {flag} ({v}) must be in (0, 1]")
    return v


def choice(options: Mapping[str, Any]) -> Callable[[str, str], Any]:
    """A parser taking one of ``options`` (engine spelling -> moeplan value)."""

    def parse(flag: str, text: str) -> Any:
        if text not in options:
            raise MoeplanError(
                f"launch command {flag} ({show(text)}) must be one of {', '.join(options)}"
            )
        return options[text]

    return parse


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """What one engine launch command says about the instance it starts (None: not given,
    the engine's default applies)."""

    engine: str
    model: str | None = None
    tp: int | None = None
    dp: int | None = None
    ep: int | None = None
    pp: int | None = None
    dp_attention: bool = False
    expert_parallel: bool = False
    mem_fraction: float | None = None
    #: the engine's step token budget as the flag gives it (per DP rank where the engine's
    #: flag is per rank; :meth:`EngineArgs.instance_step_tokens` converts)
    step_tokens: int | None = None
    max_running: int | None = None
    kv_dtype: str | None = None
    mtp: int = 0
    tbo: bool | None = None
    #: the flag turning the scheduler's host overlap on / off (:mod:`moeplan.cost.host`)
    overlap_on: bool = False
    overlap_off: bool = False
    a2a: str | None = None
    max_model_len: int | None = None
    quantization: str | None = None
    attention_backend: str | None = None
    moe_runner: str | None = None
    #: ``(flag, why)`` of flags read and dropped: no effect on any figure
    no_effect: tuple[tuple[str, str], ...] = ()
    #: ``(flag, why)`` of flags that change speed in a way moeplan does not model
    not_priced: tuple[tuple[str, str], ...] = ()
    #: the engine's own name of the command (for messages)
    program: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Degrees:
    """The layout a launch command starts, in moeplan's degrees (one instance)."""

    attn_tp: int
    attn_dp: int
    moe_tp: int
    moe_ep: int
    pp: int
    replicas: int = 1

    def as_flags(self) -> dict[str, int]:
        """``serve-sim``'s layout flags."""
        return {
            "attn_tp": self.attn_tp,
            "attn_dp": self.attn_dp,
            "moe_tp": self.moe_tp,
            "moe_ep": self.moe_ep,
            "pp": self.pp,
        }


@dataclass(frozen=True, kw_only=True)
class EngineArgs:
    """One engine's launch-command grammar: the programs that start it, its flags, the
    parallel arithmetic and the per-rank conversions."""

    engine: str
    #: the words that start the command, e.g. ``("vllm", "serve")``
    programs: tuple[tuple[str, ...], ...]
    flags: tuple[Flag, ...]
    #: the command's positional model argument (``vllm serve MODEL``)
    positional_model: bool
    degrees: Callable[[LaunchSettings], Degrees]
    #: instance step tokens from the flag's value and the attention-DP size
    instance_step_tokens: Callable[[int, int], int]
    #: instance running cap from the flag's value and the attention-DP size
    instance_max_running: Callable[[int, int], int]
    #: the engine's speculative-decoding flags (``group`` flags), read together
    mtp_flags: frozenset[str] = frozenset()
    #: the draft tokens per step those flags give (refusing what moeplan cannot model)
    mtp_steps: Callable[[Mapping[str, Any]], int] = lambda flags: 0
    #: every launch command of one server of a model on a GPU count, one per parallel
    #: layout the flags state (``moeplan bench --search``, ``validate --plan``)
    space: Callable[[str, int], list[str]] = lambda model, gpus: []

    def by_name(self) -> dict[str, Flag]:
        out: dict[str, Flag] = {}
        for f in self.flags:
            for n in f.names:
                if n in out:
                    raise ValueError(f"{self.engine}: flag {n} listed twice")
                out[n] = f
        return out


def _program(words: list[str], grammars: Mapping[str, EngineArgs]) -> tuple[EngineArgs, int]:
    """The engine whose program starts ``words`` and the index after it."""
    i = 0
    while i < len(words) and "=" in words[i] and not words[i].startswith("-"):
        i += 1  # leading environment assignments (VAR=value cmd ...)
    for g in grammars.values():
        for prog in g.programs:
            n = len(prog)
            head = words[i : i + n]
            if [w.rsplit("/", 1)[-1] for w in head[:1]] + head[1:] == list(prog):
                return g, i + n
    known = "; ".join(" ".join(p) for g in grammars.values() for p in g.programs)
    raise MoeplanError(
        f"launch command ({show(' '.join(words[:4]))}) must start with an engine's server "
        f"program: {known}"
    )


def read_launch(command: str, grammars: Mapping[str, EngineArgs]) -> LaunchSettings:
    """The settings of ``command`` (a shell line) read with the engines' ``grammars``
    (module docstring); anything it cannot read exactly is one line."""
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise MoeplanError(f"launch command is not a shell line: {err}") from None
    if not words:
        raise MoeplanError("launch command is empty")
    g, i = _program(words, grammars)
    table = g.by_name()
    got: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    dropped: list[tuple[str, str]] = []
    unmodelled: list[tuple[str, str]] = []
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("-"):
            if g.positional_model and "model" not in got:
                got["model"] = w
                continue
            raise MoeplanError(f"launch command: unexpected argument {show(w)} for {g.engine}")
        name, eq, inline = w.partition("=")
        f = table.get(name)
        if f is None:
            raise MoeplanError(
                f"launch command flag {name} is not one moeplan reads for {g.engine} "
                "(it cannot be priced or shown to have no effect; remove it or ask for it)"
            )
        if f.value is None:
            if eq:
                raise MoeplanError(f"launch command flag {name} takes no value ({show(inline)})")
            value: Any = True
        else:
            if eq:
                text = inline
            elif i < len(words):
                text = words[i]
                i += 1
            else:
                raise MoeplanError(f"launch command flag {name} needs a value")
            value = f.value(name, text)
        key = f.setting or name
        if key in got or key in extra:
            raise MoeplanError(f"launch command sets {name} twice")
        if f.effect == "setting":
            assert f.setting is not None
            got[f.setting] = value
        elif f.effect == "group":
            extra[key] = value
        elif f.effect == "unpriced":
            extra[key] = value
            unmodelled.append((f"{name} {value}" if f.value else name, f.why))
        else:
            extra[key] = value
            dropped.append((name, f.why))
    spec_keys = {k: v for k, v in extra.items() if k in g.mtp_flags}
    settings = LaunchSettings(
        engine=g.engine,
        program=" ".join(g.programs[0]),
        no_effect=tuple(dropped),
        not_priced=tuple(unmodelled),
        extra=extra,
        **got,
    )
    if spec_keys:
        settings = replace(settings, mtp=g.mtp_steps(spec_keys))
    g.degrees(settings)  # the parallel arithmetic checks the degrees
    return settings


def serve_flags(s: LaunchSettings, grammars: Mapping[str, EngineArgs]) -> dict[str, Any]:
    """``serve-sim``'s flags (names as :class:`~moeplan.commands.serve_inputs.ServeSimFlags`)
    that ``s`` sets; a setting the command leaves unset is absent."""
    g = grammars[s.engine]
    d = g.degrees(s)
    out: dict[str, Any] = {"engine": s.engine, **d.as_flags()}
    if d.replicas > 1:
        out["replicas"] = d.replicas
    if s.model is not None:
        out["model"] = s.model
    if s.step_tokens is not None:
        out["chunk_tokens"] = g.instance_step_tokens(s.step_tokens, d.attn_dp)
    if s.max_running is not None:
        out["max_running"] = g.instance_max_running(s.max_running, d.attn_dp)
    if s.kv_dtype is not None:
        out["kv_dtype"] = s.kv_dtype
    if s.mtp:
        out["mtp"] = s.mtp
    if s.tbo is not None:
        out["tbo"] = s.tbo
    if s.overlap_on and s.overlap_off:
        raise MoeplanError("launch command turns the host overlap both on and off")
    if s.overlap_on or s.overlap_off:
        out["overlap_schedule"] = s.overlap_on
    if s.a2a is not None:
        out["a2a"] = s.a2a
    if s.mem_fraction is not None:
        out["mem_fraction"] = s.mem_fraction
    return out


def gpus_of(s: LaunchSettings, grammars: Mapping[str, EngineArgs]) -> int:
    """GPUs the command starts (all replicas)."""
    d = grammars[s.engine].degrees(s)
    return d.attn_tp * d.attn_dp * d.pp * d.replicas
