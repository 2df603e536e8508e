"""A cost model whose answers are remembered across the layouts of one search.

:class:`moeplan.serve.iteration.IterationModel` memoises per layout; the layouts of a
deployment-space search ask the cost model the same questions again (an attention core of
``n`` sequences at context ``c`` over TP ``t`` costs the same in every layout with attention
TP ``t``). :class:`MemoCost` forwards every method call to the wrapped model once per
distinct argument tuple (arguments compared by value when hashable or a list / tuple of such,
else by identity: the model and cluster specs are the same objects throughout a search).
:func:`memo_cost` wraps a model once (a :class:`MemoCost` is returned as it is), so every
search of one ``moeplan plan`` shares one memo. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeplan.cost import CostModel


def _key(v: Any) -> Any:
    if isinstance(v, list | tuple):  # e.g. a grid of contexts: compared by value
        return (type(v).__name__, tuple(_key(x) for x in v))
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return v


def memo_cost(cost: Any) -> Any:
    """``cost`` answered through one memo: a :class:`MemoCost` is returned as it is."""
    return cost if isinstance(cost, MemoCost) else MemoCost(cost)


class MemoCost:
    """``cost``'s methods, each call answered once per distinct arguments."""

    def __init__(self, cost: CostModel) -> None:
        self._cost = cost
        self._memo: dict[tuple, Any] = {}
        self._methods: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cost, name)
        if not callable(attr):
            return attr
        fn = self._methods.get(name)
        if fn is None:

            def fn(*args: Any, **kwargs: Any) -> Any:
                key = (name, tuple(_key(a) for a in args), tuple(sorted(kwargs.items())))
                v = self._memo.get(key, self)
                if v is self:
                    v = self._memo[key] = attr(*args, **kwargs)
                return v

            self._methods[name] = fn
        return fn
