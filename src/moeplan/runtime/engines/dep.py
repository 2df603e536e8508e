"""DEP engine (FinDEP §2–3): attention ranks and expert ranks apart, fine-grained pipelining.

Ranks ``0..ag-1`` (AG) hold ``r1`` micro-batches of ``ma`` sequences each, attention weights and
the shared experts; ranks ``ag..`` (EG) hold ``E/eg`` consecutive routed experts. Per layer ``t``
and micro-batch ``i`` the AG runs ``A(t,i)`` (attention + router) and ``S(t,i)`` (shared
expert) in the plan's ``order`` (ASAS: A1 S1 A2 S2 …; AASS: A1 A2 … S1 S2 …). The tokens of a
micro-batch are cut into ``r2`` chunks; chunk ``j`` goes out as soon as ``A(t,i)`` ends
(``A2E(t,i,j)``, non-blocking ``isend`` of per-expert counts then rows to each EG rank), the EG
computes ``E(t,i,j)`` and returns it (``E2A(t,i,j)``, non-blocking). ``A(t+1,i)`` waits for all
``E2A(t,i,·)`` and ``S(t,i)`` — the dependency rules of FinDEP Eq. 5 — so while the EG works
on micro-batch ``i`` the AG computes ``A``/``S`` of the others. Departure: the paper's ``me``
(tokens per expert per chunk) is an outcome here, not an input: chunks are equal token ranges.
The AG runs the shared layer loop (:func:`moeplan.runtime.layers.decoder.steps`) once per
micro-batch with :class:`DepLayout` and advances the loops in the schedule's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from moeplan.errors import require
from moeplan.runtime.comm.groups import RankGroups
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines import dep_predict
from moeplan.runtime.engines.base import Engine, RunContext
from moeplan.runtime.engines.dep_params import DepParams, ag_schedule, expert_bounds
from moeplan.runtime.layers.decoder import Local, decoder_modules, steps
from moeplan.runtime.layers.model import LayerWeights, rms
from moeplan.runtime.layers.moe import (
    MoEWeights,
    experts_by_id,
    local_experts,
    route,
    shared_out,
)
from moeplan.runtime.layers.permute import Permutation, combine, gather_rows, permute
from moeplan.runtime.mesh import Mesh, StageModule
from moeplan.runtime.timeline import Timeline

_ATTN = StageModule(kind="attn", layer=-1, tp=1, ep=1, dpmoe=1)  # AG attention: whole heads


@dataclass
class _MicroBatch:
    """AG state of one micro-batch in the current layer."""

    h: torch.Tensor
    u: torch.Tensor
    perms: list[Permutation] = field(default_factory=list)
    recvs: list[list[tuple[Any, torch.Tensor]]] = field(default_factory=list)
    sends: list[Any] = field(default_factory=list)
    shared: torch.Tensor | None = None


AGState = torch.Tensor | _MicroBatch  # what passes between modules on an AG rank
#: Attention of a micro-batch with its residual, ``(x, layer weights, layer) -> h``; None: the
#: shared layer loop's own (a decode step attends over a KV cache: :mod:`.dep_decode`).
Attend = Callable[[torch.Tensor, LayerWeights, int], torch.Tensor]


def _send_chunk(
    u: torch.Tensor, perm: Permutation, p: DepParams, tag: tuple[int, int, int], ag_rank: int
) -> tuple[list[Any], list[tuple[Any, torch.Tensor]]]:
    """A2E of one chunk: counts then rows to every EG rank; post the E2A receives."""
    rows = gather_rows(u, perm)
    b = expert_bounds(perm.counts.numel(), p.eg)
    counts = [perm.counts[b[k] : b[k + 1]] for k in range(p.eg)]
    sizes = [int(c.sum()) for c in counts]
    sends, recvs = [], []
    for k, part in enumerate(torch.split(rows, sizes)):
        dst = p.ag + k
        sends.append(dist.isend(counts[k].contiguous(), dst, tag=p.tag(*tag, 0)))
        if sizes[k]:
            sends.append(dist.isend(part.contiguous(), dst, tag=p.tag(*tag, 1)))
            buf = rows.new_empty(sizes[k], rows.shape[1])
            recvs.append((dist.irecv(buf, dst, tag=p.tag(*tag, 2)), buf))
    return sends, recvs


def _attention_task(
    x: torch.Tensor,
    w: LayerWeights,
    cfg: MoEConfig,
    p: DepParams,
    t: int,
    i: int,
    rank: int,
    tl: Timeline,
    attend: Attend | None = None,
) -> _MicroBatch:
    with tl.span(f"A{t}.{i}"):
        h = Local(cfg=cfg).attn(x, w, _ATTN) if attend is None else attend(x, w, t)
        mb = _MicroBatch(h=h, u=rms(h.reshape(-1, x.shape[-1])))
        r = route(mb.u, w.experts, cfg)
    for j, (ids, wts, u) in enumerate(
        zip(
            r.ids.tensor_split(p.r2),
            r.weights.tensor_split(p.r2),
            mb.u.tensor_split(p.r2),
            strict=True,
        )
    ):
        perm = permute(ids, wts, cfg.num_experts)
        with tl.span(f"A2E{t}.{i}.{j}", "send"):
            sends, recvs = _send_chunk(u, perm, p, (t, i, j), rank)
        mb.perms.append(perm)
        mb.sends += sends
        mb.recvs.append(recvs)
    return mb


def _finish(mb: _MicroBatch, p: DepParams, name: str, tl: Timeline) -> torch.Tensor:
    """Wait for every E2A of the micro-batch and combine: ``h + routed + shared``."""
    assert mb.shared is not None, "S(t,i) runs before A(t+1,i)"
    outs = []
    with tl.span(f"E2A{name}", "recv"):
        for perm, recvs in zip(mb.perms, mb.recvs, strict=True):
            for work, _ in recvs:
                work.wait()
            y = torch.cat([b for _, b in recvs]) if recvs else mb.u.new_zeros(0, mb.u.shape[1])
            outs.append(combine(y, perm))
        for s in mb.sends:
            s.wait()
    return mb.h + (torch.cat(outs) + mb.shared).view_as(mb.h)


@dataclass(frozen=True, kw_only=True, slots=True)
class DepLayout:
    """AG side of micro-batch ``i``: ``attn`` = wait for the previous layer's E2A and combine
    (if any), then ``A(t,i)`` (attention + router + A2E sends); ``ffn`` = ``S(t,i)``."""

    cfg: MoEConfig
    p: DepParams
    i: int
    rank: int
    tl: Timeline
    attend: Attend | None = None

    def attn(self, x: AGState, w: LayerWeights, m: StageModule) -> AGState:
        if isinstance(x, _MicroBatch):
            x = _finish(x, self.p, f"{m.layer - 1}.{self.i}", self.tl)
        return _attention_task(
            x, w, self.cfg, self.p, m.layer, self.i, self.rank, self.tl, self.attend
        )

    def ffn(self, mb: AGState, w: LayerWeights, m: StageModule) -> AGState:
        assert isinstance(mb, _MicroBatch), "ffn follows attn"
        with self.tl.span(f"S{m.layer}.{self.i}"):
            mb.shared = shared_out(mb.u, w.experts)
        return mb


def run_dep_attention(
    x: torch.Tensor,
    layers: list[LayerWeights],
    cfg: MoEConfig,
    p: DepParams,
    rank: int,
    tl: Timeline,
    attend: Callable[[int], Attend] | None = None,
) -> torch.Tensor:
    """AG rank: ``x [r1*ma, S, H]`` -> output after all layers. One shared layer loop per
    micro-batch (:func:`~moeplan.runtime.layers.decoder.steps`), advanced in the plan's order:
    each ``A`` of the schedule is the next attention module, each ``S`` the next ffn module.
    ``attend(i)``: micro-batch ``i``'s attention instead of the loop's (a decode step's)."""
    xs = list(x.split(p.ma))
    require(len(xs) == p.r1, f"batch ({x.shape[0]}) must equal r1*ma ({p.r1}*{p.ma})")
    modules = decoder_modules(layers)
    loops: list[Iterator[AGState]] = [
        steps(
            xs[i],
            layers,
            DepLayout(
                cfg=cfg, p=p, i=i, rank=rank, tl=tl, attend=None if attend is None else attend(i)
            ),
            modules,
        )
        for i in range(p.r1)
    ]
    last: dict[int, AGState] = {}
    for _ in layers:
        for _, i in ag_schedule(p.order, p.r1):
            last[i] = next(loops[i])
    outs = []
    for i in range(p.r1):  # the last layer's E2A, in micro-batch order
        mb = last[i]
        assert isinstance(mb, _MicroBatch), "every loop ends after an ffn module"
        outs.append(_finish(mb, p, f"{len(layers) - 1}.{i}", tl))
    return torch.cat(outs)


@dataclass
class _Incoming:
    """EG side of one chunk: posted receives of the counts, then of the rows."""

    tag: tuple[int, int, int]
    counts: list[tuple[Any, torch.Tensor]]
    rows: list[tuple[Any, torch.Tensor]] | None = None

    @property
    def received(self) -> list[tuple[Any, torch.Tensor]]:
        """The posted row receives (internal invariant: after :meth:`post_rows`)."""
        assert self.rows is not None, "post_rows() first"
        return self.rows

    def counts_arrived(self) -> bool:
        return all(w.is_completed() for w, _ in self.counts)

    def post_rows(self, p: DepParams, hidden: int) -> None:
        """Post the row receives (sizes from the counts). gloo moves data only once the
        receive is posted, so posting early is what lets A2E overlap the expert compute."""
        if self.rows is None:
            for w, _ in self.counts:
                w.wait()
            self.rows = []
            for a, (_, c) in enumerate(self.counts):
                buf = c.new_empty(int(c.sum()), hidden, dtype=torch.float32)
                work = dist.irecv(buf, a, tag=p.tag(*self.tag, 1)) if buf.shape[0] else None
                self.rows.append((work, buf))


def _post_counts(p: DepParams, tag: tuple[int, int, int], per: int, dev: torch.device) -> _Incoming:
    counts = [torch.empty(per, dtype=torch.long, device=dev) for _ in range(p.ag)]
    return _Incoming(
        tag=tag, counts=[(dist.irecv(c, a, tag=p.tag(*tag, 0)), c) for a, c in enumerate(counts)]
    )


def _expert_compute(inc: _Incoming, w_local: MoEWeights, p: DepParams, tl: Timeline) -> list[Any]:
    """E(t,i,j) on the received rows, then non-blocking E2A back to every AG rank."""
    per, dev = w_local.w_gate.shape[0], w_local.w_gate.device
    with tl.span("E{}.{}.{}".format(*inc.tag)):
        rows = torch.cat([b for _, b in inc.received])
        ids = torch.cat(
            [torch.repeat_interleave(torch.arange(per, device=dev), c) for _, c in inc.counts]
        )
        y = experts_by_id(rows, ids, w_local)
    sends = []
    for a, part in enumerate(torch.split(y, [b.shape[0] for _, b in inc.received])):
        if part.shape[0]:
            sends.append(dist.isend(part.contiguous(), a, tag=p.tag(*inc.tag, 2)))
    return sends


def run_dep_expert(
    layers: list[LayerWeights], cfg: MoEConfig, p: DepParams, rank: int, tl: Timeline
) -> None:
    """EG rank: serve every (layer, micro-batch, chunk) in order; the next chunk's receives are
    posted before computing the current one (A2E(j+1) overlaps E(j))."""
    k = rank - p.ag
    lo, hi = expert_bounds(cfg.num_experts, p.eg)[k : k + 2]
    per = hi - lo
    dev = layers[0].attn.wq.device
    tags = [(t, i, j) for t in range(len(layers)) for i in range(p.r1) for j in range(p.r2)]
    nxt = _post_counts(p, tags[0], per, dev)
    sends: list[Any] = []
    for n, tag in enumerate(tags):
        inc = nxt
        with tl.span("A2E{}.{}.{}".format(*tag), "recv"):
            inc.post_rows(p, cfg.hidden_size)
            for w, _ in inc.received:
                if w is not None:
                    w.wait()
        if n + 1 < len(tags):
            nxt = _post_counts(p, tags[n + 1], per, dev)
            if nxt.counts_arrived():
                nxt.post_rows(p, cfg.hidden_size)
        w = layers[tag[0]].experts
        sends += _expert_compute(inc, local_experts(w, lo, hi), p, tl)
    for s in sends:
        s.wait()


def check_dep(p: DepParams, cfg: MoEConfig, seq: int) -> None:
    require(
        p.eg <= cfg.num_experts,
        f"plan.layout.eg ({p.eg}) must be <= model.num_experts ({cfg.num_experts})",
    )
    require(
        p.r2 <= p.ma * seq,
        f"plan.details.r2 ({p.r2}) must be <= tokens per micro-batch ({p.ma * seq})",
    )


@dataclass(frozen=True, kw_only=True)
class DepEngine(Engine):
    """AG ranks take ``r1*ma`` sequences each; EG ranks take none and return nothing."""

    params: DepParams

    def global_batch(self, seq: int, tokens: int) -> int:
        check_dep(self.params, self.cfg, seq)
        return self.params.ag * self.params.r1 * self.params.ma

    def groups(self, rank: int) -> RankGroups | None:
        return None  # point-to-point on the world group only

    def local_input(self, x: torch.Tensor, rank: int) -> torch.Tensor | None:
        return x.tensor_split(self.mesh.ag)[rank] if rank < self.mesh.ag else None

    def run(
        self, x: torch.Tensor | None, layers: list[LayerWeights], ctx: RunContext
    ) -> torch.Tensor | None:
        if ctx.rank < self.mesh.ag:
            assert x is not None
            return run_dep_attention(x, layers, self.cfg, self.params, ctx.rank, ctx.tl)
        run_dep_expert(layers, self.cfg, self.params, ctx.rank, ctx.tl)
        return None

    def calibrate(self, ctx: RunContext, device: str) -> float | None:
        if not ctx.opts.trace:
            return None
        p = self.params
        rows = dep_predict.chunk_rows(p, ctx.opts.seq_len, self.cfg.top_k)
        return dep_predict.calibrate_link(p, rows, self.cfg.hidden_size, ctx.rank, device=device)

    def predicted_trace(
        self, events: list[dict[str, Any]], link_s: float | None, measured_s: float, seq: int
    ) -> dict[str, Any] | None:
        if link_s is None:
            return None
        return dep_predict.predicted_trace(
            events, self.params, self.cfg.num_layers, seq, link_s, measured_s
        )


def build(mesh: Mesh, cfg: MoEConfig) -> DepEngine:
    return DepEngine(mesh=mesh, cfg=cfg, params=DepParams.from_mesh(mesh))
