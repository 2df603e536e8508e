"""Two-batch overlap of an engine iteration (:class:`moeplan.serve.iteration.model.IterationModel`).

The split is SGLang's (sgl-project/sglang v0.5.x, python/sglang/srt/batch_overlap/
two_batch_overlap.py; the same rule in two_batch_overlap.py of earlier releases):

- decode (and MTP verify): ``compute_split_seq_index`` returns ``bs // 2`` sequences for the
  first micro-batch, the rest for the second; with one sequence the first is empty and the
  layer runs as one batch, so moeplan prices no overlap there (:func:`tbo_halves` returns
  ``None``).
- extend (prefill chunks): ``_split_extend_seqs``: the sequence boundary that best balances the
  tokens (``_split_array_by_balanced_sum``); when the first side would hold less than
  ``tbo_token_distribution_threshold`` (:data:`TBO_TOKEN_THRESHOLD`, default 0.48) or more
  than one minus it of the tokens (``_is_two_chunk_split_enabled``), the batch is cut at
  ``sum // 2`` tokens instead (``compute_split_token_index``), one prompt split across the
  two micro-batches — as DeepSeek splits its prefill micro-batches — so one prompt of ``L >=
  2`` tokens is two micro-batches of ``L // 2`` and ``L - L // 2`` (the second attends to the
  first's keys). Departure: a batch holding both prefill chunks and decode sequences (SGLang
  runs them as separate batches unless mixed chunking is on, which TBO does not split) is
  split by the extend rule with each decode sequence a one-token extend.

Each half is priced at its own size. Per decoder layer a half's attention and expert compute
run on the ``compute`` resource and its dispatch and combine (half the layer's communication
each, around the expert compute) on ``comm``; :func:`moeplan.cost.overlap.alternating_makespan`
schedules the halves in the engine's alternation (non-decreasing in every piece). The
breakdown sums the kinds of both halves and reports ``overlap`` (<= 0): the makespan minus the
sum of every piece. In a prefill iteration on DeepEP the compute runs on the SMs DeepEP's
normal kernels leave (:func:`moeplan.cost.wideep.tbo_gemm_factor`), as in
:mod:`moeplan.serve.iteration.phase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from moeplan.cost.overlap import Piece, alternating_makespan

COMPUTE_KINDS = ("attention", "moe", "dense", "lm_head")  # slowed beside DeepEP normal
#: SGLang's ``--tbo-token-distribution-threshold`` default (server_args.py
#: ``tbo_token_distribution_threshold: float = 0.48``, v0.5.x)
TBO_TOKEN_THRESHOLD = 0.48


def _balanced_index(lens: Sequence[int]) -> int:
    """SGLang's ``_split_array_by_balanced_sum``: the first index whose left/right token
    difference stops falling (0 for one sequence)."""
    total, left, best, index = sum(lens), 0, float("inf"), 0
    for i in range(1, len(lens)):
        left += lens[i - 1]
        diff = abs(left - (total - left))
        if diff <= best:
            best, index = diff, i
        else:
            break
    return index


def extend_cut(lens: Sequence[int], threshold: float = TBO_TOKEN_THRESHOLD) -> int | None:
    """Tokens of the first micro-batch of an extend batch of sequences ``lens`` (module
    docstring), or ``None`` when one micro-batch would be empty."""
    total = sum(lens)
    left = sum(lens[: _balanced_index(lens)])
    if left < total * threshold or left > total * (1 - threshold):
        left = total // 2  # the two-chunk split: a sequence cut across the micro-batches
    return left if 0 < left < total else None


def tbo_halves(batch: Any, per_seq: int = 1) -> tuple[Any, Any] | None:
    """The two micro-batches SGLang runs ``batch`` as (a :class:`~.model.Batch` whose decode
    tokens are ``per_seq`` per sequence: MTP's verify), or ``None`` where it runs one batch
    (module docstring)."""
    kind = type(batch)
    if not batch.prefill:
        first = batch.decode // per_seq // 2 * per_seq
        if first == 0:
            return None
        return kind(first, batch.decode_ctx, ()), kind(batch.decode - first, batch.decode_ctx, ())
    cut = extend_cut([q for q, _ in batch.prefill] + [1] * batch.decode)
    if cut is None:
        return None
    a: list[tuple[int, int]] = []
    b: list[tuple[int, int]] = []
    left = cut
    for q, ctx in batch.prefill:
        take = min(q, left)
        left -= take
        if take:
            a.append((take, ctx - q + take))
        if q - take:
            b.append((q - take, ctx))
    dec_a = min(batch.decode, left)
    return (
        kind(dec_a, batch.decode_ctx if dec_a else 0, tuple(a)),
        kind(batch.decode - dec_a, batch.decode_ctx if batch.decode - dec_a else 0, tuple(b)),
    )


def _group_batch(own: Any, tokens: float) -> Any:
    """The EP group's micro-batch beside the rank's ``own`` half: ``tokens`` tokens (at least
    one), holding prefill where ``own`` does — all its pricing reads (the MoE's tokens and
    kernels)."""
    n = max(1, round(tokens))
    if own.prefill:
        return type(own)(0, 0, ((n, n),))
    return type(own)(n, own.decode_ctx, ())


class TwoBatchMixin:
    """The two-batch-overlap period of :class:`~moeplan.serve.iteration.model.IterationModel`."""

    def _two_batch(self: Any, mb: Any, rank: Any, halves: tuple[Any, Any]) -> dict[str, float]:
        """Two-batch overlap of the busiest attention rank's ``halves`` (:func:`tbo_halves` of
        ``rank``, its share of ``mb``; module docstring). Every DP rank splits its own batch
        (SGLang's ``TboDPAttentionPreparer`` computes the split index per rank), so a
        micro-batch of the EP group holds the same share of ``mb``'s tokens as the rank's
        half of the rank's."""
        out: dict[str, float] = {}
        chains: list[list[Piece]] = []
        for own in halves:
            half = _group_batch(own, mb.tokens * own.tokens / rank.tokens)
            # DeepEP's normal kernels keep their SMs beside a prefill's compute (cost/wideep.py)
            f = (
                1.0
                if self._wide is None
                else self._wide.tbo_gemm_factor("context" if half.prefill else "generation")
            )
            parts = {
                k: v * f if k in COMPUTE_KINDS else v for k, v in self._stage(0, half, own).items()
            }
            for k, v in parts.items():
                out[k] = out.get(k, 0.0) + v
            chain: list[Piece] = []
            attn_comm = self._gather_scatter(own.tokens, self.layout.attn_tp, self._nodes["attn"])
            for layer, count in self._stages[0].items():
                attn = self._attention(own, layer.mixer) * f + attn_comm
                if not layer.moe:
                    mlp, gs = self._dense_layer(half.tokens)
                    chain += [Piece("compute", attn + mlp * f + gs)] * count
                    continue
                comp, comm = self._moe(
                    half.tokens, own.tokens, layer.k, layer.imbalance, bool(half.prefill)
                )
                step = [
                    Piece("compute", attn),
                    Piece("comm", comm / 2),
                    Piece("compute", comp * f),
                    Piece("comm", comm / 2),
                ]
                chain += step * count
            chain.append(Piece("compute", parts["lm_head"]))
            chains.append(chain)
        total = sum(out.values())
        span = alternating_makespan(chains)
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
