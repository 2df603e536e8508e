"""Two-batch overlap of an engine iteration (:class:`moeplan.serve.iteration.model.IterationModel`).

The batch is split in two halves (each priced as the larger share: an upper bound); per
decoder layer a half's attention and expert compute run on the ``compute`` resource and its
dispatch and combine (half the layer's communication each, around the expert compute) on
``comm``; :func:`moeplan.cost.overlap.makespan` schedules both halves. The breakdown keeps the
kinds of both halves and reports ``overlap`` (<= 0): the makespan minus the sum of every piece.
In a prefill iteration on DeepEP the compute runs on the SMs DeepEP's normal kernels leave
(:func:`moeplan.cost.wideep.tbo_gemm_factor`), as in :mod:`moeplan.serve.iteration.phase`.
"""

from __future__ import annotations

from typing import Any

from moeplan.cost.overlap import Piece, makespan

COMPUTE_KINDS = ("attention", "moe", "dense", "lm_head")  # slowed beside DeepEP normal


class TwoBatchMixin:
    """The two-batch-overlap period of :class:`~moeplan.serve.iteration.model.IterationModel`."""

    def _two_batch(self: Any, mb: Any) -> dict[str, float]:
        """Two-batch overlap (:mod:`moeplan.cost.overlap`): the batch in two halves (each the
        larger share, an upper bound), each layer's attention and expert compute on the
        ``compute`` resource, its dispatch and combine (half the communication each) on
        ``comm``; ``overlap`` (<= 0) is the makespan minus the sum of every piece."""
        half = self._part(mb, 2)  # busiest_part of the iteration module
        rank = self._part(half, self.layout.attn_dp)
        # DeepEP's normal kernels keep their SMs beside a prefill's compute (cost/wideep.py)
        f = (
            1.0
            if self._wide is None
            else self._wide.tbo_gemm_factor("context" if half.prefill else "generation")
        )
        parts = {
            k: v * f if k in COMPUTE_KINDS else v for k, v in self._stage(0, half, rank).items()
        }
        chain: list[Piece] = []
        attn_comm = self._gather_scatter(rank.tokens, self.layout.attn_tp, self._nodes["attn"])
        for layer, count in self._stages[0].items():
            attn = self._attention(rank, layer.mixer) * f + attn_comm
            if not layer.moe:
                mlp, gs = self._dense_layer(half.tokens)
                chain += [Piece("compute", attn + mlp * f + gs)] * count
                continue
            comp, comm = self._moe(
                half.tokens, rank.tokens, layer.k, layer.imbalance, bool(half.prefill)
            )
            step = [
                Piece("compute", attn),
                Piece("comm", comm / 2),
                Piece("compute", comp * f),
                Piece("comm", comm / 2),
            ]
            chain += [p for p in step if p.seconds > 0] * count
        chain.append(Piece("compute", parts["lm_head"]))
        total = 2 * sum(parts.values())
        span = makespan([chain, chain])
        out = {k: 2 * v for k, v in parts.items()}
        out.update(
            period_s=span,
            latency_s=span,
            p2p=0.0,
            micro_batches=1,
            bottleneck_stage=0,
            bubble_s=0.0,
            overlap=span - total,
        )
        return out
