"""Pipeline engine (SMIDT §3): stages cut at module boundaries, per-module TP/EP/DPMoE.

Stage ``s`` owns ranks ``[s·r, (s+1)·r)`` and a run of modules ``attn_l`` / ``moe_l``. Inside a
stage the activations of the current micro-batch are replicated on all ``r`` ranks. An
attention module with ``(tp, 1, d)`` splits the sequences over ``d`` DP groups, shards heads over
``tp``, all-reduces in TP and all-gathers over DP (the re-sharding SMIDT charges between
layouts). An MoE module with ``(tp, ep, d)`` splits tokens over ``d`` DPMoE replicas; inside a
replica each of the ``ep`` ranks applies its ``E/ep`` experts (TP-sharded ``tp`` ways) to the
rows routed to them, and one all-reduce over the replica's ``ep·tp`` ranks sums the partials.
Departure: with tokens replicated inside a replica, EP needs that all-reduce instead of an
all-to-all; the volume differs from SMIDT's cost model but the arithmetic is the same.
Between stages, rank ``j`` of stage ``s`` sends to rank ``j`` of stage ``s+1``, synchronously
(``send``) or asynchronously (``isend``; the next micro-batch starts before the send ends).
Dense ``mlp`` modules (DeepSeek's first dense layers) run a dense SwiGLU, TP over ``tp`` and
DP over ``dpmoe`` like an MoE module without experts. Each stage runs the shared layer loop
(:func:`moeplan.runtime.layers.decoder.forward`) over its modules with :class:`PipelineLayout`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from moeplan.errors import MoeplanError, require
from moeplan.runtime.comm.collectives import gather_split
from moeplan.runtime.comm.groups import RankGroups
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines.base import Engine, RunContext, with_layers
from moeplan.runtime.layers.decoder import forward
from moeplan.runtime.layers.model import LayerWeights, attention, rms
from moeplan.runtime.layers.moe import local_experts, moe_forward, shard_tp, swiglu
from moeplan.runtime.mesh import Mesh, StageModule
from moeplan.runtime.timeline import Timeline


def check_pipeline(mesh: Mesh, cfg: MoEConfig) -> None:
    """Modules must be attn_0, moe_0|mlp_0, attn_1, … in order; shapes must divide the model."""
    mods = [m for st in mesh.stages for m in st]
    got = [(m.kind, m.layer) for m in mods]
    expect = [(k, layer) for layer in range(len(mods) // 2) for k in ("attn", "ffn")]
    if [(k if k == "attn" else "ffn", layer) for k, layer in got] != expect:
        raise MoeplanError(
            f"plan.layout.stages modules ({got[:4]}...) must be attn_0, moe_0 (or "
            "mlp_0), attn_1, moe_1, ... in order"
        )
    for m in mods:
        if m.kind == "attn":
            require(
                m.ep == 1 and cfg.num_heads % m.tp == 0,
                f"attn module {m.layer} (tp={m.tp}, ep={m.ep}) needs ep=1 and tp dividing "
                f"num_heads ({cfg.num_heads})",
            )
        elif m.kind == "mlp":
            require(
                m.ep == 1 and cfg.dense_intermediate_size % m.tp == 0,
                f"mlp module {m.layer} (tp={m.tp}, ep={m.ep}) needs ep=1 and tp dividing "
                f"dense_intermediate_size ({cfg.dense_intermediate_size})",
            )
        else:
            require(
                cfg.num_experts % m.ep == 0 and cfg.moe_intermediate_size % m.tp == 0,
                f"moe module {m.layer} (tp={m.tp}, ep={m.ep}) must divide num_experts "
                f"({cfg.num_experts}) and moe_intermediate_size ({cfg.moe_intermediate_size})",
            )


def dense_layers(mesh: Mesh) -> tuple[int, ...]:
    """Layers the plan runs as dense MLP modules."""
    return tuple(m.layer for st in mesh.stages for m in st if m.kind == "mlp")


def _axis(m: StageModule, name: str) -> str:
    return f"tp{m.tp}.ep{m.ep}.d{m.dpmoe}.{name}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineLayout:
    """Per-module layouts of SMIDT: each module carries its own ``(tp, ep, dpmoe)``."""

    cfg: MoEConfig
    g: RankGroups

    def attn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        return attn_module(x, w, self.cfg, m, self.g)

    def ffn(self, x: torch.Tensor, w: LayerWeights, m: StageModule) -> torch.Tensor:
        return ffn_module(x, w, self.cfg, m, self.g)


def attn_module(
    x: torch.Tensor, w: LayerWeights, cfg: MoEConfig, m: StageModule, g: RankGroups
) -> torch.Tensor:
    """``x [B, S, H]`` replicated -> replicated, attention DP over ``dpmoe``, TP over ``tp``."""
    d, t = g.local_rank(_axis(m, "dpmoe")), g.local_rank(_axis(m, "tp"))
    parts = list(x.tensor_split(m.dpmoe))
    a = attention(rms(parts[d]), w.attn, cfg, tp=m.tp, rank=t)
    if m.tp > 1:
        dist.all_reduce(a, group=g.handles[_axis(m, "tp")])
    y = parts[d] + a
    if m.dpmoe == 1:
        return y
    return gather_split(y, [p.shape[0] for p in parts], g.handles[_axis(m, "dpmoe")])


def ffn_module(
    x: torch.Tensor, w: LayerWeights, cfg: MoEConfig, m: StageModule, g: RankGroups
) -> torch.Tensor:
    """``x [B, S, H]`` replicated -> replicated; DPMoE replicas, EP·TP inside a replica."""
    d, e, t = (g.local_rank(_axis(m, a)) for a in ("dpmoe", "ep", "tp"))
    flat = x.reshape(-1, x.shape[-1])
    parts = list(flat.tensor_split(m.dpmoe))
    if w.mlp is not None:  # dense MLP module: TP over the intermediate dim
        cols = [c.chunk(m.tp, dim=1)[t] for c in (w.mlp.w_gate, w.mlp.w_up)]
        y = swiglu(rms(parts[d]), cols[0], cols[1], w.mlp.w_down.chunk(m.tp, dim=0)[t])
    else:
        per = cfg.num_experts // m.ep
        lw = shard_tp(local_experts(w.experts, e * per, (e + 1) * per), m.tp, t)
        if e != 0:  # shared experts counted once per replica (on EP index 0)
            lw = replace(lw, shared_gate=None, shared_up=None, shared_down=None)
        y = moe_forward(rms(parts[d]), lw, cfg, expert_offset=e * per)
    if m.ep * m.tp > 1:
        dist.all_reduce(y, group=g.handles[_axis(m, "replica")])
    y = parts[d] + y
    if m.dpmoe > 1:
        y = gather_split(y, [p.shape[0] for p in parts], g.handles[_axis(m, "dpmoe")])
    return y.view_as(x)


def run_pp(
    x: torch.Tensor | None,
    layers: list[LayerWeights],
    cfg: MoEConfig,
    mesh: Mesh,
    g: RankGroups,
    tl: Timeline,
    *,
    micro_batches: int,
    shape: tuple[int, ...],
    async_send: bool,
) -> torch.Tensor | None:
    """Forward ``micro_batches`` micro-batches; stage 0 gets ``x``; the last stage returns."""
    rank = g.rank
    s, r = mesh.stage_of(rank), mesh.stage_size
    chunks = list(x.tensor_split(micro_batches)) if x is not None else []
    sizes = [len(c) for c in torch.arange(shape[0]).tensor_split(micro_batches)]
    outs: list[torch.Tensor] = []
    sends: list[Any] = []
    for i in range(micro_batches):
        if s == 0:
            h = chunks[i]
        else:
            h = torch.empty(sizes[i], *shape[1:], device=layers[0].attn.wq.device)
            with tl.span(f"recv{i}", "recv"):
                dist.recv(h, rank - r, tag=i)
        h = forward(h, layers, PipelineLayout(cfg=cfg, g=g), mesh.stages[s], tl, f".mb{i}")
        if s == mesh.pp - 1:
            outs.append(h)
        elif async_send:
            with tl.span(f"isend{i} (posted)", "send"):
                sends.append(dist.isend(h, rank + r, tag=i))
        else:
            with tl.span(f"send{i}", "send"):
                dist.send(h, rank + r, tag=i)
    for w in sends:
        w.wait()
    return torch.cat(outs) if outs else None


@dataclass(frozen=True, kw_only=True)
class PipelineEngine(Engine):
    """Stage 0 takes the whole batch; the last stage's ranks return it."""

    def local_input(self, x: torch.Tensor, rank: int) -> torch.Tensor | None:
        return x if self.mesh.stage_of(rank) == 0 else None

    def reference_output(self, full: torch.Tensor, rank: int) -> torch.Tensor:
        return full

    def run(
        self, x: torch.Tensor | None, layers: list[LayerWeights], ctx: RunContext
    ) -> torch.Tensor | None:
        assert ctx.groups is not None
        d, opts = self.mesh.details, ctx.opts
        micro = opts.micro_batches or d.get("microbatches") or self.mesh.pp
        async_send = opts.async_send
        if async_send is None:
            async_send = bool(d.get("async_pp", True))
        return run_pp(
            x,
            layers,
            self.cfg,
            self.mesh,
            ctx.groups,
            ctx.tl,
            micro_batches=min(int(micro), ctx.shape[0]),
            shape=ctx.shape,
            async_send=async_send,
        )


def build(mesh: Mesh, cfg: MoEConfig) -> PipelineEngine:
    """Pipeline engine; the model gets one layer per attn/ffn module pair, ``mlp`` ones dense."""
    cfg = with_layers(cfg, sum(len(s) for s in mesh.stages) // 2, dense_layers(mesh))
    check_pipeline(mesh, cfg)
    return PipelineEngine(mesh=mesh, cfg=cfg)
