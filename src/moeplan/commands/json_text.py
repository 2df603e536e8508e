"""The text of a command's ``--json`` answer: one JSON object, always valid JSON.

Every ``--json`` prints an object, never a bare list: its keys say what the values are, and
keys can be added later. NumPy scalars and arrays are converted. A number that is not finite
(NaN, ±Infinity: no figure) is written as ``null``, as in ``plan.json``, so the output never
holds the bare ``NaN`` that JSON parsers reject.
"""

from __future__ import annotations

import json
import math
from typing import Any


def json_text(obj: Any) -> str:
    """``obj`` (a dict) as indented JSON text (module docstring)."""
    if not isinstance(obj, dict):
        raise TypeError(f"--json output must be a JSON object, not {type(obj).__name__}")
    return json.dumps(_finite(obj), indent=2, default=_default, allow_nan=False)


def _finite(o: Any) -> Any:
    """``o`` with every non-finite float (NumPy's included) replaced by ``None``."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if hasattr(o, "tolist") and not isinstance(o, (str, bytes)):
        return _finite(o.tolist())
    return o


def _default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")
