"""The rules every numeric flag of every command obeys (applied by ``moeplan.cli._bounds``
where flags are parsed): a number is finite and at most :data:`MAX_MAGNITUDE` in size, a
seed is not negative, and an integer is spelled one way (:data:`INTEGER`: ASCII digits with
an optional leading minus and no leading zero — ``5.0``, ``1_000``, `` 5``, ``+8``, ``-0`` and
``08`` are refused, where Python's ``int()`` or a lax converter would take some of them).
Each refusal is one :class:`~moeplan.errors.MoeplanError` line naming the flag and the rule.
"""

from __future__ import annotations

import math
import re
from typing import Any

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


def number_problem(value: Any, seed: bool) -> str | None:
    """Why ``value`` of a numeric flag is refused (the module's rule), None when it is fine;
    ``seed``: the flag is a seed (no negative values)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if abs(value) > MAX_MAGNITUDE:
        return "must be at most 10^15 in magnitude (no flag of moeplan needs more)"
    if seed and value < 0:
        return "must be >= 0"
    return None
