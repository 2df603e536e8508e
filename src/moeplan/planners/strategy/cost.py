"""Evaluate one MixServe strategy: memory (Eq. 8), per-layer compute (Eq. 4) and
communication (Eqs. 1-3, 5 or the fused Algs. 1-2), service time (Eq. 6), metrics (7-11).

Compute goes through the calibrated models of :mod:`moeplan.cost` (``attention_layer``,
``expert_ffn``, ``shared_expert``, ``dense_mlp``, ``gemm``); every collective and P2P through
its ``collective`` and ``p2p`` (:class:`~moeplan.planners.strategy.comm.Collectives`), the
same calls :mod:`moeplan.serve.iteration.model` makes: one cost path for every family.

Placement and departures (the paper leaves these open):
- Attention runs on ``ceil(b/attn_dp)`` requests per rank; the MoE block sees all ``b*s``
  tokens of the stage, ``k`` copies each, spread over ``num_experts`` experts, times the
  routing profile's imbalance over EP ranks (max/mean) for the busiest rank; the busiest
  rank also receives that factor times the mean dispatch/combine bytes (in the bytes handed
  to the all-to-all, as the serving model does). Shared experts
  and dense MLPs are sharded like attention (TP = ``attn_tp``, replicated over DP).
- Decode attends over the mean context ``L_in + L_out/2``.
- A fused strategy uses, per phase, the cheaper of the overlapped Algs. 1-2 and the same
  sharded bytes sent sequentially (RS -> A2A -> AG): with tiny decode messages the ``n``
  intra rounds cost more latency than one collective.
- Memory (Eq. 8) is the serving simulator's model (:func:`moeplan.cost.memory.instance_breakdown`):
  the real per-module weights of the fullest pipeline stage (embedding on the first, lm-head
  on the last), the KV cache of ``ceil(b/dp)`` requests of ``L_in+L_out`` tokens (MLA's
  latent replicated on every TP rank, GQA heads split), the activations and A2A buffers of
  one chunked-prefill step (departure: Eq. 8 holds the whole batch's prompt activations at
  once; engines prefill in chunks), Alg. 1's staging buffer when fused, and the reserved
  runtime bytes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from moeplan.backends import DEFAULT_ENGINE, backend
from moeplan.cost import memory as mem
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.comm import Collectives, layer_comm, p2p_boundaries
from moeplan.planners.strategy.fused import FusedLayer
from moeplan.planners.strategy.queueing import service_metrics
from moeplan.planners.strategy.space import stage_shape
from moeplan.specs import ClusterSpec, ModelSpec, Workload


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseTime:
    """Eq. 6 for one phase, split by kind (seconds per step of the whole batch)."""

    compute_s: float
    comm_s: float
    p2p_s: float
    comm_unfused_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s + self.p2p_s

    @property
    def comm_share(self) -> float:
        return (self.comm_s + self.p2p_s) / self.total_s if self.total_s > 0 else 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyResult:
    """One evaluated strategy (times in seconds, memory in bytes per GPU)."""

    strategy: Layout
    ttft_s: float
    itl_s: float
    throughput_tokens_per_s: float
    num_gpus: int
    mem_bytes_per_gpu: float
    mem_capacity_bytes: float
    memory: dict
    prefill: PhaseTime
    decode: PhaseTime
    rho: float | None
    stable: bool

    @property
    def fits(self) -> bool:
        return self.mem_bytes_per_gpu <= self.mem_capacity_bytes

    @property
    def throughput_per_gpu(self) -> float:
        return self.throughput_tokens_per_s / self.num_gpus


def divisibility_error(model: ModelSpec, s: Layout) -> str | None:
    """The first divisibility rule ``s`` breaks for ``model`` (None when it fits the shape)."""
    if model.num_attention_heads % s.attn_tp:
        return (
            f"model.num_attention_heads ({model.num_attention_heads}) must be divisible "
            f"by attn.tp ({s.attn_tp})"
        )
    if model.num_experts % s.moe_ep:
        return f"model.num_experts ({model.num_experts}) must be divisible by moe.ep ({s.moe_ep})"
    if model.moe_intermediate_size % s.moe_tp:
        return (
            f"model.moe_intermediate_size ({model.moe_intermediate_size}) must be "
            f"divisible by moe.tp ({s.moe_tp})"
        )
    if s.pp > model.num_layers:
        return f"pp ({s.pp}) must be <= model.num_layers ({model.num_layers})"
    return None


class CostLike(Protocol):
    """The part of :class:`moeplan.cost.CostModel` the analyzer uses (tests pass fakes)."""

    def attention_layer(
        self, model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, tp: int = 1
    ) -> float: ...
    def expert_ffn(
        self, model: ModelSpec, tokens_per_expert: float, num_local_experts: float, tp: int = 1
    ) -> float: ...
    def shared_expert(self, model: ModelSpec, tokens: float, tp: int = 1) -> float: ...
    def dense_mlp(self, model: ModelSpec, tokens: float, tp: int = 1) -> float: ...
    def gemm(self, m: float, n: float, k: float) -> float: ...
    def p2p(self, nbytes: float, inter_node: bool) -> float: ...
    def collective(self, op: str, nbytes: float, group_size: int, nodes: int = 1) -> float: ...


class StrategyEvaluator:
    """Callable ``Layout -> StrategyResult`` for one (model, cluster, workload, cost)."""

    def __init__(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, cost_model: CostLike
    ) -> None:
        self.model, self.cluster, self.workload, self.cm = model, cluster, workload, cost_model
        self.coll = Collectives(cost_model, cluster.nvlink_domain)
        routing = workload.routing_for(model.top_k)
        self._routing = routing
        self._moe_kinds = Counter(routing.k(i) for i in range(model.num_moe_layers))
        self._cache: dict[tuple, float] = {}

    def __call__(self, s: Layout) -> StrategyResult | None:
        if divisibility_error(self.model, s) is not None:
            return None
        w = self.workload
        pre = self.phase_time(s, w.isl, w.isl)
        dec = self.phase_time(s, 1, w.isl + w.osl // 2)
        m = service_metrics(
            prefill_s=pre.total_s,
            decode_s=dec.total_s,
            batch=w.batch,
            isl=w.isl,
            osl=w.osl,
            rate=w.rate,
        )
        memory = self.memory(s)
        return StrategyResult(
            strategy=s,
            ttft_s=m.ttft_s,
            itl_s=m.itl_s,
            throughput_tokens_per_s=m.throughput_tokens_per_s,
            num_gpus=s.world_size,
            mem_bytes_per_gpu=memory.total,
            mem_capacity_bytes=self.cluster.gpu.mem_bytes,
            memory=memory.to_dict(),
            prefill=pre,
            decode=dec,
            rho=m.rho,
            stable=m.stable,
        )

    # ---- compute (Eq. 4) -------------------------------------------------------------
    def _cached(self, key: tuple, fn) -> float:
        v = self._cache.get(key)
        if v is None:
            v = self._cache[key] = float(fn())
        return v

    def layer_compute(self, s: Layout, q_len: int, ctx: int) -> tuple[float, float]:
        """(one MoE layer, one dense layer) compute seconds on the busiest rank."""
        md, cm, b = self.model, self.cm, self.workload.batch
        seqs = math.ceil(b / s.attn_dp)
        tokens = seqs * q_len
        attn = self._cached(
            ("attn", seqs, q_len, ctx, s.attn_tp),
            lambda: cm.attention_layer(md, seqs, q_len, ctx, tp=s.attn_tp),
        )
        imb = self.imbalance(s.moe_ep)
        moe = 0.0
        for k, count in self._moe_kinds.items():
            tpe = max(1, math.ceil(b * q_len * k * imb / md.num_experts))
            moe += count * self._cached(
                ("exp", tpe, s.moe_ep, s.moe_tp),
                lambda tpe=tpe: cm.expert_ffn(md, tpe, md.num_experts // s.moe_ep, tp=s.moe_tp),
            )
        moe /= max(1, md.num_moe_layers)
        if md.num_shared_experts:
            moe += self._cached(
                ("sh", tokens, s.attn_tp), lambda: cm.shared_expert(md, tokens, tp=s.attn_tp)
            )
        moe += self._cached(("rt", tokens), lambda: cm.gemm(tokens, md.num_experts, md.hidden_size))
        dense = 0.0
        if md.num_dense_layers:
            dense = self._cached(
                ("mlp", tokens, s.attn_tp), lambda: cm.dense_mlp(md, tokens, tp=s.attn_tp)
            )
        return attn + moe, attn + dense

    def imbalance(self, ep: int) -> float:
        """Mean over MoE layers of max/mean load over ``ep`` contiguous expert groups."""
        if ep <= 1:
            return 1.0
        return self._cached(
            ("imb", ep),
            lambda: (
                sum(self._routing.imbalance(i, groups=ep) for i in range(self.model.num_moe_layers))
                / self.model.num_moe_layers
            ),
        )

    # ---- communication (Eqs. 1-3, 5; Algs. 1-2) -----------------------------------------
    def layer_comm(self, s: Layout, q_len: int) -> tuple[float, float, float]:
        """(MoE layer, dense layer, MoE layer unfused) communication seconds."""
        md, b = self.model, self.workload.batch
        k = self._routing.mean_over_layers()
        c = layer_comm(
            token_bytes=q_len * md.hidden_bytes,
            top_k=k,
            batch=b,
            attn_tp=s.attn_tp,
            attn_dp=s.attn_dp,
            moe_tp=s.moe_tp,
            moe_ep=s.moe_ep,
            coll=self.coll,
            imbalance=self.imbalance(s.moe_ep),
        )
        dense = 2 * c.attn_allreduce  # a dense MLP all-reduces like attention (Eq. 5, no A2A)
        if not s.fused:
            engine = self._engine_ep(s, q_len)
            if engine is not None:  # the engine's own EP collectives replace Eq. 5's MoE part
                return c.attn_allreduce + engine, dense, c.attn_allreduce + engine
            return c.total, dense, c.total
        ag, rs = self.fused_layer(s, q_len).times()
        attn, seq = c.attn_allreduce, ag.sequential + rs.sequential
        # latency-bound steps (decode) may prefer the sequential RS -> A2A -> AG: take the
        # cheaper schedule per phase, as a runtime with both paths would
        return attn + min(ag.fused + rs.fused, seq), dense, attn + seq

    def _engine_ep(self, s: Layout, q_len: int) -> float | None:
        """Seconds of one MoE layer's expert parallelism as the cost model's engine runs it
        without DeepEP (its gather and reduce collectives,
        :func:`moeplan.planners.ep_comm.fused_ep_seconds`), the very price the
        serving model gives the layout; None where the engine keeps an all-to-all, no engine
        is priced, or the layout runs MixServe's fused rounds: Eq. 5 / Algs. 1-2 stand."""
        from moeplan.planners.ep_comm import fused_ep_seconds

        if s.fused or getattr(self.cm, "engine", None) is None:  # MixServe's fused rounds
            return None
        b = self.workload.batch
        tokens, dp_tokens = b * q_len, math.ceil(b / s.attn_dp) * q_len
        got = fused_ep_seconds(
            self.cm, self.model, s, self.cluster.nvlink_domain, q_len > 1, tokens, dp_tokens
        )  # type: ignore[arg-type]
        return None if got is None else got[0] + got[1]

    def fused_layer(self, s: Layout, q_len: int) -> FusedLayer:
        """Algs. 1-2 for one MoE layer of ``s`` (MoE TP = node, EP = nodes), priced."""
        nodes, per_node = stage_shape(self.cluster.num_nodes, self.cluster.gpus_per_node, s.pp)
        # a node (= one MoE TP group) holds b/ep requests once redundancy is dropped (§III-B3)
        x = math.ceil(self.workload.batch / s.moe_ep) * q_len * self.model.hidden_bytes
        chunk = x * self._routing.mean_over_layers() * self.imbalance(s.moe_ep) / (nodes * per_node)
        return FusedLayer.priced(
            nodes=nodes, tp=per_node, chunk_bytes=chunk, output_bytes=x, coll=self.coll
        )

    def phase_time(self, s: Layout, q_len: int, ctx: int) -> PhaseTime:
        """Eq. 6: all layers' compute + communication, plus (pp-1) P2P transfers."""
        md = self.model
        moe_c, dense_c = self.layer_compute(s, q_len, ctx)
        moe_m, dense_m, moe_u = self.layer_comm(s, q_len)
        nm, nd = md.num_moe_layers, md.num_dense_layers
        nbytes = math.ceil(self.workload.batch / s.attn_dp) * q_len * md.hidden_bytes
        intra, inter = p2p_boundaries(s.pp, self.cluster.num_domains)
        p2p = intra * self.coll.p2p(nbytes, False) + inter * self.coll.p2p(nbytes, True)
        return PhaseTime(
            compute_s=nm * moe_c + nd * dense_c,
            comm_s=nm * moe_m + nd * dense_m,
            p2p_s=p2p,
            comm_unfused_s=nm * moe_u + nd * dense_m,
        )

    # ---- memory (Eq. 8) --------------------------------------------------------------
    def memory(self, s: Layout) -> mem.MemoryBreakdown:
        """Bytes per GPU on the fullest pipeline stage, by the memory model the serving
        simulator sizes its KV pool with (:func:`moeplan.cost.memory.instance_breakdown`):
        the KV cache of ``ceil(b/dp)`` requests of ``L_in + L_out`` tokens per attention
        rank, and the activations and buffers of one forward step as the engine runs it —
        the batch's prompt tokens, at most one chunked-prefill step
        (:meth:`moeplan.backends.EngineBackend.default_chunk` of the cost model's engine,
        the default engine's when it has none)."""
        md, w = self.model, self.workload
        seqs = math.ceil(w.batch / s.attn_dp)
        engine = getattr(self.cm, "engine", None) or DEFAULT_ENGINE
        chunk = backend(engine).default_chunk(self.cluster.gpu)
        return mem.instance_breakdown(  # + the fixed state of the seqs (linear layers)
            md, self.memory_shape(s), seqs * (w.isl + w.osl), min(w.batch * w.isl, chunk), seqs
        )

    def memory_shape(self, s: Layout) -> mem.InstanceShape:
        """The strategy as the memory model sees it (routing's mean experts per token)."""
        return mem.InstanceShape(
            attn_tp=s.attn_tp,
            attn_dp=s.attn_dp,
            moe_tp=s.moe_tp,
            moe_ep=s.moe_ep,
            pp=s.pp,
            dense_tp=s.attn_tp,
            local_experts=self.model.num_experts / s.moe_ep,
            k=self._routing.mean_over_layers(),
            fused=s.fused,
        )
