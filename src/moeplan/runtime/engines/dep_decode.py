"""DEP decode step: one new token per sequence through FinDEP's AG/EG schedule.

An attention–FFN disaggregated decode instance (MegaScale-Infer, Step-3; moeplan's ``afd``
family) runs each decode step as FinDEP's task graph: the AG ranks hold ``r1`` micro-batches
of ``ma`` sequences and their KV caches, attend the new token over the cache, route, and send
``r2`` chunks to the EG ranks (:func:`moeplan.runtime.engines.dep.run_dep_attention` with a
cached attention, :func:`moeplan.runtime.engines.dep.run_dep_expert` unchanged).

- :func:`prefill_cache`: per layer the keys and values of a prompt, from the single-process
  layer loop (what a prefill instance computes and transfers to the decode instance).
- :func:`cached_attention`: the new token's causal attention over ``[cache; itself]`` — the
  last row of the runtime's full causal attention.
- :func:`reference_decode`: the single-process reference, the last position of the full
  forward of prompt + new token.

Departure: the runtime's attention is plain MHA without positions (docs/RUNTIME.md), so the
cache holds full keys/values, not MLA's latent; the cache is not paged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines.dep import Attend, run_dep_attention
from moeplan.runtime.engines.dep_params import DepParams
from moeplan.runtime.layers.decoder import Local, decoder_modules, forward, reference_forward
from moeplan.runtime.layers.model import LayerWeights, rms
from moeplan.runtime.mesh import StageModule
from moeplan.runtime.timeline import Timeline

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values [B, heads, S, d]


def _heads(u: torch.Tensor, m: torch.Tensor, cfg: MoEConfig) -> torch.Tensor:
    b, s, h = u.shape
    return (u @ m).view(b, s, cfg.num_heads, h // cfg.num_heads).transpose(1, 2)


@dataclass
class _Recorder:
    """Single-process layout that also keeps every layer's keys and values."""

    cfg: MoEConfig
    kv: list[KV] = field(default_factory=list)

    def attn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        u = rms(x)
        self.kv.append((_heads(u, w.attn.wk, self.cfg), _heads(u, w.attn.wv, self.cfg)))
        return Local(cfg=self.cfg).attn(x, w, m)

    def ffn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        return Local(cfg=self.cfg).ffn(x, w, m)


def prefill_cache(prompt: torch.Tensor, layers: list[LayerWeights], cfg: MoEConfig) -> list[KV]:
    """Per layer ``(K, V)`` of ``prompt [B, P, H]`` (module docstring)."""
    rec = _Recorder(cfg=cfg)
    forward(prompt, layers, rec, decoder_modules(layers))
    return rec.kv


def cached_attention(x: torch.Tensor, w: LayerWeights, cfg: MoEConfig, cache: KV) -> torch.Tensor:
    """``x [b, 1, H]`` plus its attention over ``cache`` and itself (residual included)."""
    u = rms(x)
    b, _, h = x.shape
    d = h // cfg.num_heads
    q, k, v = (_heads(u, m, cfg) for m in (w.attn.wq, w.attn.wk, w.attn.wv))
    keys, vals = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    ctx = torch.softmax((q @ keys.transpose(-1, -2)) / d**0.5, dim=-1) @ vals
    return x + ctx.transpose(1, 2).reshape(b, 1, h) @ w.attn.wo


def decode_attend(cache: list[KV], cfg: MoEConfig, ma: int) -> Callable[[int], Attend]:
    """Micro-batch ``i``'s cached attention: rows ``i*ma .. (i+1)*ma`` of every layer's cache."""

    def for_micro_batch(i: int) -> Attend:
        rows = slice(i * ma, (i + 1) * ma)

        def attend(x: torch.Tensor, w: LayerWeights, t: int) -> torch.Tensor:
            return cached_attention(x, w, cfg, (cache[t][0][rows], cache[t][1][rows]))

        return attend

    return for_micro_batch


def run_dep_decode(
    new: torch.Tensor,
    cache: list[KV],
    layers: list[LayerWeights],
    cfg: MoEConfig,
    p: DepParams,
    rank: int,
    tl: Timeline,
) -> torch.Tensor:
    """AG rank: one decode step of its ``r1*ma`` sequences (``new [r1*ma, 1, H]``, ``cache``
    their prompts' keys/values per layer) -> the new tokens' hidden states after all layers.
    The EG ranks run :func:`moeplan.runtime.engines.dep.run_dep_expert` meanwhile."""
    return run_dep_attention(new, layers, cfg, p, rank, tl, attend=decode_attend(cache, cfg, p.ma))


def reference_decode(
    prompt: torch.Tensor, new: torch.Tensor, layers: list[LayerWeights], cfg: MoEConfig
) -> torch.Tensor:
    """Single-process reference: the last position of the full forward of prompt + token."""
    return reference_forward(torch.cat([prompt, new], dim=1), layers, cfg)[:, -1:]
