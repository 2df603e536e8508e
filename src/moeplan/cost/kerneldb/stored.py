"""Whether a value read back from a variant store is one :class:`~.db.KernelDB` built (no I/O).

A store (:mod:`moeplan.kernel_store`) decodes only the classes a variant is made of, but a
file can still hold the wrong thing under a right name: an integer, an empty list, another
variant's file, a variant missing an attribute or holding NaN. :func:`stored_counts_ok` and
:func:`stored_variant_ok` say whether a decoded value has exactly the shape a build returns —
every attribute present with its type, every float finite, the variant the one asked for —
so anything else is a cache miss and is built again instead of failing (or pricing NaN) later.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from moeplan.cost.kerneldb.base import Features
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES, Family
from moeplan.cost.kerneldb.feature_base import WaveFeatures
from moeplan.cost.kerneldb.fit import Analytic, ResidualField
from moeplan.cost.kerneldb.variant import VariantModel

_NUM = (int, float)


def _f(ndim: int) -> tuple[str, int]:
    """An array of floats with ``ndim`` dimensions."""
    return ("f", ndim)


#: Each stored class's attributes and what each holds: a type (or tuple of types), or
#: ``(kinds, ndim)`` for a NumPy array of those dtype kinds. ``bool`` is never a number here.
SCHEMA: dict[type, dict[str, Any]] = {
    VariantModel: {
        "family": Family,
        "device": Device,
        "label": str,
        "cols": dict,
        "y": _f(1),
        "key": dict,
        "features": (Features, WaveFeatures),
        "model": Analytic,
        "residual": _f(1),
        "field": ResidualField,
        "exact": dict,
        "_lines": dict,
    },
    ResidualField: {
        "coords": _f(2),
        "carry": tuple,
        "residual": _f(1),
        "lo": _f(1),
        "hi": _f(1),
        "weights": _f(1),
        "robust": bool,
    },
    Analytic: {
        "floor": _NUM,
        "per_work": _NUM,
        "flops_eff": _NUM,
        "bw_eff": _NUM,
        "overlap": _NUM,
        "scale_work": bool,
        "floor_in_norm": bool,
    },
    Features: {
        "flops": _f(1),
        "nbytes": _f(1),
        "work": ("fi", 1),
        "fp8": ("bi", 1),
        "tokens": _f(1),
        "coords": _f(2),
    },
    WaveFeatures: {
        "ctas": _f(1),
        "flops": _f(1),
        "nbytes": _f(1),
        "work": ("fi", 1),
        "fp8": ("bi", 1),
        "tokens": _f(1),
        "coords": _f(2),
    },
    Device: {
        "name": str,
        "flops_bf16": _NUM,
        "flops_fp8": _NUM,
        "flops_fp4": _NUM,
        "mem_bw": _NUM,
        "link_bw": _NUM,
        "reference": str,
        "sm_count": int,
        "table": str,
        "sm_clock_mhz": (int, type(None)),
    },
}


def _attrs(obj: Any) -> dict[str, Any] | None:
    """``obj``'s attributes (slots and instance dict); ``None`` when one is missing."""
    names = {
        s
        for c in type(obj).__mro__
        for s in getattr(c, "__slots__", ())
        if s not in ("__dict__", "__weakref__")
    }
    out = {}
    for s in names:
        if not hasattr(obj, s):
            return None
        out[s] = getattr(obj, s)
    out.update(getattr(obj, "__dict__", {}))
    return out


def _fits(value: Any, spec: Any) -> bool:
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        kinds, ndim = spec
        return isinstance(value, np.ndarray) and value.dtype.kind in kinds and value.ndim == ndim
    if isinstance(value, bool) and spec in (_NUM, int):
        return False
    return isinstance(value, spec)


def _finite(value: Any, depth: int = 0) -> bool:
    """Every float in ``value`` (and in the arrays, containers and stored classes it holds)
    is finite."""
    if depth > 16:
        return False
    if isinstance(value, (float, np.floating)):
        return math.isfinite(value)
    if isinstance(value, np.ndarray):
        return value.dtype.kind != "f" or bool(np.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return _all_finite(value, depth + 1)
    if isinstance(value, dict):
        return _all_finite(value.keys(), depth + 1) and _all_finite(value.values(), depth + 1)
    if type(value) in SCHEMA:
        attrs = _attrs(value)
        return attrs is not None and _all_finite(attrs.values(), depth + 1)
    return True


#: types that hold no float of their own (``bool`` is an ``int``; a subclass is not plain)
_PLAIN = frozenset({str, int, bool, type(None)})


def _all_finite(items: Iterable[Any], depth: int) -> bool:
    """``all(_finite(x, depth) for x in items)``, with the plain items checked at C speed: a
    variant's exact-row dict holds one tuple of floats and strings per measured row (tens of
    thousands), checked on every load from the store. Items of types that hold no float are
    skipped, floats and float arrays are checked as one array, and tuples of one length are checked column by
    column (one level deeper, as their items are)."""
    items = items if type(items) is list else list(items)
    if not items:
        return True
    if depth > 16:
        return False
    kinds = set(map(type, items))
    if kinds <= _PLAIN:
        return True
    if kinds == {float}:
        return bool(np.isfinite(np.array(items, dtype=float)).all())
    if kinds == {np.ndarray}:  # a shape line's coordinates and residuals, per shape
        floats = [a.ravel() for a in items if a.dtype.kind == "f"]
        return not floats or bool(np.isfinite(np.concatenate(floats)).all())
    if kinds == {tuple} and len(set(map(len, items))) == 1:
        return all(_all_finite(list(col), depth + 1) for col in zip(*items, strict=True))
    return all(_finite(x, depth) for x in items if type(x) not in _PLAIN)


def _well_formed(obj: Any, depth: int = 0) -> bool:
    """``obj`` is an instance of a :data:`SCHEMA` class with exactly its attributes, each
    of its declared kind, recursively."""
    schema = SCHEMA.get(type(obj))
    attrs = _attrs(obj) if schema is not None else None
    if schema is None or attrs is None or set(attrs) != set(schema) or depth > 8:
        return False
    for name, spec in schema.items():
        value = attrs[name]
        if not _fits(value, spec):
            return False
        if type(value) in SCHEMA and not _well_formed(value, depth + 1):
            return False
    return True


def stored_counts_ok(value: Any, op: str) -> bool:
    """``value`` is what :meth:`KernelDB.variants` builds for ``op``: variant keys (one text
    per variant column) to positive row counts."""
    n = len(KERNEL_FAMILIES[op].variant_cols)
    return isinstance(value, dict) and all(
        type(k) is tuple
        and len(k) == n
        and all(type(s) is str for s in k)
        and type(c) is int
        and c > 0
        for k, c in value.items()
    )


def stored_variant_ok(value: Any, op: str, key: tuple) -> bool:
    """``value`` is a well-formed, finite :class:`VariantModel` of ``op``'s variant ``key``."""
    if type(value) is not VariantModel or not _well_formed(value):
        return False
    fam = KERNEL_FAMILIES[op]
    n = len(value.y)
    shapes_ok = (
        n > 0
        and len(value.residual) == n
        and value.field.coords.shape[0] == n
        and all(isinstance(a, np.ndarray) and len(a) == n for a in value.cols.values())
        and all(type(k) is str and type(v) is str for k, v in value.key.items())
    )
    same = value.family is fam and tuple(value.key.get(c) for c in fam.variant_cols) == key
    return shapes_ok and same and _finite(value)
