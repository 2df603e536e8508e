"""Every numeric flag of every command held to :mod:`moeplan.commands.flag_rules`, applied
where flags are parsed: :func:`guard_numbers` walks a command tree once and gives every integer
or float parameter a check right after Typer's own conversion (Typer turns ``--gpus 1111…1``
into a 40-digit integer and ``--ttft-slo inf`` into a non-finite float, which would end as
``OverflowError`` instead of a user error), and holds each integer's text to the one grammar
before Typer converts it. A command's own narrower checks still apply after these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from moeplan.commands.flag_rules import number_problem, parse_int
from moeplan.errors import MoeplanError, show


def _numeric_kind(annotation: Any) -> type | None:
    """``int`` or ``float`` for an annotation of that type (also optional or a list)."""
    if annotation in (int, float):
        return annotation  # type: ignore[no-any-return]
    for arg in get_args(annotation):
        kind = _numeric_kind(arg)
        if kind is not None:
            return kind
    return None


def _checked(param: Any, inner: Callable[..., Any] | None) -> Callable[..., Any]:
    flag = max(param.opts, key=len) if param.opts else param.name
    seed = param.name == "seed"

    def callback(ctx: Any, p: Any, value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            rule = number_problem(v, seed)
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
