"""Which shapes an iteration model prices ahead (:mod:`moeplan.cost.prefetch`).

A capacity search asks decode steps of batch sizes on the engine's grid
(:mod:`moeplan.serve.iteration.batch_grid`: every size up to 64, then a relative step of 1/32, the grid
of :func:`moeplan.serve.iteration.grid.bucket`); the sizes of one octave ``[2^j, 2^(j+1))`` on that grid
are 32 at most. When a decode step of ``n`` sequences misses the iteration model's memo, the
sizes of ``n``'s octave are priced with it in one vectorised query per kernel table: the
attention core at context 1 (the projections' own query), the attention core at a context
off the engine's grid (an analytic bound's) and the expert load. A size the search never asks costs a row each; the
prices are those the single questions get (:mod:`moeplan.cost.prefetch`), so no figure
moves. Each octave is priced once per iteration model (the cost model's memo shares it across
layouts of the same shapes).
"""

from __future__ import annotations

from typing import Any


def octave(n: int) -> tuple[int, ...]:
    """The engine's batch-grid sizes of ``n``'s octave ``[2^j, 2^(j+1))``: step
    ``max(1, 2^(j-5))`` (:func:`moeplan.serve.iteration.batch_grid._grid_below`'s spacing)."""
    lo = 1 << (max(1, n).bit_length() - 1)
    return tuple(range(lo, 2 * lo, max(1, lo >> 5)))


class PrefetchMixin:
    """Pricing ahead for :class:`~moeplan.serve.iteration.model.IterationModel` (module docstring);
    its ``cost``, ``model``, ``layout`` and ``_warmed`` set."""

    def _ahead(self: Any, kind: tuple) -> bool:
        """True the first time ``kind`` is asked (the caller prices ahead then)."""
        if kind in self._warmed:
            return False
        self._warmed.add(kind)
        return True

    def _warm_attention(self: Any, seqs: int, ctx: int, layer: int | None = None) -> None:
        """The attention cores of one decode token at ``ctx`` for ``seqs``'s octave."""
        warm = getattr(self.cost, "warm_attention_core", None)
        if warm is not None and seqs > 0 and self._ahead(("attn", octave(seqs)[0], ctx, layer)):
            warm(self.model, octave(seqs), 1, ctx, self.layout.attn_tp, layer)

    def _warm_moe(self: Any, t_mb: int, k: float, imb: float) -> None:
        """The expert loads of decode steps of ``t_mb``'s octave (:meth:`_expert_load`)."""
        warm = getattr(self.cost, "warm_expert_ffn", None)
        if warm is None or t_mb <= 0 or not self._ahead(("moe", octave(t_mb)[0], k, imb)):
            return
        loads = [self._expert_load(t, k, imb) for t in octave(t_mb)]
        warm(self.model, [x for x, _ in loads], loads[0][1], self.layout.moe_tp)

    def _expert_load(self: Any, t_mb: int, k: float, imb: float) -> tuple[float, float]:
        """(tokens per local expert, local experts) of an MoE layer of ``t_mb`` tokens on the
        busiest GPU: the arguments of its :meth:`CostModel.expert_ffn` call."""
        lay = self.layout
        e_local = (self.model.num_experts + lay.redundant_experts) / lay.moe_ep
        copies = t_mb * k * imb / lay.moe_ep
        return copies / e_local, e_local
