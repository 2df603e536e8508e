"""Wide expert parallelism as DeepEP engines run it: one MoE layer on one GPU.

Per GPU of an EP group of ``ep`` ranks (``E + R`` physical experts, ``(E + R) / ep`` local):
``dispatch`` + the local experts' grouped GEMM on the tokens routed to them + ``combine``.

- Grouped GEMM: ``wideep_context_moe`` (prefill: DeepEP normal, contiguous DeepGEMM grouped
  GEMM) or ``wideep_generation_moe`` (decode: DeepEP low-latency, masked grouped GEMM) from the
  kernel database (SGLang 0.5.10's H100 tables; other GPUs transferred by the database's rules);
  for TRT-LLM (``WideEPMoE``: DeepEP on Hopper, the CUTLASS MoE on the rank's weight slots)
  ``trtllm_wideep_moe`` in both phases (TRT-LLM 1.3.0rc10's H100 table, with ``num_slots``),
  queried with the rank's own load: ``num_tokens = T * ep`` tokens entering the group,
  ``num_experts = E + R``, and ``distribution = "explicit"`` with ``rank_pairs = T k imb``
  routed copies on ``rank_hit`` local experts, ``imb`` the busiest rank's load over the mean: the placement's factor (a routing profile's per-expert loads after EPLB,
  the caller's ``imbalance``) times, with ``batch_spread``, the busiest rank of one batch of
  ``T * ep`` tokens drawn from the routing (:mod:`.ep_spread`: the slowest rank gates the
  step; at 8,192 tokens per GPU over EP32 1.008, at 128 over EP72 1.073). The product
  treats every rank as the busiest one: exact for a balanced placement, an upper bound
  otherwise (EP72 with ``R = 32`` and equal per-expert loads, placement 1.125: product 1.207,
  :func:`.ep_spread.spread` on the placement's shares 1.171).
- Experts hit: ``rank_hit`` is the expected number of the rank's ``(E + R) / ep`` slots that
  receive a token, not all of them: each of the ``T ep imb`` tokens behind the busiest rank's
  load reaches a given slot with probability ``k / (E + R)`` (balanced random routing;
  a replicated expert's tokens split over its replicas), so
  ``rank_hit = (E + R) / ep * (1 - (1 - k / (E + R))^(T ep imb))``
  (:func:`.kerneldb.load.experts_hit`). The weight reads of the grouped GEMM scale with it
  (the ``explicit`` load's bytes, :mod:`.kerneldb.wideep_features`): at one decode token
  per rank on DeepSeek-V3 EP8 a rank reads about 7 of its 32 experts. Decision: only this
  explicit load and :meth:`.model.CostModel.expert_ffn`'s analytic fallback assumed every
  local expert hit; the fused-MoE tables are queried at their own ``num_tokens`` with the
  load their rows were measured with (:mod:`.kerneldb.load`, ``min(E / ep, N k / ep)`` for
  the balanced router) and a measured MoE fit's :class:`.kernel_fits.MoeShape` takes the
  same closed form, so neither is corrected again.
- Dispatch / combine: DeepEP's kernels, ``T`` tokens per rank, hidden ``H``, dispatch in fp8
  (1.03125 bytes per element) or, where the engine dispatches NVFP4 experts' quantized
  activations (:meth:`moeplan.backends.EngineBackend.dispatch_bytes`), NVFP4 (0.5625), and
  combine in bf16 (the deepep_* families; an NVFP4 dispatch inside a node is the fp8 table at
  the same bytes: ``T * 0.5625 / 1.03125`` tokens). Inside one 8-GPU node: the tables' measured /
  interpolated rows (``num_experts = E + R``). Past the tables' 8 ranks inside one NVLink
  domain (an NVL72 rack): the intra-node analytic model on NVLink, for both kernels. Across
  ``n`` NVLink domains of ``g`` GPUs: the normal kernels (prefill) take the intra-node analytic model moved to the RDMA link
  (:meth:`Analytic.scaled`, the rule of :mod:`.kerneldb.comm`) for the remote bytes and kept
  on NVLink for the local ones, the longer of the two: a token is sent once per destination
  *node* over RDMA (expected distinct remote nodes among its ``k`` experts) and forwarded over
  NVLink once per destination rank. Low-latency kernels (decode), which send every routed copy
  straight to its rank, take DeepEP's published inter-node latencies at the rate they imply,
  scaled to the cluster's RDMA bandwidth, never below the intra-node table's price of the
  same tokens (:mod:`.deepep_ll`). The busiest receiver's bytes scale by ``imb``.

Two-batch overlap in prefill: DeepEP's normal kernels keep their SMs
(:data:`TBO_RESERVED_SMS`) while the other micro-batch computes, so the compute of an
overlapped prefill takes ``SMs / (SMs - TBO_RESERVED_SMS)`` longer (:func:`tbo_gemm_factor`).
Sourced for DeepGEMM: SGLang caps every DeepGEMM call of an overlapped prefill at the SMs
DeepEP leaves — sgl-project/sglang @ 0e02cef9,
python/sglang/srt/batch_overlap/operations_strategy.py:109
(``deep_gemm_num_sms = total_num_sms - DeepEPConfig.get_instance().num_sms``, in
``_compute_moe_deepseek_blog_prefill``; the decode strategy sets no cap), applied around the
whole overlapped forward (``configure_deep_gemm_num_sms`` in ``_model_forward_tbo``, two_batch_
overlap.py); on Hopper that is the expert and shared-expert GEMMs and the fp8 block-scaled
projections. Not sourced: the attention core (FlashAttention / FlashMLA) and the other
kernels get no cap in SGLang; moeplan slows them by the same factor because DeepEP's
resident blocks hold those SMs while they run (an upper bound: the hold ends with the
transfer). bench/bench_published.py prints every published row with the factor on DeepGEMM
only, without it, and at SGLang's default reserve of 20 SMs.
Low-latency (decode) kernels free every SM once their RDMA messages are issued
(deepseek-ai/profile-data README, decoding).

Departures: uniform routing for the distinct-node count (DeepSeek-V3's node-limited routing
caps it at 4 nodes, which uniform routing over <= 4 nodes respects). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from moeplan.backends import backend
from moeplan.backends.base import FP8_DISPATCH_BYTES
from moeplan.cost.deepep_ll import ll_seconds
from moeplan.cost.ep_spread import balanced_spread
from moeplan.cost.kerneldb.base import BF16_BYTES
from moeplan.cost.kerneldb.comm import DEEPEP_RANKS, DEEPEP_SMS, dest_ranks, link_seconds
from moeplan.cost.kerneldb.families import EXPLICIT
from moeplan.cost.kerneldb.fit import sm_count
from moeplan.cost.kerneldb.load import experts_hit
from moeplan.cost.kerneldb.sources import Prediction
from moeplan.cost.price_keys import INTERNODE_NOTE, PUBLISHED_LL_NOTE
from moeplan.errors import MoeplanError
from moeplan.specs import ClusterSpec, ModelSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from moeplan.cost.kerneldb import Device, KernelDB

#: the phase names of the wide-EP tables (TensorRT-LLM's context and generation)
TABLE_PHASES = ("context", "generation")
#: SMs DeepEP's normal kernels hold during an overlapped prefill: the tables' budget
#: (:data:`~.kerneldb.comm.DEEPEP_SMS`, DeepEP's README setting; sources there)
TBO_RESERVED_SMS = int(DEEPEP_SMS)


def tbo_gemm_factor(device: Device, phase: str) -> float:
    """Slow-down of the compute of an overlapped micro-batch (module docstring)."""
    if phase != "context":
        return 1.0
    sms = sm_count(device)
    return sms / (sms - TBO_RESERVED_SMS)


def rank_hit(tokens: float, top_k: int, slots: int, ep: int) -> float:
    """Expected slots of one of ``ep`` ranks hit by ``tokens`` tokens routed to ``top_k`` of
    ``slots`` at random (module docstring, "Experts hit")."""
    local = slots // ep
    return experts_hit(tokens, np.full(local, min(1.0, top_k / slots)))


@lru_cache(maxsize=1024)
def _dest_ranks(slots: int, top_k: int, ranks: int) -> float:
    """:func:`~.kerneldb.comm.dest_ranks` of one token (``top_k`` of ``slots`` experts over
    ``ranks``), remembered: every token count of a layout asks the same."""
    return float(dest_ranks(np.array([float(slots)]), np.array([float(top_k)]), ranks)[0])


class WideMoE(NamedTuple):
    """Seconds of one wide-EP MoE layer on the busiest GPU, by part."""

    dispatch: float
    gemm: float
    combine: float


@dataclass(frozen=True, slots=True)
class _Query:
    model: ModelSpec
    tokens: float
    ep: int
    redundant: int
    imbalance: float
    phase: str


class WideEP:
    """Prices :class:`WideMoE` from a kernel database (module docstring); memoised."""

    def __init__(
        self,
        kdb: KernelDB,
        device: Device,
        engine: str,
        cluster: ClusterSpec,
        note: Callable[[str, Prediction], float] | None = None,
    ) -> None:
        self._kdb, self._device, self._engine, self._cluster = kdb, device, engine, cluster
        self._note = note or (lambda op, p: p.seconds)
        self._memo: dict[tuple, WideMoE] = {}
        self._models: dict[int, ModelSpec] = {}

    def tbo_gemm_factor(self, phase: str) -> float:
        return tbo_gemm_factor(self._device, phase)

    def moe(
        self,
        model: ModelSpec,
        tokens: float,
        ep: int,
        *,
        redundant: int = 0,
        imbalance: float = 1.0,
        phase: str = "context",
        batch_spread: bool = True,
    ) -> WideMoE:
        """One MoE layer with ``tokens`` on this GPU (module docstring); ``batch_spread``
        False prices the rank's expected load (what a table row measures on rank 0)."""
        key = (id(model), tokens, ep, redundant, imbalance, phase, batch_spread)
        hit = self._memo.get(key)
        if hit is None:
            self._models[id(model)] = model  # keeps the id valid while the memo holds it
            imb = float(imbalance)
            if batch_spread and tokens > 0:
                imb *= balanced_spread(tokens * ep, ep, model.top_k, model.num_experts)
            q = _Query(model, float(tokens), ep, redundant, imb, phase)
            hit = self._memo[key] = self._price(q)
        return hit

    def _price(self, q: _Query) -> WideMoE:
        if q.phase not in TABLE_PHASES:
            raise MoeplanError(f"phase ({q.phase!r}) must be one of {TABLE_PHASES}")
        slots = q.model.num_experts + q.redundant
        if q.ep < 1 or slots % q.ep:
            raise MoeplanError(
                f"moe_ep ({q.ep}) must divide num_experts + redundant experts ({slots})"
            )
        if q.tokens <= 0:
            return WideMoE(0.0, 0.0, 0.0)
        return WideMoE(self._comm(q, "dispatch"), self._gemm(q, slots), self._comm(q, "combine"))

    def _gemm(self, q: _Query, slots: int) -> float:
        md = q.model
        shape = {
            "num_tokens": q.tokens * q.ep,
            "hidden_size": md.hidden_size,
            "inter_size": md.moe_intermediate_size,
            "topk": md.top_k,
            "num_experts": slots,
            "moe_ep_size": q.ep,
            "moe_tp_size": 1,
            # the experts as the engine runs them on this GPU (NVFP4's fallback without FP4
            # tensor cores: :meth:`moeplan.backends.EngineBackend.moe_format`)
            "moe_dtype": backend(self._engine)
            .moe_format(md.quant.experts.format, self._cluster.gpu)
            .kernel_dtype,
            "distribution": EXPLICIT,
            "rank_pairs": q.tokens * md.top_k * q.imbalance,
            "rank_hit": rank_hit(q.tokens * q.ep * q.imbalance, md.top_k, slots, q.ep),
        }
        op = f"wideep_{q.phase}_moe"
        own = backend(self._engine).wideep_moe_op
        if own is not None:  # the engine's own wide-EP MoE kernel on the rank's slots
            op = own
            shape |= {"num_experts": md.num_experts, "num_slots": slots}
        p = self._kdb.predict(op, self._device, self._engine, **shape)
        return self._note(op, p)

    def dispatch_bytes(self, model: ModelSpec, phase: str) -> float:
        """Bytes per hidden element of one dispatched token: the engine's rule
        (:meth:`moeplan.backends.EngineBackend.dispatch_bytes`: NVFP4 activations 0.5625, else
        DeepEP's fp8 1.03125)."""
        fmt = model.quant.experts.format
        return backend(self._engine).dispatch_bytes(fmt.kernel_dtype, phase, self._cluster.gpu)

    def _comm(self, q: _Query, direction: str) -> float:
        kind = "normal" if q.phase == "context" else "ll"
        op = f"deepep_{kind}_{direction}"
        md, g = q.model, self._cluster.nvlink_domain
        slots = md.num_experts + q.redundant
        if q.ep <= min(g, DEEPEP_RANKS):
            # the tables measured fp8 dispatches: a dispatch of smaller elements moves the
            # bytes of proportionally fewer fp8 tokens (transferred by bytes)
            ratio = 1.0
            if direction == "dispatch":
                ratio = self.dispatch_bytes(md, q.phase) / FP8_DISPATCH_BYTES
            shape: dict[str, object] = {
                "num_token": q.tokens * q.imbalance * ratio,
                "hidden_size": md.hidden_size,
                "num_topk": md.top_k,
                "num_experts": slots,
            }
            if kind == "normal":
                shape["sms"] = DEEPEP_SMS
            p = self._kdb.predict(op, self._device, self._engine, **shape)
            return self._note("deepep", p)
        return self._internode(q, op, kind, direction, slots)

    def _internode(self, q: _Query, op: str, kind: str, direction: str, slots: int) -> float:
        key = self._kdb.choose(
            self._device.reference,
            self._engine,
            op,
            {"sms": DEEPEP_SMS} if kind == "normal" else {},
        )
        vm = (
            None
            if key is None
            else self._kdb.variant(self._device.reference, self._engine, op, key)
        )
        if vm is None:
            raise MoeplanError(f"no DeepEP table for {op} on {self._device.reference}")
        md, g = q.model, min(self._cluster.nvlink_domain, q.ep)  # NVLink peers of a rank
        nodes = -(-q.ep // g)
        if kind == "ll" and nodes > 1:  # DeepEP's published inter-node figures (deepep_ll.py)
            return self._internode_ll(q, op, direction, slots, nodes)
        elem = self.dispatch_bytes(md, q.phase) if direction == "dispatch" else BF16_BYTES
        per_token = md.hidden_size * elem * q.tokens * q.imbalance
        remote = _dest_ranks(slots, md.top_k, nodes) * (nodes - 1) / nodes
        local = _dest_ranks(slots, md.top_k, q.ep) * (g - 1) / q.ep
        rdma = replace(self._device, link_bw=self._cluster.inter.bw)
        t_rdma = link_seconds(vm.model.scaled(vm.device, rdma, True), rdma, per_token * remote)
        t_nvl = link_seconds(
            vm.model.scaled(vm.device, self._device, True), self._device, per_token * local
        )
        return self._note(
            "deepep",
            Prediction(
                seconds=max(t_rdma, t_nvl),
                source="transferred",
                detail=f"DeepEP {kind} {direction} over {nodes} nodes: {INTERNODE_NOTE}",
            ),
        )

    def _internode_ll(self, q: _Query, op: str, direction: str, slots: int, nodes: int) -> float:
        """Low-latency ``direction`` across ``nodes`` nodes from DeepEP's published figures,
        never below the measured intra-node price of the same tokens
        (:func:`.deepep_ll.ll_seconds`)."""
        md = q.model
        # an NVFP4 dispatch moves the bytes of proportionally fewer fp8 tokens (as inside a node)
        ratio = (
            self.dispatch_bytes(md, q.phase) / FP8_DISPATCH_BYTES
            if direction == "dispatch"
            else 1.0
        )
        shape = {
            "num_token": q.tokens * q.imbalance * ratio,
            "hidden_size": md.hidden_size,
            "num_topk": md.top_k,
            "num_experts": slots,
        }
        floor = self._kdb.predict(op, self._device, self._engine, **shape).seconds
        t = ll_seconds(
            q.tokens * ratio, md.hidden_size, md.top_k, q.ep, direction, q.imbalance,
            self._cluster.inter.bw, floor,
        )  # fmt: skip
        detail = f"DeepEP ll {direction} over {nodes} nodes: {PUBLISHED_LL_NOTE}"
        return self._note("deepep", Prediction(seconds=t, source="transferred", detail=detail))
