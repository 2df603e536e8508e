"""The per-kind layer prices of :class:`~moeplan.cost.CostModel` (its base class): a layer's
mixer priced by its kind from the model's per-layer description (:mod:`.mixers`), and which
layers share a mixer (priced once)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moeplan.cost.mixers import MIXER_KINDS, price_mixer
from moeplan.specs import ModelSpec

if TYPE_CHECKING:
    from moeplan.cost.kerneldb import KernelDB, Prediction
    from moeplan.specs.quant import ModuleQuant


class MixerLayers:
    """Methods of :class:`~moeplan.cost.CostModel` that price a layer by its mixer kind (they
    use its kernel database, engine, device, ``gemm`` and provenance ``_note``)."""

    _kdb: KernelDB | None
    engine: str | None
    _device: Any
    _groups: dict[int, tuple[object, list[tuple[int, int]] | None]]

    if TYPE_CHECKING:  # CostModel's own

        def gemm(
            self, m: float, n: float, k: float, weight: ModuleQuant | None = None
        ) -> float: ...

        def _note(self, op: str, p: Prediction) -> None: ...

    def mixer_layer(
        self,
        model: ModelSpec,
        layer: int,
        num_seqs: int,
        q_len: int,
        ctx_len: int,
        tp: int = 1,
    ) -> float | None:
        """Layer ``layer``'s whole mixer block on one TP rank when its kind has its own
        measured tables (:mod:`.mixers`: DSA / CSA / HCA / MSA modules, GDN / KDA / Mamba-2
        kernels + projections), 0 for a layer without a mixer, else ``None`` (the attention
        paths price it)."""
        m = model.layer_specs[layer].mixer
        if m.kind == "none":  # a block without a mixer (Nemotron-H's MoE / MLP-only layers)
            return 0.0
        if self._kdb is None or self.engine is None or m.kind not in MIXER_KINDS:
            return None
        if num_seqs <= 0 or q_len <= 0:
            return 0.0
        w = model.quant.attention
        total, preds = price_mixer(
            self._kdb, self._device, self.engine, m, model.hidden_size,
            w.format.kernel_dtype, (num_seqs, q_len, max(ctx_len, q_len), tp),
            lambda a, b, c: self.gemm(a, b, c, w),
        )  # fmt: skip
        for op, p in preds:
            self._note(op, p)
        return total

    def mixes_kinds(self, model: ModelSpec) -> bool:
        """Whether some layer of ``model`` is priced by its kind (:meth:`mixer_layer`, with an
        engine's tables): then :meth:`attention_layer` without a layer is the mean over the
        layers. Without an engine the profile's model prices every layer as before."""
        return self._kdb is not None and self._mixer_groups(model) is not None

    def _mixer_groups(self, model: ModelSpec) -> list[tuple[int, int]] | None:
        """(first layer, layer count) per distinct mixer when any layer's kind is priced by
        :meth:`mixer_layer`, else ``None`` (memoised per layer description)."""
        specs = model.layer_specs
        hit = self._groups.get(id(specs))
        if hit is None or hit[0] is not specs:
            firsts: dict[object, list[int]] = {}
            for i, x in enumerate(specs):
                firsts.setdefault(x.mixer, [i, 0])[1] += 1
            priced = any(m.kind in (*MIXER_KINDS, "none") for m in firsts)  # type: ignore[attr-defined]
            hit = (specs, [(v[0], v[1]) for v in firsts.values()] if priced else None)
            self._groups[id(specs)] = hit
        return hit[1]  # type: ignore[return-value]
