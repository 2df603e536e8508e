"""The per-kind layer prices of :class:`~moeplan.cost.CostModel` (its base class): a layer's
mixer priced by its kind from the model's per-layer description (:mod:`.mixers`), and which
layers share a mixer (priced once)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from moeplan.cost.kerneldb.linear_features import mhc_features
from moeplan.cost.mixers import MHC_SITES, TABLE_MIXER_KINDS, price_mhc, price_mixer
from moeplan.specs import ModelSpec

if TYPE_CHECKING:
    from moeplan.cost.kerneldb import KernelDB, Prediction
    from moeplan.specs.layers import Mixer
    from moeplan.specs.quant import ModuleQuant


#: mixer kinds the uniform attention path prices (with the layer's own heads, :meth:`layer_model`)
UNIFORM_ATTENTION_KINDS = ("mha", "swa", "chunked")


def _dims(m: Mixer) -> tuple[int, int, int]:
    return m.num_heads, max(1, m.num_kv_heads), m.head_dim


def attention_shapes(model: ModelSpec) -> int:
    """Distinct (heads, K/V heads, head dim) among the model's attention layers."""
    return len(
        {_dims(x.mixer) for x in model.layer_specs if x.mixer.kind in UNIFORM_ATTENTION_KINDS}
    )


class MixerLayers:
    """Methods of :class:`~moeplan.cost.CostModel` that price a layer by its mixer kind (they
    use its kernel database, engine, device, ``gemm`` and provenance ``_note``)."""

    _kdb: KernelDB | None
    engine: str | None
    _device: Any
    _groups: dict[int, tuple[object, list[tuple[int, int]] | None]]
    _roof: Any
    _views: dict[tuple[int, int], tuple[ModelSpec, ModelSpec]]

    if TYPE_CHECKING:  # CostModel's own

        def gemm(
            self, m: float, n: float, k: float, weight: ModuleQuant | None = None
        ) -> float: ...

        def _note(self, op: str, p: Prediction) -> float: ...

    def mixer_layer(
        self,
        model: ModelSpec,
        layer: int,
        num_seqs: int,
        q_len: int,
        ctx_len: int,
        tp: int = 1,
        kv: str | None = None,
    ) -> float | None:
        """Layer ``layer``'s whole mixer block on one TP rank when its kind has its own
        measured tables (:mod:`.mixers`: DSA / CSA / HCA / MSA modules, GDN / KDA / Mamba-2
        kernels + projections), 0 for a layer without a mixer, else ``None`` (the attention
        paths price it). ``kv``: the KV dtype the deployment stores (``bf16`` / ``fp8``;
        ``None``: the layer's own), which picks the module table's kernel rows."""
        m = model.layer_specs[layer].mixer
        if m.kind == "none":  # a block without a mixer (Nemotron-H's MoE / MLP-only layers)
            return 0.0
        if self._kdb is None or self.engine is None or m.kind not in TABLE_MIXER_KINDS:
            return None
        if num_seqs <= 0 or q_len <= 0:
            return 0.0
        w = model.quant.attention
        total, preds = price_mixer(
            self._kdb, self._device, self.engine, m, model.hidden_size,
            w.format.kernel_dtype, (num_seqs, q_len, max(ctx_len, q_len), tp),
            lambda a, b, c: self.gemm(a, b, c, w), kv,
        )  # fmt: skip
        return self._charged(total, preds)

    def _charged(self, total: float, preds: list[tuple[str, Prediction]]) -> float:
        """``total`` (the sum of ``preds``' seconds and analytic terms) with each prediction
        noted, its seconds replaced by what :meth:`_note` charges (the same outside an
        accounting copy, :mod:`moeplan.cost.price_sources`)."""
        for op, p in preds:
            charged = self._note(op, p)
            if charged != p.seconds:
                total += charged - p.seconds
        return total

    def hyper_connections(self, model: ModelSpec, tokens: int, layer: int | None = None) -> float:
        """mHC of decoder layer ``layer`` (``None``: the mean over the layers) for ``tokens``
        tokens of one rank — ``pre`` + ``post`` at its mixer and FFN sites
        (:func:`~moeplan.cost.mixers.price_mhc`); 0 for layers without hyper-connections.
        Without an engine's tables: the roofline of the kernels' FLOPs and bytes
        (:func:`~moeplan.cost.kerneldb.linear_features.mhc_features`) at the profile's GEMM rate."""
        specs = model.layer_specs
        if tokens <= 0 or not any(x.hc_mult for x in specs):
            return 0.0
        if layer is None:
            return sum(self.hyper_connections(model, tokens, i) for i in range(len(specs))) / len(
                specs
            )
        x = specs[layer]
        if x.hc_mult == 0:
            return 0.0
        if self._kdb is not None and self.engine is not None:
            total, preds = price_mhc(
                self._kdb, self._device, self.engine, x, model.hidden_size, tokens
            )
            return self._charged(total, preds)
        cols = dict(num_tokens=np.full(2, tokens), hidden_size=np.full(2, model.hidden_size),
                    hc_mult=np.full(2, x.hc_mult), num_sites=np.full(2, MHC_SITES),
                    sinkhorn_iters=np.full(2, x.hc_sinkhorn_iters),
                    mhc_op=np.array(["pre", "post"]))  # fmt: skip
        f = mhc_features(cols)
        roof = self._roof
        return float(np.sum(roof.alpha + np.maximum(f.flops / roof.flops, f.nbytes / roof.bw)))

    def layer_model(self, model: ModelSpec, layer: int | None) -> ModelSpec:
        """``model`` as the uniform attention path sees layer ``layer``: its own query / K/V
        heads and head dim where that attention layer's differ from the model's uniform
        fields (Gemma-4's sliding layers: 8 K/V heads of 256 vs the global layers' 2 of 512;
        MiMo-V2-Flash's sliding layers: 8 K/V heads vs 4). ``model`` itself otherwise."""
        if layer is None:
            return model
        m = model.layer_specs[layer].mixer
        if m.kind not in UNIFORM_ATTENTION_KINDS or _dims(m) == (
            model.num_attention_heads,
            model.num_kv_heads,
            model.head_dim,
        ):
            return model
        key = (id(model), layer)
        hit = self._views.get(key)
        if hit is None or hit[0] is not model:
            heads, kv, hd = _dims(m)
            view = replace(model, num_attention_heads=heads, num_kv_heads=kv, head_dim=hd)
            hit = self._views[key] = (model, view)
        return hit[1]

    def mixes_kinds(self, model: ModelSpec) -> bool:
        """Whether some layer of ``model`` is priced by its kind (:meth:`mixer_layer`, with an
        engine's tables) or its attention layers differ in heads / head dim
        (:meth:`layer_model`): then :meth:`attention_layer` without a layer is the mean over
        the layers. Otherwise every layer is priced as the uniform attention."""
        groups = self._mixer_groups(model)
        return groups is not None and (self._kdb is not None or attention_shapes(model) > 1)

    def _mixer_groups(self, model: ModelSpec) -> list[tuple[int, int]] | None:
        """(first layer, layer count) per distinct mixer when any layer's kind is priced by
        :meth:`mixer_layer` or the attention layers' shapes differ, else ``None`` (memoised
        per layer description)."""
        specs = model.layer_specs
        hit = self._groups.get(id(specs))
        if hit is None or hit[0] is not specs:
            firsts: dict[object, list[int]] = {}
            for i, x in enumerate(specs):
                firsts.setdefault(x.mixer, [i, 0])[1] += 1
            priced = any(m.kind in (*TABLE_MIXER_KINDS, "none") for m in firsts)  # type: ignore[attr-defined]
            priced = priced or attention_shapes(model) > 1
            hit = (specs, [(v[0], v[1]) for v in firsts.values()] if priced else None)
            self._groups[id(specs)] = hit
        return hit[1]  # type: ignore[return-value]
