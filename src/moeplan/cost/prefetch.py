"""Pricing many shapes in one vectorised kernel-table query, ahead of the single questions.

A serving search asks the cost model one shape at a time: an attention core of ``n``
sequences at a context, an expert load. Each question is a pass over a variant's tables (:meth:`moeplan.cost.kerneldb.db.KernelDB.predict_many`) whose
fixed cost — selecting the variant, featurising, the residual field's nearest-neighbour
query — dwarfs the cost of one more row: on one H100 table, 40 blocks of 191 decode contexts
cost 0.43 s as 40 queries and 0.07 s as one; 100 fused-MoE rows 0.13 s one by one and 2 ms
together. Every row is priced alone (its own features, its own neighbours): a row's price is
the same whatever rows share its query (:meth:`KernelDB.warm`, ``tests/test_cost_prefetch.py``),
so pricing the neighbours of an asked shape ahead changes no figure, only the time.

:class:`Prefetch` adds to :class:`moeplan.cost.model.CostModel` the attention cores of several
sequence counts at once (:meth:`Prefetch.warm_attention_core`); the expert FFN has its own
(:meth:`CostModel.warm_expert_ffn`). A block of decode contexts is one query already
(:meth:`CostModel.decode_core_prices`): pricing the blocks of more sequence counts with it
priced more rows than the searches asked and saved no time. Which neighbours to price is
the caller's choice (:mod:`moeplan.serve.iteration.prefetch`: the engine's batch grid, and
the AFD decode solver's candidates). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from moeplan.cost.kerneldb.pricing import attention_query

if TYPE_CHECKING:
    from moeplan.specs import ModelSpec


class Prefetch:
    """Vectorised pricing ahead of single questions (module docstring); mixed into
    :class:`moeplan.cost.model.CostModel`, whose ``_kdb``, ``_device``, ``engine`` and
    ``layer_model`` it uses."""

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
