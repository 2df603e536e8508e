"""The project's one user-facing error type, and the checks every reader shares.

Every mistake a user can make (bad config, impossible layout, unknown preset, corrupt file)
raises :class:`MoeplanError` with one line that names the field, the value and the rule,
e.g. ``model.num_experts (63) must be divisible by ep (8)``. The CLI prints that line on
stderr and exits with code 2; nothing else is shown.

:func:`check_int` / :func:`check_float` are the boundary checks of the readers:
they refuse bools, strings, non-finite floats and out-of-range values *before* a value is
used to size anything. :class:`Terminated` is what a SIGTERM becomes inside the CLI (see
:func:`sigterm_raises`), so ``finally`` blocks remove temp files instead of being skipped.
"""

from __future__ import annotations

import math
import numbers
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

VALUE_CHARS = 60  # a bad value is quoted at most this long in an error line


class MoeplanError(ValueError):
    """A user-facing validation error: one line naming field, value and rule."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class Terminated(BaseException):  # noqa: N818 - a signal, not an error
    """SIGTERM received: unwinds the stack (running cleanups) like KeyboardInterrupt."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def require(cond: bool, message: str) -> None:
    """Raise :class:`MoeplanError` with ``message`` unless ``cond`` holds."""
    if not cond:
        raise MoeplanError(message)


def show(value: Any) -> str:
    """``repr(value)`` cut to :data:`VALUE_CHARS` characters (huge values stay one line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        sign = "-" if value < 0 else ""
        return f"<{sign}integer of about {value.bit_length() * math.log10(2):.0f} digits>"
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def check_int(field: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in ``[lo, hi]``; integral floats are accepted, bools are not."""
    v = value
    if (
        isinstance(v, numbers.Real)
        and not isinstance(v, numbers.Integral)
        and math.isfinite(v)
        and value == int(value)  # value, not v: the same object, typed Any (Real has no __int__)
    ):
        v = int(value)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise MoeplanError(f"{field} ({show(value)}) must be an integer")
    v = int(v)
    if lo is not None and v < lo:
        raise MoeplanError(f"{field} ({show(value)}) must be >= {lo}")
    if hi is not None and v > hi:
        raise MoeplanError(f"{field} ({show(value)}) must be <= {hi}")
    return v


def check_float(
    field: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    positive: bool = False,
) -> float:
    """``value`` as a finite float in ``[lo, hi]`` (``positive``: strictly above 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise MoeplanError(f"{field} ({show(value)}) must be a number")
    try:
        v = float(value)
    except OverflowError:
        raise MoeplanError(f"{field} ({show(value)}) must be a finite number") from None
    if not math.isfinite(v):
        raise MoeplanError(f"{field} ({v}) must be a finite number")
    if positive and v <= 0:
        raise MoeplanError(f"{field} ({v:g}) must be positive")
    if lo is not None and v < lo:
        raise MoeplanError(f"{field} ({v:g}) must be >= {lo:g}")
    if hi is not None and v > hi:
        raise MoeplanError(f"{field} ({v:g}) must be <= {hi:g}")
    return v


def _raise_terminated(signum: int, frame: Any) -> None:
    del frame
    raise Terminated(signum)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block a SIGTERM raises :class:`Terminated` (main thread only)."""
    try:
        old = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
