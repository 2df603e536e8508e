"""Pricing many shapes in one vectorised kernel-table query, ahead of the single questions.

A serving search asks the cost model one shape at a time: an attention core of ``n``
sequences, an expert load, a decode step's cores over a block of contexts. Each question is a
pass over a variant's tables (:meth:`moeplan.cost.kerneldb.db.KernelDB.predict_many`) whose
fixed cost — selecting the variant, featurising, the residual field's nearest-neighbour
query — dwarfs the cost of one more row: on one H100 table, 40 blocks of 191 decode contexts
cost 0.43 s as 40 queries and 0.07 s as one; 100 fused-MoE rows 0.13 s one by one and 2 ms
together. Every row is priced alone (its own features, its own neighbours): a row's price is
the same whatever rows share its query (:meth:`KernelDB.warm`, ``tests/test_cost_prefetch.py``),
so pricing the neighbours of an asked shape ahead changes no figure, only the time.

:class:`Prefetch` adds to :class:`moeplan.cost.model.CostModel` the decode cores of several
sequence counts at once (:meth:`Prefetch.decode_core_prices` with ``also``) and the attention
cores of several sequence counts (:meth:`Prefetch.warm_attention_core`); the expert FFN has
its own (:meth:`CostModel.warm_expert_ffn`). Which neighbours to price is the caller's choice
(:mod:`moeplan.serve.iteration_prefetch`: the engine's batch grid). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from moeplan.cost.kerneldb.pricing import attention_query

if TYPE_CHECKING:
    from moeplan.specs import ModelSpec

CORE_MEMO = 50_000  # blocks of decode-core prices kept before the memo is cleared (as KernelDB's)


class Prefetch:
    """Vectorised pricing ahead of single questions (module docstring); mixed into
    :class:`moeplan.cost.model.CostModel`, whose ``_kdb``, ``_device``, ``engine``,
    ``layer_model`` and ``attention_core`` it uses."""

    _cores: dict[tuple, list[float]]

    def decode_core_prices(
        self, model: ModelSpec, num_seqs: int, ctxs: Sequence[int], tp: int = 1,
        layer: int | None = None, also: Sequence[int] = (),
    ) -> list[float]:  # fmt: skip
        """:meth:`attention_core` of one decode token at each context of ``ctxs`` (one
        vectorised kernel-table query; not counted in the pricing provenance). ``also``:
        other sequence counts whose prices at ``ctxs`` the same query computes and keeps (a
        later call for one of them is a look-up)."""
        kdb = self._kdb  # type: ignore[attr-defined]
        if kdb is None or num_seqs <= 0:
            return [self.attention_core(model, num_seqs, 1, c, tp, layer) for c in ctxs]  # type: ignore[attr-defined]
        model = self.layer_model(model, layer)  # type: ignore[attr-defined]
        sliding = layer is not None and model.is_sliding_layer(layer)
        ctxs = tuple(ctxs)

        def row(seqs: int) -> tuple[tuple, dict[str, object]]:
            ((op, shape),) = attention_query(model, seqs, 1, 1, tp, sliding)  # the decode row
            return (op, tuple(sorted(shape.items())), ctxs), shape

        key, shape = row(num_seqs)
        got = self._cores.get(key)
        if got is not None:
            return got
        todo = {key: shape}
        for s in also:
            if s > 0:
                k, sh = row(s)
                if k[0] == key[0] and k not in self._cores:
                    todo.setdefault(k, sh)
        n = len(ctxs)
        cols = {c: np.asarray([sh[c] for sh in todo.values() for _ in ctxs]) for c in shape}
        cols["step"] = np.asarray([max(0, c - 1) for _ in todo for c in ctxs])
        secs = kdb.seconds_many(key[0], self._device, self.engine, cols).tolist()  # type: ignore[attr-defined]
        if len(self._cores) + len(todo) >= CORE_MEMO:
            self._cores.clear()
        for i, k in enumerate(todo):
            self._cores[k] = secs[i * n : (i + 1) * n]
        return self._cores[key]

    def warm_attention_core(
        self, model: ModelSpec, seqs: Sequence[int], q_len: int, ctx_len: int, tp: int = 1,
        layer: int | None = None,
    ) -> None:  # fmt: skip
        """Price :meth:`attention_core` for each sequence count of ``seqs`` (same ``q_len``,
        ``ctx_len``, ``tp``, ``layer``) in one vectorised query per table; later calls are
        memo hits with the same answers. A no-op without kernel tables."""
        kdb = self._kdb  # type: ignore[attr-defined]
        if kdb is None:
            return
        model = self.layer_model(model, layer)  # type: ignore[attr-defined]
        sliding = layer is not None and model.is_sliding_layer(layer)
        by_op: dict[str, list[dict[str, object]]] = {}
        for s in seqs:
            if s > 0 and q_len > 0:
                for op, shape in attention_query(model, s, q_len, max(ctx_len, q_len), tp, sliding):
                    by_op.setdefault(op, []).append(shape)
        for op, shapes in by_op.items():
            kdb.warm(op, self._device, self.engine, shapes)  # type: ignore[attr-defined]
