"""One rule for every numeric flag of every command, applied where flags are parsed.

Typer turns ``--gpus 1111…1`` into a 40-digit integer and ``--ttft-slo inf`` (or ``1e999``,
``nan``) into a non-finite float; reaching arithmetic they end as ``OverflowError`` or
"cannot convert float NaN to integer" instead of a user error. :func:`guard_numbers` walks a
command tree once and gives every integer or float parameter a check that runs right after
Typer's own conversion: a number must be finite and at most :data:`MAX_MAGNITUDE` in size,
and a ``--seed`` must not be negative (NumPy's generators refuse it). A violation is Click's
:class:`~moeplan.errors.MoeplanError` — one line naming the flag, the value and the rule
(``--ttft-slo (inf) must be a finite number``), exit 2. A command's own
narrower checks still apply after this one.

Integer flags also share one grammar, checked on the text before Typer converts it
(:data:`INTEGER`): ASCII digits with an optional leading minus and no leading zero — so
``5.0``, ``1_000``, `` 5``, ``+8``, ``-0`` and ``08`` are each one line naming the flag, where
Python's ``int()`` or a lax converter would take some of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, get_args

from moeplan.errors import MoeplanError, show

#: Largest magnitude any numeric flag takes: 10^15 is beyond every count, size and time a
#: command accepts (the largest, a message size in bytes, stays below 10^13 = 10 TB), and
#: small enough that products and float conversions of such values cannot overflow.
MAX_MAGNITUDE = 10**15
#: The one spelling of an integer on the command line (module docstring).
INTEGER = re.compile(r"-?[1-9][0-9]*|0")


def parse_int(flag: str, text: str, alternative: str = "") -> int:
    """``text`` as an integer of flag ``flag`` (:data:`INTEGER`), else one
    :class:`MoeplanError` line naming the flag; ``alternative`` names another accepted word
    in that line (``"or 'auto'"``)."""
    if not INTEGER.fullmatch(text):
        more = f" {alternative}" if alternative else ""
        raise MoeplanError(f"{flag} ({show(text)}) must be a whole number in digits (e.g. 8){more}")
    return int(text)


def _numeric_kind(annotation: Any) -> type | None:
    """``int`` or ``float`` for an annotation of that type (also optional or a list)."""
    if annotation in (int, float):
        return annotation  # type: ignore[no-any-return]
    for arg in get_args(annotation):
        kind = _numeric_kind(arg)
        if kind is not None:
            return kind
    return None


def _problem(value: Any, seed: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if abs(value) > MAX_MAGNITUDE:
        return "must be at most 10^15 in magnitude (no flag of moeplan needs more)"
    if seed and value < 0:
        return "must be >= 0"
    return None


def _checked(param: Any, inner: Callable[..., Any] | None) -> Callable[..., Any]:
    flag = max(param.opts, key=len) if param.opts else param.name
    seed = param.name == "seed"

    def callback(ctx: Any, p: Any, value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            rule = _problem(v, seed)
            if rule is not None:
                raise MoeplanError(f"{flag} ({show(v)}) {rule}")
        return inner(ctx, p, value) if inner is not None else value

    return callback


def _int_text(param: Any, process: Callable[..., Any]) -> Callable[..., Any]:
    """``param``'s ``process_value`` that first holds each command-line text to
    :data:`INTEGER` (a default that is already an integer passes as it is)."""
    flag = max(param.opts, key=len) if param.opts else param.name

    def process_value(ctx: Any, value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, str):
                parse_int(flag, v)
        return process(ctx, value)

    return process_value


def guard_numbers(command: Any) -> Any:
    """Give every numeric parameter under ``command`` the checks (module docstring)."""
    for sub in getattr(command, "commands", {}).values():
        guard_numbers(sub)
    for param in getattr(command, "params", []):
        desc = getattr(param, "type_descriptor", None)
        kind = None if desc is None else _numeric_kind(desc.annotation)
        if kind is not None:
            param.callback = _checked(param, param.callback)
        if kind is int:
            param.process_value = _int_text(param, param.process_value)
    return command
