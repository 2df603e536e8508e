"""Multi-token prediction in an engine iteration (:class:`moeplan.serve.iteration.model.IterationModel`).

With ``knobs.mtp = N`` every decoding sequence of an iteration is a speculative step, priced
as :mod:`moeplan.serve.iteration.phase` prices it:

- verify: the target model on ``N + 1`` tokens per decoding sequence (each priced as a decode
  query at the sequence's context: an upper bound, the kernel reads the KV once per
  sequence); the prefill chunks of the same iteration as without MTP;
- draft: ``N`` passes of the MTP module — one MoE decoder layer (the model's first MoE layer's
  price), its final norm and the lm-head at one token per decoding sequence — not overlapped.

The engine advances each decoding sequence by ``InstanceKnobs.tokens_per_step`` tokens per
step in expectation (:class:`moeplan.serve.engine.run.Engine`).
"""

from __future__ import annotations

from typing import Any


class MtpMixin:
    """The speculative decode step of :class:`~moeplan.serve.iteration.model.IterationModel`."""

    def _mtp_breakdown(self: Any, batch: Any) -> dict[str, float]:
        """Breakdown of ``batch`` with MTP: the verify pass (``N + 1`` tokens per decoding
        sequence) plus ``mtp_draft``, ``N`` draft passes (module docstring)."""
        n = self.knobs.mtp
        verify = type(batch)(batch.decode * (n + 1), batch.decode_ctx, batch.prefill)
        # two-batch overlap splits sequences (SGLang's split of a verify batch, bs // 2): one
        # sequence's N + 1 verify tokens are not two micro-batches
        out = dict(self._plain_breakdown(verify, per_seq=n + 1))
        draft = n * self._memo(("mtp", batch.decode, batch.decode_ctx), self._draft, batch)
        out["mtp_draft"] = draft
        out["period_s"] += draft
        out["latency_s"] += draft
        return out

    def _draft(self: Any, batch: Any) -> float:
        """One pass of the MTP module over the batch's decoding sequences (module docstring)."""
        mb = type(batch)(batch.decode, batch.decode_ctx, ())
        rank = self._part(mb, self.layout.attn_dp)
        layer = next((x for s in self._stages for x in s if x.moe), None)
        if layer is None:  # a model without MoE layers: its first layer's block
            layer = next(iter(self._stages[0]))
        t = self._attention(rank, layer.mixer)
        t += self._gather_scatter(rank.tokens, self.layout.attn_tp, self._nodes["attn"])
        if layer.moe:
            comp, comm = self._moe(mb.tokens, rank.tokens, layer.k, layer.imbalance, False)
            t += comp + comm
        else:
            mlp, gs = self._dense_layer(mb.tokens)
            t += mlp + gs
        md = self.model
        head = self.cost.gemm(rank.sequences, md.vocab_size / self.layout.attn_tp, md.hidden_size)
        return t + head + self.cost.final_norm(md, rank.tokens)  # the module's norm before it
