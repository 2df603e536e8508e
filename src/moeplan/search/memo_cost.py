"""A cost model whose answers are remembered across the layouts of one search.

:class:`moeplan.serve.iteration.IterationModel` memoises per layout; the layouts of a
deployment-space search ask the cost model the same questions again (an attention core of
``n`` sequences at context ``c`` over TP ``t`` costs the same in every layout with attention
TP ``t``). :class:`MemoCost` forwards every method call to the wrapped model once per
distinct argument tuple (plain values, tuples and lists compared by value; any other object —
the model and cluster specs, the same objects throughout a search — by identity).
:func:`memo_cost` wraps a model once (a :class:`MemoCost` is returned as it is), so every
search of one ``moeplan plan`` shares one memo. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeplan.cost import CostModel

_PLAIN = (int, float, str, bool, type(None))


def memo_cost(cost: Any) -> Any:
    """``cost`` answered through one memo: a :class:`MemoCost` is returned as it is."""
    return cost if isinstance(cost, MemoCost) else MemoCost(cost)


class MemoCost:
    """``cost``'s methods, each call answered once per distinct arguments."""

    def __init__(self, cost: CostModel) -> None:
        self._cost = cost
        self._memo: dict[tuple, Any] = {}
        self._methods: dict[str, Callable[..., Any]] = {}
        self._pinned: dict[int, Any] = {}  # objects keyed by identity, kept alive

    def _key(self, v: Any) -> Any:
        """``v`` itself when plain or a hashable tuple; a list by value; any other object
        (a model or cluster spec: hashing a spec walks all its fields) by identity, the
        object kept alive so that its id is never reused for another."""
        t = type(v)
        if t in _PLAIN:
            return v
        if t is tuple:
            try:
                hash(v)
                return v
            except TypeError:
                return ("tuple", tuple(self._key(x) for x in v))
        if t is list:
            return ("list", tuple(self._key(x) for x in v))
        self._pinned.setdefault(id(v), v)
        return ("id", id(v))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cost, name)
        if not callable(attr):
            return attr
        fn = self._methods.get(name)
        if fn is None:
            key_of, plain, memo = self._key, frozenset(_PLAIN), self._memo

            def fn(*args: Any, **kwargs: Any) -> Any:
                key = (
                    name,
                    tuple([a if type(a) in plain else key_of(a) for a in args]),
                    tuple(sorted((k, key_of(v)) for k, v in kwargs.items())) if kwargs else (),
                )
                v = memo.get(key, self)
                if v is self:
                    v = memo[key] = attr(*args, **kwargs)
                return v

            self._methods[name] = fn
            setattr(self, name, fn)  # later look-ups find it without __getattr__
        return fn
