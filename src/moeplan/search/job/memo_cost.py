"""A cost model whose answers are remembered across the layouts of one search.

:class:`moeplan.serve.iteration.model.IterationModel` memoises per layout; the layouts of a
deployment-space search ask the cost model the same questions again (an attention core of
``n`` sequences at context ``c`` over TP ``t`` costs the same in every layout with attention
TP ``t``). :class:`MemoCost` forwards every method call to the wrapped model once per
distinct argument tuple (plain values, tuples and lists compared by value; any other object —
the model and cluster specs, the same objects throughout a search — by identity).
:func:`memo_cost` wraps a model once (a :class:`MemoCost` is returned as it is), so every
search of one ``moeplan plan`` shares one memo. Prices a caller derives from the answers
alone (an iteration model's decode-attention envelope or mixer block, the same in every layout
with that attention TP) are kept in :meth:`MemoCost.shared_table`, one table per what they
depend on. Pure: no I/O.

A memo can be handed on: :meth:`MemoCost.mark` notes where it stands, :meth:`MemoCost.since`
lists the answers added after a mark and :meth:`MemoCost.absorb` adds such a list to another
copy of the memo — a forked copy of this process (:mod:`moeplan.search.job.fanout`) gives its
answers back so the process that forked it does not price them again. The same arguments give
the same answer wherever they are priced, so absorbing changes no figure, only the time.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

from moeplan.cost import CostModel

_PLAIN = (int, float, str, bool, type(None))
Mark = tuple[int, int]
"""Where a memo stands: its answers and its objects keyed by identity, counted."""


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
        self._tables: dict[tuple, dict] = {}

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

    def decode_core_blocks(
        self, model: Any, num_seqs: int, blocks: Any, tp: int = 1, layer: int | None = None
    ) -> list[list[float]]:
        """:meth:`CostModel.decode_core_blocks` remembered block by block, as the calls
        ``decode_core_prices(model, num_seqs, block, tp, layer)`` are: the blocks not yet
        known are priced in one query."""
        keys = [
            ("decode_core_prices", tuple(self._key(a) for a in (model, num_seqs, b, tp, layer)), ())
            for b in blocks
        ]
        memo = self._memo
        todo = [i for i, k in enumerate(keys) if k not in memo]
        if todo:
            asked = [blocks[i] for i in todo]
            got = self._cost.decode_core_blocks(model, num_seqs, asked, tp, layer)
            for i, prices in zip(todo, got, strict=True):
                memo[keys[i]] = prices
        return [memo[k] for k in keys]

    def shared_table(self, *parts: Any) -> dict:
        """One dictionary per distinct ``parts`` (keyed as arguments are), for a caller's
        prices derived from this model's answers alone: every iteration model of a search
        whose derived price depends only on ``parts`` shares it (e.g. the decode-attention
        envelopes of every layout with one attention TP,
        :meth:`moeplan.serve.iteration.model.IterationModel._decode_core`). Not handed on to
        other processes: a copy fills its own."""
        key = tuple(self._key(p) for p in parts)
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = {}
        return t

    # ---- handing answers on (module docstring) --------------------------------------------
    def pin(self, *objs: Any) -> None:
        """Key ``objs`` by identity now: answers about them made in a copy of this memo taken
        later can be absorbed here (:meth:`since`)."""
        for o in objs:
            self._key(o)

    def mark(self) -> Mark:
        """Where the memo stands now (answers and pinned objects only grow)."""
        return len(self._memo), len(self._pinned)

    def since(self, answers_from: Mark, objects_from: Mark) -> list[tuple[tuple, Any]]:
        """The answers added after ``answers_from`` whose keys name no object pinned after
        ``objects_from`` (an object made after the copy was taken may share its id with
        another object in the original)."""
        # the memo's first answers skipped in C, not copied (a memo holds ~10^5-10^6)
        known = set(islice(self._pinned, objects_from[1]))
        items = islice(self._memo.items(), answers_from[0], None)
        return [(k, v) for k, v in items if _ids_in(k) <= known]

    def absorb(self, answers: list[tuple[tuple, Any]]) -> None:
        """Add answers of :meth:`since` from a copy of this memo (those it has are kept)."""
        memo = self._memo
        for k, v in answers:
            memo.setdefault(k, v)


def _ids_in(key: Any) -> set[int]:
    """The identities an argument key names (``("id", n)`` pairs, at any depth)."""
    out: set[int] = set()
    todo = [key]
    while todo:
        k = todo.pop()
        if type(k) is tuple:
            if len(k) == 2 and k[0] == "id" and type(k[1]) is int:
                out.add(k[1])
            else:
                todo.extend(x for x in k if type(x) is tuple)
    return out
