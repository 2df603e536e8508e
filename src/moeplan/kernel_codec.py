"""Built kernel variants as data that cannot run code: a JSON graph plus NumPy arrays (no I/O).

:mod:`moeplan.kernel_store` keeps built variants on disk. A pickle would let whoever can
write the cache run code in every later ``moeplan``; this codec writes only what a decoder
rebuilds without calling anything a file names:

- scalars as JSON (``NaN``/``Infinity`` included; Python floats round-trip bit for bit);
- ``list``/``tuple``/``dict``/``bytes`` and NumPy arrays and scalars of numeric, boolean or
  text dtypes (small arrays inline, the rest as array members of the ``.npz``);
- instances of the classes in :data:`CLASSES` only, rebuilt with ``object.__new__`` and their
  attributes set directly (no ``__init__``, ``__setstate__`` or property runs), each checked to
  carry exactly its declared slots;
- a kernel family by its op name (:data:`moeplan.cost.kerneldb.KERNEL_FAMILIES`). A residual
  field's k-d tree is not an attribute: the field builds it again on its first search.

Anything else does not encode (:class:`CodecError`: not cached) or does not decode
(:class:`CodecError`: a cache miss).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from moeplan.cost.kerneldb import KERNEL_FAMILIES
from moeplan.cost.kerneldb.base import Features
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import Family
from moeplan.cost.kerneldb.feature_base import WaveFeatures
from moeplan.cost.kerneldb.fit import Analytic, ResidualField
from moeplan.cost.kerneldb.variant import VariantModel

#: The classes a stored variant may hold (what :class:`VariantModel` is built of).
CLASSES: dict[str, type] = {
    c.__name__: c for c in (VariantModel, ResidualField, Analytic, Features, WaveFeatures, Device)
}
ARRAY_KINDS = "biufU"  # bool, integers, floats, text: never object or raw bytes
INLINE = 64  # arrays up to this many elements are written into the JSON graph
MAX_DEPTH = 64  # nesting a decoder follows (a stored variant nests 6 deep)


class CodecError(ValueError):
    """A value this codec does not write, or a graph that is not one it wrote."""


def _slots(cls: type) -> set[str]:
    return {
        s
        for c in cls.__mro__
        for s in getattr(c, "__slots__", ())
        if s not in ("__dict__", "__weakref__")
    }


def encode(value: Any) -> tuple[bytes, list[np.ndarray]]:
    """``value`` as (UTF-8 JSON graph, arrays referenced by index)."""
    arrays: list[np.ndarray] = []
    graph = _enc(value, arrays)
    return json.dumps(graph, separators=(",", ":"), allow_nan=True).encode(), arrays


def _array(a: np.ndarray, arrays: list[np.ndarray]) -> dict[str, Any]:
    if a.dtype.kind not in ARRAY_KINDS or a.dtype.hasobject:
        raise CodecError(f"array of dtype {a.dtype} is not stored")
    if a.size <= INLINE:
        return {"A": [a.dtype.str, list(a.shape), a.ravel().tolist()]}
    arrays.append(np.ascontiguousarray(a))
    return {"a": len(arrays) - 1}


def _enc(v: Any, arrays: list[np.ndarray]) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, np.ndarray):
        return _array(v, arrays)
    if isinstance(v, np.generic):
        return {"n": _array(np.asarray(v), arrays)}
    if isinstance(v, bytes):
        return {"b": _array(np.frombuffer(v, np.uint8), arrays)}
    if isinstance(v, (list, tuple)):
        return {"l" if isinstance(v, list) else "t": [_enc(x, arrays) for x in v]}
    if isinstance(v, dict):
        table = _columnar(v, arrays) if len(v) > INLINE else None
        if table is not None:
            return table
        return {"d": [[_enc(k, arrays), _enc(x, arrays)] for k, x in v.items()]}
    if isinstance(v, Family):
        return {"f": v.op}
    cls = type(v)
    if CLASSES.get(cls.__name__) is not cls:
        raise CodecError(f"{cls.__module__}.{cls.__qualname__} is not stored")
    state = {s: getattr(v, s) for s in _slots(cls) if hasattr(v, s)}
    state.update(getattr(v, "__dict__", {}))
    return {"o": [cls.__name__, {k: _enc(x, arrays) for k, x in state.items()}]}


_COLUMN_TYPES = {float: np.float64, int: np.int64, str: np.str_}


def _column(values: list[Any], arrays: list[np.ndarray]) -> dict[str, Any] | None:
    """One homogeneous column (all float, all int or all str) as an array, else ``None``."""
    kinds = set(map(type, values))
    if len(kinds) != 1 or (kind := kinds.pop()) not in _COLUMN_TYPES:
        return None
    return _array(np.array(values, dtype=_COLUMN_TYPES[kind]), arrays)


def _ragged(values: list[Any], arrays: list[np.ndarray]) -> dict[str, Any] | None:
    """Values that are tuples of ``m`` 1-d float arrays: per position, the arrays joined and
    their lengths; ``None`` when the values are not of that shape."""
    m = len(values[0]) if isinstance(values[0], tuple) else -1
    ok = m > 0 and all(
        isinstance(t, tuple)
        and len(t) == m
        and all(isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.float64 for a in t)
        for t in values
    )
    if not ok:
        return None
    parts = []
    for j in range(m):
        col = [t[j] for t in values]
        lengths = np.array([len(a) for a in col], dtype=np.int64)
        parts.append([_array(np.concatenate(col), arrays), _array(lengths, arrays)])
    return {"r": parts}


def _columnar(d: dict[Any, Any], arrays: list[np.ndarray]) -> dict[str, Any] | None:
    """A large dict keyed by equal-length tuples of scalars as columns of arrays (a decoder
    rebuilds it in C loops, not one JSON node per float); ``None`` when it is not one."""
    keys = list(d)
    if not all(type(k) is tuple for k in keys) or len({len(k) for k in keys}) != 1:
        return None
    cols = [_column(list(c), arrays) for c in zip(*keys, strict=True)]
    vals = list(d.values())
    value = _column(vals, arrays) or _ragged(vals, arrays)
    if any(c is None for c in cols) or value is None or not cols:
        return None
    return {"c": [cols, value]}


def decode(graph: bytes, arrays: list[np.ndarray]) -> Any:
    """The value :func:`encode` wrote (:class:`CodecError` for anything else)."""
    try:
        tree = json.loads(graph.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CodecError(f"graph is not JSON: {err}") from None
    return _Decoder(arrays).dec(tree, 0)


class _Decoder:
    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = arrays

    def dec(self, t: Any, depth: int) -> Any:
        if t is None or isinstance(t, (bool, int, str)):
            return t
        if isinstance(t, float):
            return t
        if depth > MAX_DEPTH or not (isinstance(t, dict) and len(t) == 1):
            raise CodecError("malformed graph node")
        ((tag, body),) = t.items()
        d = depth + 1
        if tag in ("l", "t") and isinstance(body, list):
            items = [self.dec(x, d) for x in body]
            return items if tag == "l" else tuple(items)
        if tag == "d" and isinstance(body, list):
            return dict(self._pair(p, d) for p in body)
        if tag in ("a", "A"):
            return self.array(tag, body)
        if tag == "c" and isinstance(body, list) and len(body) == 2:
            return self.columnar(body[0], body[1])
        if tag == "n" and isinstance(body, dict):
            a = self.dec(body, d)
            if not isinstance(a, np.ndarray) or a.ndim != 0:
                raise CodecError("numpy scalar must be 0-d")
            return a[()]
        if tag == "b" and isinstance(body, dict):
            a = self.dec(body, d)
            if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 1:
                raise CodecError("bytes must be a 1-d uint8 array")
            return a.tobytes()
        if tag == "f" and isinstance(body, str) and body in KERNEL_FAMILIES:
            return KERNEL_FAMILIES[body]
        if tag == "o" and isinstance(body, list) and len(body) == 2:
            return self.instance(body[0], body[1], d)
        raise CodecError(f"unknown graph node {tag!r}")

    def _pair(self, p: Any, depth: int) -> tuple[Any, Any]:
        if not (isinstance(p, list) and len(p) == 2):
            raise CodecError("dict entry must be a pair")
        k = self.dec(p[0], depth)
        try:
            hash(k)
        except TypeError:
            raise CodecError("dict key must be hashable") from None
        return k, self.dec(p[1], depth)

    def array(self, tag: str, body: Any) -> np.ndarray:
        if tag == "a":
            if isinstance(body, bool) or not isinstance(body, int):
                raise CodecError("array index must be an integer")
            if not 0 <= body < len(self.arrays):
                raise CodecError(f"array index {body} out of range")
            a = self.arrays[body]
        else:
            if not (isinstance(body, list) and len(body) == 3 and isinstance(body[0], str)):
                raise CodecError("inline array must be [dtype, shape, values]")
            dtype, shape, values = body
            try:
                dt = np.dtype(dtype)
            except TypeError:
                raise CodecError(f"unknown dtype {dtype!r}") from None
            if dt.kind not in ARRAY_KINDS or dt.hasobject or not isinstance(values, list):
                raise CodecError(f"dtype {dtype!r} is not stored")
            if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
                raise CodecError("shape must be a list of sizes")
            if math.prod(shape) != len(values) or len(values) > INLINE:
                raise CodecError("inline array's values do not fill its shape")
            if not all(isinstance(x, (bool, int, float, str)) for x in values):
                raise CodecError("inline array values must be scalars")
            try:
                a = np.array(values, dtype=dt).reshape(shape)
            except (ValueError, TypeError, OverflowError):
                raise CodecError("inline array values do not fit its dtype") from None
        if a.dtype.kind not in ARRAY_KINDS or a.dtype.hasobject:
            raise CodecError(f"array of dtype {a.dtype} is not stored")
        return a

    def column(self, t: Any) -> list[Any]:
        """A stored column: floats, ints or strs as Python objects."""
        if not (isinstance(t, dict) and len(t) == 1 and next(iter(t)) in ("a", "A")):
            raise CodecError("column must be an array")
        ((tag, body),) = t.items()
        a = self.array(tag, body)
        if a.ndim != 1 or a.dtype.kind not in "ifU":
            raise CodecError("column must be a 1-d float, int or text array")
        return a.tolist()

    def columnar(self, cols: Any, value: Any) -> dict[Any, Any]:
        if not (isinstance(cols, list) and cols and isinstance(value, dict) and len(value) == 1):
            raise CodecError("malformed columnar dict")
        keys = list(zip(*(self.column(c) for c in cols), strict=True))
        vals = self.ragged(value["r"], len(keys)) if "r" in value else self.column(value)
        if len(vals) != len(keys):
            raise CodecError("columnar dict's keys and values differ in length")
        return dict(zip(keys, vals, strict=True))

    def ragged(self, parts: Any, n: int) -> list[tuple[np.ndarray, ...]]:
        if not (isinstance(parts, list) and parts):
            raise CodecError("malformed ragged values")
        cols = []
        for p in parts:
            if not (isinstance(p, list) and len(p) == 2):
                raise CodecError("malformed ragged values")
            flat, lengths = (self.dec(x, 1) for x in p)
            ok = isinstance(flat, np.ndarray) and flat.ndim == 1 and flat.dtype == np.float64
            if not ok or not isinstance(lengths, np.ndarray) or lengths.dtype != np.int64:
                raise CodecError("ragged values must be float64 arrays with int64 lengths")
            if lengths.shape != (n,) or (lengths < 0).any() or int(lengths.sum()) != len(flat):
                raise CodecError("ragged lengths do not cover the values")
            cols.append(np.split(flat, np.cumsum(lengths)[:-1]))
        return list(zip(*cols, strict=True))

    def instance(self, name: Any, state: Any, depth: int) -> Any:
        cls = CLASSES.get(name) if isinstance(name, str) else None
        if cls is None or not isinstance(state, dict):
            raise CodecError(f"class {name!r} is not stored")
        slots = _slots(cls)
        has_dict = not slots or "__dict__" in {
            s for c in cls.__mro__ for s in getattr(c, "__slots__", ())
        }
        if slots and not has_dict and set(state) != slots:
            raise CodecError(f"{name}'s attributes {sorted(state)} are not its slots")
        if not all(isinstance(k, str) and k.isidentifier() for k in state):
            raise CodecError(f"{name}'s attribute names must be identifiers")
        obj = object.__new__(cls)
        for k, t in state.items():
            v = self.dec(t, depth + 1)
            if k in slots:
                object.__setattr__(obj, k, v)  # a slot's member descriptor: no code of ours
            else:
                vars(obj)[k] = v  # the instance dict: no property or __setattr__ runs
        return obj
