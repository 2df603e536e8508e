"""The one decoder layer loop; every parallel layout is applied to it from outside.

Like gpt-fast (one model file, ``apply_tp(model)`` from outside), the model is a list of
*modules* — ``attn_l`` then ``moe_l`` (or ``mlp_l`` for DeepSeek's first dense layers) for each
layer ``l``, SMIDT's module vocabulary (:class:`~moeplan.runtime.mesh.StageModule`) — and
:func:`forward` walks them in order. What a module does on this rank is the :class:`Layout`'s
business: :class:`Local` is the single-process reference; the engines
(:mod:`moeplan.runtime.engines`) supply layouts with TP, EP, DP, re-sharding and their
collectives. A pipeline stage runs the same loop over its slice of modules; the DEP engine
runs one loop per micro-batch and interleaves them (:func:`steps`).

Both module kinds include their residual: ``attn`` returns ``x + attn(rms(x))`` and ``ffn``
returns ``h + moe(rms(h))`` (or the dense MLP), in the layout's own token sharding. What passes
between modules is a tensor for every layout but DEP's, whose ``ffn`` returns a micro-batch
whose expert outputs are still in flight (its next ``attn`` waits for them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from moeplan.runtime.config import MoEConfig
from moeplan.runtime.layers.model import LayerWeights, attention, rms
from moeplan.runtime.layers.moe import moe_forward, swiglu
from moeplan.runtime.mesh import StageModule
from moeplan.runtime.timeline import Timeline

A = TypeVar("A")  # what passes between modules: activations (a tensor, except on DEP)


class Layout(Protocol[A]):
    """How one rank runs each kind of module (residual included)."""

    def attn(self, x: A, w: LayerWeights, m: StageModule) -> A: ...

    def ffn(self, x: A, w: LayerWeights, m: StageModule) -> A: ...


def decoder_modules(layers: list[LayerWeights]) -> tuple[StageModule, ...]:
    """``attn_0, moe_0|mlp_0, attn_1, …`` for ``layers`` (no parallel degrees: all 1)."""
    mods = []
    for i, w in enumerate(layers):
        mods.append(StageModule(kind="attn", layer=i, tp=1, ep=1, dpmoe=1))
        kind = "mlp" if w.mlp is not None else "moe"
        mods.append(StageModule(kind=kind, layer=i, tp=1, ep=1, dpmoe=1))
    return tuple(mods)


def steps(
    x: A,
    layers: list[LayerWeights],
    layout: Layout[A],
    modules: tuple[StageModule, ...],
    tl: Timeline | None = None,
    suffix: str = "",
) -> Iterator[A]:
    """The layer loop, one module at a time: yields the activations after each module (a span
    ``{kind}{layer}{suffix}`` of ``tl`` each, when given). :func:`forward` runs it to the end;
    the DEP engine advances one loop per micro-batch in FinDEP's interleaved order."""
    for m in modules:
        with tl.span(f"{m.kind}{m.layer}{suffix}") if tl is not None else nullcontext():
            fn = layout.attn if m.kind == "attn" else layout.ffn
            x = fn(x, layers[m.layer], m)
        yield x


def forward(
    x: torch.Tensor,
    layers: list[LayerWeights],
    layout: Layout[torch.Tensor],
    modules: tuple[StageModule, ...],
    tl: Timeline | None = None,
    suffix: str = "",
) -> torch.Tensor:
    """Run ``modules`` in order on ``x`` (see :func:`steps`)."""
    out = x
    for out in steps(x, layers, layout, modules, tl, suffix):  # noqa: B007 (keep the last)
        pass
    return out


def local_ffn(x: torch.Tensor, w: LayerWeights, cfg: MoEConfig) -> torch.Tensor:
    """Dense MLP or MoE block of ``x [..., H]`` without residual, on one device."""
    flat = rms(x.reshape(-1, x.shape[-1]))
    if w.mlp is not None:
        return swiglu(flat, w.mlp.w_gate, w.mlp.w_up, w.mlp.w_down).view_as(x)
    return moe_forward(flat, w.experts, cfg).view_as(x)


@dataclass(frozen=True, kw_only=True, slots=True)
class Local:
    """Single-process layout: every head, every expert, every token on this device."""

    cfg: MoEConfig

    def attn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        return x + attention(rms(x), w.attn, self.cfg)

    def ffn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        return x + local_ffn(x, w, self.cfg)


def reference_forward(x: torch.Tensor, layers: list[LayerWeights], cfg: MoEConfig) -> torch.Tensor:
    """The single-process reference every engine is checked against: ``x [B, S, H]``."""
    return forward(x, layers, Local(cfg=cfg), decoder_modules(layers))
