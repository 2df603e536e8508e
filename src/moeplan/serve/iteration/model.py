"""Iteration time: one engine step of a batch mixing prefill chunks and decode tokens.

Built only from :class:`moeplan.cost.CostModel`'s public methods (``attention_layer``,
``attention_core``, ``expert_ffn``, ``shared_expert``, ``dense_mlp``, ``router``, ``gemm``,
``collective``, ``p2p``), so a measured kernel database behind them is used automatically.

Per decoder layer, on the busiest GPU of a stage of ``W = attn_tp * attn_dp`` GPUs:

- Between blocks the stage's tokens are *scattered*, ``T / W`` per GPU. A block sharded ``t``
  ways gathers its tokens over its TP group first (``all_gather``) and reduce-scatters after
  (``reduce_scatter``); for pure TP this is Megatron's two all-reduces per layer, for attention
  DP + EP (SGLang's DP attention) it is none. The pair is priced as one
  ``collective("all_reduce", ...)`` of the block's ``tokens * hidden`` bytes: what SGLang and
  vLLM run for a TP block (their custom all-reduce for small messages, NCCL for large; the
  engine's measured table inside a node), and without an engine exactly the α-β RS + AG.
  MixServe's evaluator (:mod:`moeplan.planners.strategy.comm`) makes the same call.
- Attention runs on the busiest attention-DP rank (requests dealt to ranks largest first):
  projections over its ``T_r`` tokens (``attention_layer - attention_core`` at one token per
  sequence), the decode sequences' core at their mean context (exact: the core is linear in
  the summed context), and one core call per prefill chunk at its real context.
- MoE: router and shared experts on ``T_r`` tokens (shared experts sharded like attention);
  routed experts on the busiest EP rank: ``T k imbalance / moe_ep`` token copies over its
  ``E / moe_ep`` experts (``expert_ffn``, split ``moe_tp``); on an engine, its fused-MoE
  collectives (the MoE group's tokens gathered, the outputs reduced:
  :mod:`moeplan.planners.ep_comm`); without one, dispatch and combine all-to-all
  over the EP group (bytes scaled by the imbalance, the busiest receiver), AG/RS over
  ``moe_tp``. ``imbalance`` = the routing profile's max/mean over EP ranks for that layer
  times the caller's factor (e.g. after EPLB); ``k`` = the profile's mean activated experts.
- Local activation rate (Sem-MoE §3, "LAR"): by default a token's ``k`` activations land on
  the EP ranks uniformly, so ``1 - 1/moe_ep`` of the all-to-all's bytes leave the GPU
  (the collective's pairwise formula keeps ``1/n`` local). Given a placement's measured
  ``lar`` (the fraction of activations whose expert sits on the token's own EP rank), the
  bytes handed to the collective are scaled by ``(1 - lar) / (1 - 1/moe_ep)``, so the bytes
  that leave the GPU are ``(1 - lar)`` of the total: ``lar = 1/moe_ep`` is today's time,
  ``lar = 1`` removes the all-to-all. Departure: the intra/inter-node split of the remote
  bytes stays the uniform one (the collective's), which is exact on one node.
- A fused layout (MixServe's AR-A2A, ``layout.fused``) replaces the MoE block's TP
  collectives and all-to-all by Algorithms 1-2 overlapped, or by the same sharded bytes sent
  RS -> A2A -> AG when cheaper, as the strategy planner prices it (:mod:`moeplan.serve.iteration.fused`).
- Dense layers: ``dense_mlp`` sharded ``dense_tp`` ways.
- Element-wise work (:mod:`moeplan.cost.elementwise`): every layer's two fused residual-add
  RMSNorms on the rank's ``T_r`` tokens (in its attention part), RoPE / QK-norm inside
  GEMM-priced attention, SwiGLU's activation beside GEMM-priced MLPs.
- The last stage adds the final norm of the rank's tokens and the lm-head GEMM for one logit
  row per sequence.

Pipeline (SMIDT §IV, vLLM/SGLang PP): the batch is split into ``m = min(micro_batches,
sequences)`` micro-batches that circulate through the ``pp`` stages; the busiest micro-batch's
stage times ``s_j`` and P2P sends ``p_j`` give the steady-state period of the cyclic flow
shop in which every micro-batch must leave the last stage before re-entering the first:
``period = max(sum_j (s_j + p_j), m * max_j max(s_j, p_j))`` (the loop latency, or the
bottleneck stage or link serving ``m`` micro-batches; :func:`pipeline_period`, checked against
:func:`moeplan.sim.simulate_list` in the tests). One engine iteration = one period; every sequence of the batch
advances one step. With ``pp = 1`` the period is the stage time.

Instance knobs (:class:`~moeplan.serve.iteration.instance_knobs.InstanceKnobs`): with ``a2a = deepep``
the MoE layer is DeepEP's (:mod:`moeplan.cost.wideep`: normal kernels for an iteration with
prefill chunks, low-latency otherwise) and a DP-attention MLA block the wide-EP tables';
``tbo`` overlaps two halves of the batch (:mod:`moeplan.serve.iteration.tbo`); ``mtp`` makes
every decode a speculative step, verify plus draft (:mod:`moeplan.serve.iteration.mtp`); an
fp8 KV cache halves the decode KV read. The busiest EP rank's load comes from :mod:`moeplan.serve.iteration.balance`.

Engine host work (:mod:`moeplan.cost.host`): with an engine, each step adds its scheduler's
host work for the busiest attention-DP rank's sequences (one engine core per rank), in series
with the GPU's time or, where the engine overlaps it (:meth:`EngineBackend.host_overlap`, or
``knobs.overlap``), as the longer of the two; the breakdown's ``host_s`` is the host work,
``host_exposed_s`` the part the step waits for. Without an engine no host work is priced.

Departures: CUDA-graph padding is not modelled; without ``tbo`` communication is not
overlapped with compute.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from moeplan.backends import backend_or_none
from moeplan.cost import CostModel
from moeplan.cost.host import host_seconds, step_seconds
from moeplan.cost.memory import kv_bytes_per_token_layer
from moeplan.errors import require
from moeplan.planners.ep_comm import fused_ep_seconds
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.balance import layer_imbalances
from moeplan.serve.iteration.fused import fused_comm, fused_layer
from moeplan.serve.iteration.grid import bucket_grid
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.mtp import MtpMixin
from moeplan.serve.iteration.prefetch import PrefetchMixin
from moeplan.serve.iteration.tbo import TwoBatchMixin, tbo_halves
from moeplan.serve.layout import stage_layers
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile

KV_BW_EFF = 0.8  # the CostModel roofline's HBM efficiency (cost.model.DEFAULT_BW_EFF)


class Batch(NamedTuple):
    """One iteration's work: ``decode`` sequences at mean context ``decode_ctx`` (keys,
    the new token included) and prefill chunks ``(new_tokens, context_after_chunk)``."""

    decode: int = 0
    decode_ctx: int = 0
    prefill: tuple[tuple[int, int], ...] = ()

    @property
    def tokens(self) -> int:
        return self.decode + sum(q for q, _ in self.prefill)

    @property
    def sequences(self) -> int:
        return self.decode + len(self.prefill)


def busiest_part(batch: Batch, parts: int) -> Batch:
    """The largest of ``parts`` shares: decode sequences dealt evenly (ceil), prefill chunks
    assigned largest first to the least-loaded share (LPT)."""
    if parts <= 1:
        return batch
    dec = -(-batch.decode // parts)
    if not batch.prefill:
        return Batch(dec, batch.decode_ctx, ())
    bins: list[list[tuple[int, int]]] = [[] for _ in range(parts)]
    load = [0] * parts
    for chunk in sorted(batch.prefill, key=lambda c: (-c[0], -c[1])):
        j = load.index(min(load))
        bins[j].append(chunk)
        load[j] += chunk[0]
    j = load.index(max(load))
    return Batch(dec, batch.decode_ctx, tuple(bins[j]))


def pipeline_period(stage_s: list[float], p2p_s: list[float], m: int) -> float:
    """Steady-state period of ``m`` identical micro-batches circulating through stages of
    ``stage_s`` seconds joined by sends of ``p2p_s`` seconds (each stage and link exclusive,
    a micro-batch re-enters stage 0 only after leaving the last stage)."""
    latency = sum(stage_s) + sum(p2p_s)
    return max(latency, m * max(max(stage_s), max(p2p_s, default=0.0)))


def a2a_scale(lar: float | None, ep: int) -> float:
    """Factor on the all-to-all bytes for local activation rate ``lar`` over ``ep`` ranks:
    ``(1 - lar) / (1 - 1/ep)`` (1 when ``lar`` is None or ``ep`` is 1; module docstring)."""
    if lar is None:
        return 1.0
    require(
        isinstance(lar, int | float) and 0.0 <= lar <= 1.0,
        f"lar ({lar!r}) must be a fraction in [0, 1]",
    )
    if ep <= 1:
        return 1.0
    return (1.0 - lar) / (1.0 - 1.0 / ep)


class _Layer(NamedTuple):
    moe: bool
    mixer: int  # the first layer with this layer's mixer (priced once for all of them)
    k: float
    imbalance: float


class IterationModel(TwoBatchMixin, MtpMixin, PrefetchMixin):
    """Seconds per engine iteration for one (model, cluster, cost, layout, routing); memoised
    per :class:`Batch`. Call it with a batch; :meth:`breakdown` explains the time."""

    _part = staticmethod(busiest_part)  # used by TwoBatchMixin

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        cost: CostModel,
        layout: Layout,
        routing: RoutingProfile | None = None,
        imbalance: float = 1.0,
        lar: float | None = None,
        knobs: InstanceKnobs | None = None,
    ) -> None:
        layout.validate(model, cluster)
        self.model, self.cluster, self.cost, self.layout = model, cluster, cost, layout
        self.knobs = knobs or InstanceKnobs()
        self._wide = cost.wide_ep if self.knobs.a2a == "deepep" else None
        self._a2a_scale = a2a_scale(lar, layout.moe_ep)
        route = routing if routing is not None else RoutingProfile.static(model.top_k)
        moe_index = {layer: i for i, layer in enumerate(model.moe_layers)}
        gpn = cluster.nvlink_domain  # NVLink peers: a group past them crosses the network
        w = layout.stage_gpus
        self._nodes = {
            "attn": -(-layout.attn_tp // gpn),
            "moe_tp": -(-layout.moe_tp // gpn),
            "dense": -(-layout.dense_tp // gpn),
            "ep": min(layout.moe_ep, -(-w // gpn)),
        }
        imbs = layer_imbalances(route, model, layout, imbalance, self._nodes["ep"])
        self._stages: list[Counter[_Layer]] = []
        first: dict[object, int] = {}
        for j, spec in enumerate(model.layer_specs):
            first.setdefault(spec.mixer, j)
        for layers in stage_layers(model, layout.pp):
            c: Counter[_Layer] = Counter()
            for layer in layers:
                moe = model.is_moe_layer(layer)
                i = moe_index.get(layer, 0)
                c[
                    _Layer(
                        moe,
                        first[model.layer_specs[layer].mixer],
                        route.k(i) if moe else 0.0,
                        imbs[i] if moe else 1.0,
                    )
                ] += 1
            self._stages.append(c)
        self._p2p_inter = [((s + 1) * w) % gpn == 0 or w >= gpn for s in range(layout.pp - 1)]
        self._cache: dict[Batch, float] = {}
        self._parts: dict[tuple, float | tuple[float, float]] = {}
        # per (decode sequences, sliding): the engine grid's decode prices (DecodeGrid)
        self._grids: dict[tuple[int, bool], DecodeGrid] = {}
        # per sliding: [grids whose bound was asked, grids it spared a block of] (DecodeGrid)
        self._tallies: dict[bool, list[int]] = {False: [0, 0], True: [0, 0]}
        # prices that depend on the attention TP and KV knobs only, not on the rest of the
        # layout: a cost model that shares tables across a search's layouts (MemoCost) holds
        # them once for every layout with that attention block
        table = getattr(cost, "shared_table", None)
        tp, kv = layout.attn_tp, (self.knobs.kv_stored, self.knobs.kv_scale)
        # per (busiest rank's batch, mixer): the layer's mixer block (:meth:`_attention`)
        self._attn: dict[tuple[Batch, int], float] = (
            {}
            if table is None
            else table("attention", model, cluster, tp, *kv, self._wide is not None)
        )
        self._warmed: set[tuple] = set()  # shapes priced ahead (PrefetchMixin)
        eng = backend_or_none(cost.engine)
        # None: no engine, no host work priced; else whether the step overlaps it
        self._overlap: bool | None = (
            None if eng is None else eng.overlaps(self.knobs.overlap, cost.engine_version)
        )

    def __call__(self, batch: Batch) -> float:
        t = self._cache.get(batch)
        if t is None:
            t = self._cache[batch] = self.breakdown(batch)["period_s"]
        return t

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    # ---- pieces (each memoised: decode runs repeat the same token counts) ------------------
    def _memo(self, key: tuple, fn, *args):  # type: ignore[no-untyped-def]
        v = self._parts.get(key)
        if v is None:
            v = self._parts[key] = fn(*args)
        return v

    def _attention(self, rank: Batch, mixer: int) -> float:
        """The layer's mixer block, its two fused residual-add RMSNorms (pre-attention and
        pre-MLP, :meth:`CostModel.layer_norms`) and, where the model has them, its
        hyper-connections (mHC at the mixer and FFN sites, :meth:`CostModel.hyper_connections`)."""
        key = (rank, mixer)
        v = self._attn.get(key)
        if v is None:
            v = self._attn[key] = self._attention_hc(rank, mixer)
        return v

    def _attention_hc(self, rank: Batch, mixer: int) -> float:
        hc = self.cost.hyper_connections(self.model, rank.tokens, mixer)
        norms = self.cost.layer_norms(self.model, rank.tokens)  # pre-attention and pre-MLP
        return self._attention_raw(rank, mixer) + hc + norms

    def _wide_attention(self, rank: Batch) -> float | None:
        """The wide-EP MLA tables for the rank's decode sequences and prefill chunks, or
        ``None`` where they do not apply (no DeepEP, attention TP, other attention)."""
        if self._wide is None or self.layout.attn_tp != 1:
            return None
        cm, md, kv = self.cost, self.model, self.knobs.kv_stored
        t = 0.0
        if rank.decode:
            d = cm.wide_mla(md, rank.decode, 1, rank.decode_ctx, kv)
            if d is None:
                return None
            t += d
        for q, ctx in rank.prefill:
            p = cm.wide_mla(md, 1, q, ctx, kv)
            if p is None:
                return None
            t += p
        return t

    def _attention_raw(self, rank: Batch, mixer: int) -> float:
        cm, md, tp = self.cost, self.model, self.layout.attn_tp
        # a mixer kind with its own tables (DSA/CSA/HCA/MSA, GDN/KDA/Mamba-2): whole blocks
        kv = self.knobs.kv_stored  # the stored KV dtype picks the module tables' kernel rows
        t = cm.mixer_layer(md, mixer, rank.decode, 1, rank.decode_ctx, tp, kv)
        if t is not None:
            for q, ctx in rank.prefill:
                t += cm.mixer_layer(md, mixer, 1, q, ctx, tp, kv)  # type: ignore[operator]
            return t
        layer = mixer if md.is_sliding_layer(mixer) else None
        wide = None if layer is not None else self._wide_attention(rank)
        if wide is not None:
            return wide
        t_r = rank.tokens
        if not rank.prefill:  # a decode step: its octave's projections' query priced ahead
            self._warm_attention(t_r, 1)
        one = mixer if cm.mixes_kinds(md) else None  # this layer's projections, not the mean
        proj = cm.attention_layer(md, t_r, 1, 1, tp, one, hc=False) - cm.attention_core(
            md, t_r, 1, 1, tp
        )  # the mHC is added once per layer (_attention_hc)
        core = self._decode_core(rank.decode, rank.decode_ctx, layer is not None)
        for q, ctx in rank.prefill:
            core += cm.attention_core(md, 1, q, ctx, tp, layer)
        if self.knobs.kv_scale != 1.0:  # stored KV of another width than the tables': reads scale
            kv_read = rank.decode * rank.decode_ctx * kv_bytes_per_token_layer(md, tp)
            saved = kv_read * (1.0 - self.knobs.kv_scale) / (self.cluster.gpu.mem_bw * KV_BW_EFF)
            core = max(0.5 * core, core - saved)
        return proj + core

    def _decode_core(self, seqs: int, ctx: int, sliding: bool) -> float:
        """Decode attention core of ``seqs`` sequences at mean context ``ctx``, made
        non-decreasing in ``ctx`` over the engine's context grid (:func:`.grid.bucket_grid`,
        :func:`decode_envelope`). A decode step reads every cached key, so it can neither get
        cheaper with more keys nor dearer with fewer; the kernel prices do both: a dip of up
        to 7 % on A100 at a measured line's end (32,767 -> 33,279 keys, where the correction
        switches from the table's line to its residual field), and single measured rows up
        to 6x their neighbours (vLLM 0.14.0's A100 ``generation_mla`` table: 1.95 ms at
        batch 2, step 31, where steps 15 and 63 take 0.36 and 0.33 ms and step 16,383 takes
        0.53 ms). Up to :data:`FLOOR_HORIZON` keys the price at a grid context is the least
        price at it or any longer grid context (a dip lowers the contexts before it, a spike
        is never read); beyond it, the largest at it or any shorter one. At a grid context
        (every context the engine asks) the price comes from the grid's vectorised block
        queries, the same kernel rows :meth:`CostModel.attention_core` prices; the blocks
        are priced as far as the least price can still change (:class:`DecodeGrid`)."""
        cm, md, tp = self.cost, self.model, self.layout.attn_tp
        layer = md.sliding_layers[0] if sliding else None
        if seqs <= 0 or ctx < _grid_block(0)[0]:
            return cm.attention_core(md, seqs, 1, ctx, tp, layer)
        grid = self._grids.get((seqs, sliding))
        if grid is None:
            # every layout with this attention TP asks the same blocks (memoised block by
            # block, the missing ones priced in one query: :mod:`moeplan.search.job.memo_cost`)
            tally = self._tallies[sliding]
            bounded = tally[0] < BOUND_TRIALS or tally[1] > 0  # else the bound never spares
            grid = self._grids[seqs, sliding] = DecodeGrid(
                lambda blocks: cm.decode_core_blocks(md, seqs, blocks, tp, layer),
                (lambda ctxs: cm.decode_core_floors(md, seqs, ctxs, tp, layer))
                if bounded
                else None,
                tally,
            )
        grid.extend(ctx)
        at = bisect_left(grid.grid, ctx)
        if grid.grid[at] == ctx:  # an engine context: the same kernel rows
            return grid.top(at)
        top, below = grid.top(at), grid.top(at - 1) if at else None
        self._warm_attention(seqs, ctx, layer)
        raw = cm.attention_core(md, seqs, 1, ctx, tp, layer)
        return min(max(raw, below) if below is not None else raw, top)

    def _gather_scatter(self, tokens: float, group: int, nodes: int) -> float:
        """AG before and RS after a block sharded over ``group`` GPUs holding ``tokens``:
        the TP block's all-reduce of those tokens (module docstring)."""
        if group <= 1 or tokens <= 0:
            return 0.0
        nbytes = tokens * self.model.hidden_bytes
        return self.cost.collective("all_reduce", nbytes, group, nodes)

    def _moe(
        self, t_mb: int, t_r: int, k: float, imb: float, prefill: bool = True
    ) -> tuple[float, float]:
        """(compute, communication) of one MoE layer on the busiest GPU."""
        cm, md, lay = self.cost, self.model, self.layout
        if self._wide is not None:  # DeepEP: context kernels with prefill chunks, else LL
            w = self._wide.moe(
                md,
                t_mb / lay.stage_gpus,
                lay.moe_ep,
                redundant=lay.redundant_experts,
                imbalance=imb,
                phase="context" if prefill else "generation",
                batch_spread=self.knobs.routing == "random",
            )
            shared = cm.wide_shared_expert(md, t_r, not prefill) if lay.attn_tp == 1 else None
            if shared is None:
                shared = cm.shared_expert(md, t_r, lay.attn_tp)
            return cm.router(md, t_r) + shared + w.gemm, w.dispatch + w.combine
        if not prefill:
            self._warm_moe(t_mb, k, imb)
        load, e_local = self._expert_load(t_mb, k, imb)
        compute = (
            cm.router(md, t_r)
            + cm.shared_expert(md, t_r, lay.attn_tp)
            + cm.expert_ffn(md, load, e_local, lay.moe_tp)
        )
        gpn = self.cluster.nvlink_domain
        fused = None if lay.fused else fused_ep_seconds(cm, md, lay, gpn, prefill, t_mb, t_r)
        if fused is not None:  # the engine's gather / reduce collectives (planners/ep_comm)
            return compute, fused[0] + fused[1]
        group_tokens = t_mb / lay.moe_ep
        comm = self._gather_scatter(group_tokens, lay.moe_tp, self._nodes["moe_tp"])
        if lay.moe_ep > 1:
            a2a = group_tokens * k * imb * md.hidden_bytes * self._a2a_scale
            comm += 2 * cm.collective("all_to_all", a2a, lay.moe_ep, self._nodes["ep"])
        if lay.fused:  # MixServe's Algs. 1-2 or RS -> A2A -> AG (serve/iteration/fused.py)
            layer = fused_layer(cm, md, lay.moe_ep, lay.moe_tp, t_mb, k, imb, self._a2a_scale)
            comm = fused_comm(layer)
        return compute, comm

    def _dense_layer(self, t_mb: int) -> tuple[float, float]:
        """(MLP, all-reduce) of one dense layer for a micro-batch of ``t_mb`` tokens."""
        lay, md = self.layout, self.model
        dense_tokens = math.ceil(t_mb * lay.dense_tp / lay.stage_gpus)
        mlp = self._memo(("mlp", dense_tokens), self.cost.dense_mlp, md, dense_tokens, lay.dense_tp)
        gs = self._memo(
            ("gs", dense_tokens, lay.dense_tp),
            self._gather_scatter,
            dense_tokens,
            lay.dense_tp,
            self._nodes["dense"],
        )
        return mlp, gs

    def _stage(self, s: int, mb: Batch, rank: Batch) -> dict[str, float]:
        """Seconds of stage ``s`` for micro-batch ``mb`` (busiest DP rank ``rank``)."""
        lay, md, cm = self.layout, self.model, self.cost
        t_mb, t_r = mb.tokens, rank.tokens
        out = {"attention": 0.0, "moe": 0.0, "dense": 0.0, "comm": 0.0, "lm_head": 0.0}
        attn_comm = self._memo(
            ("gs", t_r, lay.attn_tp), self._gather_scatter, t_r, lay.attn_tp, self._nodes["attn"]
        )
        for layer, count in self._stages[s].items():
            out["attention"] += count * self._attention(rank, layer.mixer)
            out["comm"] += count * attn_comm
            if layer.moe:
                comp, comm = self._memo(
                    ("moe", t_mb, t_r, layer.k, layer.imbalance, bool(mb.prefill)),
                    self._moe,
                    t_mb,
                    t_r,
                    layer.k,
                    layer.imbalance,
                    bool(mb.prefill),
                )
                out["moe"] += count * comp
                out["comm"] += count * comm
            else:
                mlp, gs = self._dense_layer(t_mb)
                out["dense"] += count * mlp
                out["comm"] += count * gs
        if s == lay.pp - 1:
            out["lm_head"] = cm.gemm(
                rank.sequences, md.vocab_size / lay.attn_tp, md.hidden_size
            ) + cm.final_norm(md, t_r)
        return out

    def breakdown(self, batch: Batch) -> dict[str, float]:
        """Period and its parts (seconds): per-kind sums over stages of the busiest
        micro-batch, P2P, pipeline latency, bottleneck stage and the micro-batch count; with
        MTP also ``mtp_draft`` (:mod:`moeplan.serve.iteration.mtp`); with an engine the host
        work ``host_s`` and the part of it the period waits for, ``host_exposed_s``."""
        out = (
            self._mtp_breakdown(batch)
            if self.knobs.mtp and batch.decode
            else self._plain_breakdown(batch)
        )
        if self._overlap is None or not batch.sequences:
            return out
        gpu = out["period_s"]
        host = host_seconds(-(-batch.sequences // self.layout.attn_dp))
        out["period_s"] = step_seconds(gpu, host, self._overlap)
        out["host_s"], out["host_exposed_s"] = host, out["period_s"] - gpu
        return out

    def _plain_breakdown(self, batch: Batch, per_seq: int = 1) -> dict[str, float]:
        """:meth:`breakdown` without MTP; ``per_seq``: decode tokens per sequence (MTP's
        verify tokens), the unit two-batch overlap splits the decode tokens in."""
        lay = self.layout
        if batch.sequences == 0:
            return {"period_s": 0.0, "latency_s": 0.0, "micro_batches": 0}
        m = min(lay.micro_batches, batch.sequences) if lay.pp > 1 else 1
        mb = busiest_part(batch, m)
        rank = busiest_part(mb, lay.attn_dp)
        halves = tbo_halves(rank, per_seq) if self.knobs.tbo and lay.pp == 1 else None
        if halves is not None:  # SGLang's split (serve/iteration/tbo.py); None: one batch
            return self._two_batch(mb, rank, halves)
        parts = [self._stage(s, mb, rank) for s in range(lay.pp)]
        stage_s = [sum(p.values()) for p in parts]
        p2p_bytes = mb.tokens / lay.stage_gpus * self.model.hidden_bytes
        sends = [self.cost.p2p(p2p_bytes, inter) for inter in self._p2p_inter]
        p2p = sum(sends)
        latency = sum(stage_s) + p2p
        period = pipeline_period(stage_s, sends, m)
        out = {k: sum(p[k] for p in parts) for k in parts[0]}
        out.update(
            period_s=period,
            latency_s=latency,
            p2p=p2p,
            micro_batches=m,
            bottleneck_stage=int(stage_s.index(max(stage_s))),
            bubble_s=period - sum(stage_s) / lay.pp * m if lay.pp > 1 else 0.0,
        )
        return out


#: the decode grid's first block: its contexts below this (63 of them); then one block per
#: octave, so a decode step's envelope prices the octaves from its context on, not all
FIRST_BLOCK = 64
#: the longest context the decode-attention tables measure (their ``step`` column ends at
#: 131,071 in every shipped ``generation_*`` table): the grid is priced at least this far
FLOOR_HORIZON = 131_071


@lru_cache(maxsize=1)
def _horizon_end() -> int:
    """The last grid context within :data:`FLOOR_HORIZON`."""
    return bucket_grid(FLOOR_HORIZON)[-1]


def decode_envelope(grid: list[int], raws: list[float]) -> list[float]:
    """Non-decreasing decode prices on ``grid`` (:meth:`IterationModel._decode_core`): up to
    :data:`FLOOR_HORIZON` the suffix minimum of ``raws`` (the grid there is always priced
    whole, so a price never depends on how far the grid was asked), beyond it the running
    maximum."""
    h = bisect_right(grid, FLOOR_HORIZON)
    env = list(raws)
    for i in range(h - 2, -1, -1):
        env[i] = min(env[i], env[i + 1])
    for i in range(max(h, 1), len(env)):
        env[i] = max(env[i], env[i - 1])
    return env


class DecodeGrid:
    """The decode attention core of one sequence count at the engine's grid contexts
    (:func:`_grid_block`'s blocks, up to :data:`FLOOR_HORIZON` and as far as asked) and its
    non-decreasing envelope (:func:`decode_envelope`), each block priced when an envelope
    value first needs it: ``price(blocks)`` gives each block's prices
    (:meth:`CostModel.decode_core_blocks`), ``floors(ctxs)`` a lower bound of the price at
    each context (:meth:`CostModel.decode_core_floors`), or ``None``.

    Within the horizon the envelope at index ``i`` is the least price at ``i`` or after it
    up to the horizon. ``i``'s block is priced, then in one query every later block before
    the first context whose bound reaches the least price found: no price after it can
    undercut that price, so the value is the whole grid's, bit for bit (a row's price does
    not depend on the rows sharing its query). A decode step asks a context or two of a
    sequence count, and the bound passes the prices an octave or two on (a price grows with
    the keys it reads), so a part of the grid's ~400 contexts is priced instead of all.
    Without a bound (no kernel tables; an accounting copy, whose every priced row counts)
    the whole grid is priced at once. Beyond the horizon the envelope is the largest price
    from the horizon's last context on: every block up to the asked one is priced.

    ``floors`` ``None``: no bound is asked, and the blocks from ``i``'s to the horizon are
    priced at once. ``tally`` counts, over the grids of one kind of layer, those whose bound
    was asked and those it spared a block of: a sliding-window layer's price stops growing
    past its window, so its bound spares nothing, and :class:`IterationModel` stops asking
    it after :data:`BOUND_TRIALS` grids that spared nothing (the prices are the same either
    way)."""

    def __init__(
        self,
        price: Callable[[list[tuple[int, ...]]], list[list[float]]],
        floors: Callable[[list[int]], list[float] | None] | None,
        tally: list[int] | None = None,
    ) -> None:
        self._price, self._floors = price, floors
        self._tally = tally if tally is not None else [0, 0]
        self._spared = False
        self.grid: list[int] = []
        self._blocks: list[tuple[int, ...]] = []
        self._starts: list[int] = []  # grid index of each block's first context
        self._raws: list[float] = []  # nan: not priced yet
        self._suffix: list[float] | None = None  # least lower bound from each index on
        self._asked = False  # floors asked (once: the horizon's grid never changes)
        self._top: dict[int, float] = {}
        self.extend(_horizon_end())

    def extend(self, ctx: int) -> None:
        """Add (unpriced) blocks until the grid reaches ``ctx``."""
        end = self.grid[-1] if self.grid else 0
        while end < ctx:
            block = _grid_block(end)
            self._starts.append(len(self.grid))
            self._blocks.append(block)
            self.grid += block
            self._raws += [math.nan] * len(block)
            end = block[-1]
        self._h = bisect_right(self.grid, FLOOR_HORIZON)

    def _ensure(self, blocks: list[int]) -> None:
        """Price the blocks of ``blocks`` (indices) not priced yet, in one query."""
        todo = [k for k in blocks if math.isnan(self._raws[self._starts[k]])]
        if not todo:
            return
        priced = self._price([self._blocks[k] for k in todo])
        for k, prices in zip(todo, priced, strict=True):
            self._raws[self._starts[k] : self._starts[k] + len(prices)] = prices

    def _block_of(self, i: int) -> int:
        return bisect_right(self._starts, i) - 1

    def _least_after(self) -> list[float] | None:
        """The least lower bound from each grid index to the horizon (``None``: no bound)."""
        if not self._asked and self._floors is not None:
            self._asked, h = True, self._h
            floors = self._floors(self.grid[:h])
            if floors is not None:
                self._tally[0] += 1
                suffix = [math.inf] * (h + 1)
                for j in range(h - 1, -1, -1):
                    suffix[j] = min(floors[j], suffix[j + 1])
                self._suffix = suffix
        return self._suffix

    def top(self, i: int) -> float:
        """The envelope at grid index ``i`` (:func:`decode_envelope`'s value there)."""
        got = self._top.get(i)
        if got is not None:
            return got
        h, raws = self._h, self._raws
        suffix = self._least_after() if i < h - 1 else None
        if suffix is None:  # every block up to the horizon's (and i's) at once
            first = 0 if self._floors is not None or i >= h - 1 else self._block_of(i)
            self._ensure(list(range(first, self._block_of(max(i, h - 1)) + 1)))
        if i >= h - 1:  # beyond the horizon: the running maximum from its last context
            value = max(raws[h - 1 : i + 1])
        else:  # i's block, then at once every block before the bound passes its least price
            k = self._block_of(i)
            self._ensure([k])
            end = min(self._starts[k] + len(self._blocks[k]), h)
            value = min(raws[i:end])
            if suffix is None:  # no bound: every price up to the horizon counts
                value, end = min(value, min(raws[end:h], default=math.inf)), h
            elif end < h and not value <= suffix[end]:
                past = bisect_left(suffix, value, end, h)  # the bound is non-decreasing
                last = self._block_of(past - 1)
                self._ensure(list(range(k + 1, last + 1)))
                stop = min(self._starts[last] + len(self._blocks[last]), h)
                value = min(value, min(raws[end:stop]))
                end = stop
            if end < h and not self._spared:
                self._spared = True
                self._tally[1] += 1
        self._top[i] = value
        return value


#: decode grids of one kind of layer (full or sliding-window attention) whose lower bound
#: is asked before, none of them spared a block, the kind's grids are priced whole
#: (:class:`DecodeGrid`): a bound costs a query of the analytic model over the grid
BOUND_TRIALS = 8


@lru_cache(maxsize=64)  # a handful of octaves; each block's tuple built once
def _grid_block(after: int) -> tuple[int, ...]:
    """The engine's grid contexts (:func:`.grid.bucket_grid`) of the block after context
    ``after``: below :data:`FIRST_BLOCK` when ``after`` is 0, else the next octave (a tuple:
    a memo keys it by value at C speed)."""
    if after <= 0:
        return tuple(bucket_grid(FIRST_BLOCK - 1))
    lo = 1 << after.bit_length()
    return tuple(c for c in bucket_grid(2 * lo - 1) if c >= lo)


@lru_cache(maxsize=256)
def iteration_model(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layout: Layout,
    routing: RoutingProfile | None = None,
    imbalance: float = 1.0,
    lar: float | None = None,
    knobs: InstanceKnobs | None = None,
) -> IterationModel:
    """The memoised :class:`IterationModel` of this deployment (one per argument tuple)."""
    return IterationModel(model, cluster, cost, layout, routing, imbalance, lar, knobs)


def evaluator_factory(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    *,
    routing: RoutingProfile | None = None,
    imbalance: float = 1.0,
    lar: float | None = None,
) -> Callable[[Layout], IterationModel]:
    """Layout -> iteration model with a placement's measured ``imbalance`` and ``lar``
    (the ``evaluator_factory`` of :func:`moeplan.search.colocated.evaluate.evaluate_layout`)."""
    a2a_scale(lar, 2)  # validate now, not at the first layout

    def make(layout: Layout) -> IterationModel:
        return IterationModel(model, cluster, cost, layout, routing, imbalance, lar)

    return make


def iteration_time(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layout: Layout,
    batch: Batch,
    *,
    routing: RoutingProfile | None = None,
    imbalance: float = 1.0,
    lar: float | None = None,
) -> float:
    """Seconds of one engine iteration of ``batch`` (memoised; see module docstring)."""
    return iteration_model(model, cluster, cost, layout, routing, imbalance, lar)(batch)
