"""FinDEP instance: task durations and memory limits from a model, a cluster and a cost model.

Durations (FinDEP Eqs. 1–4, 7–11, through :class:`moeplan.cost.CostModel`, so a
:class:`HardwareProfile` such as ``findep-a`` — the paper's Fig. 7 A6000 coefficients — or
the datasheet roofline):

- ``t_a(ma)``: one attention layer over ``ma`` prompts of ``S`` tokens (prefill,
  ``ctx = S``) plus the router GEMM (routing is decided on the AG before A2E).
- ``t_s(ma)``: the shared experts over ``ma·S`` tokens (0 without shared experts).
- ``me = ma·ag·top_k·S / (r2·E)`` tokens per expert per chunk (Eq. 5's last rule), times the
  routing ``imbalance`` (max/mean expert load) for the busiest expert GPU.
- ``t_e(me)``: ``ceil(E/eg)`` local experts, ``me`` tokens each.
- ``t_a2e(me) = t_e2a(me)``: ``me·ceil(E/eg)`` hidden states into each expert GPU
  (:func:`.link.a2e_function`: the profile's (ag, eg) fit, interpolated between its fitted
  splits for the others; without fits :meth:`CostModel.a2e`, the slower of sender and
  receiver links, inter-node when ``ag + eg`` spans nodes).
- Dense layers (``first_k_dense`` …): attention + dense MLP on the AG, placed first.

Memory (Algorithm 1's ``getMaxR1``) per GPU, as :class:`moeplan.cost.memory.MemoryBreakdown`
(reserve included) checked with its ``fits`` against the GPU's memory — the same total the
plan reports (``moeplan plan`` used to add the reserve a second time):

- AG: embeddings/lm-head, attention (+ router) of every layer, shared experts of MoE layers,
  dense MLPs; KV cache of ``r1·ma`` prompts; one micro-batch's live activations; per
  in-flight micro-batch its residual stream and A2E/E2A send/receive buffers.
- EG: ``ceil(E/eg)`` experts per MoE layer; per in-flight micro-batch the receive and send
  buffers of the tokens routed to this GPU (times ``imbalance``).

``batch`` caps ``r1·ma`` (samples per AG GPU per iteration, Algorithm 1's ``B``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from moeplan.cost import CostModel
from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError, require
from moeplan.planners.dep.link import a2e_function, a2e_source
from moeplan.planners.dep.schedule import DepTimes
from moeplan.specs import ClusterSpec, ModelSpec
from moeplan.units import GIB


@dataclass(frozen=True, kw_only=True)
class DepProblem:
    """One FinDEP instance as Algorithm 1 sees it.

    ``times(ma, r2)`` gives the task durations; ``max_r1(ma)`` the largest ``r1`` that fits
    memory and ``batch`` (0: even ``r1 = 1`` does not fit); ``me_per_ma`` is
    ``ag·top_k·S/E`` (so ``me = ma·me_per_ma/r2``). Tests build instances from
    α-β coefficients directly; :func:`dep_problem` builds them from specs and a cost model.
    """

    ag: int
    eg: int
    seq_len: int
    layers: int
    dense_layers: int = 0
    batch: int = 64
    r2_max: int = 32
    times: Callable[[int, int], DepTimes]
    max_r1: Callable[[int], int]
    me_per_ma: float = 0.0
    label: str = ""
    memory: Callable[[int, int], dict[str, Any]] | None = field(default=None, repr=False)
    a2e_source: str = ""  # fitted / interpolated / link (:mod:`.link`); "" when not from specs
    # prices the task times of many (ma, r2) at once before a search asks for them one by
    # one (a vectorised kernel-table pass); None: nothing to gain
    prefetch: Callable[[list[tuple[int, int]]], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        require(self.ag >= 1, f"ag ({self.ag}) must be >= 1")
        require(self.eg >= 1, f"eg ({self.eg}) must be >= 1")
        require(self.seq_len >= 1, f"seq ({self.seq_len}) must be > 0")
        require(self.layers >= 1, f"layers ({self.layers}) must be >= 1 MoE layer")
        require(self.batch >= 1, f"batch ({self.batch}) must be >= 1")
        require(self.r2_max >= 1, f"r2_max ({self.r2_max}) must be >= 1")

    def tokens(self, ma: int, r1: int) -> int:
        """Prompt tokens one iteration processes over the whole AG."""
        return r1 * ma * self.ag * self.seq_len

    @property
    def ma_max(self) -> int:
        """Largest ``ma`` with ``max_r1(ma) >= 1`` (0 if none)."""
        lo, hi = 0, self.batch  # max_r1 is non-increasing in ma
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.max_r1(mid) >= 1:
                lo = mid
            else:
                hi = mid - 1
        return lo


def alpha_beta_problem(
    *,
    ag: int,
    eg: int,
    seq_len: int,
    layers: int,
    coeffs: dict[str, tuple[float, float]],
    tokens_per_expert: float,
    mem_limit: int,
    batch: int = 64,
    r2_max: int = 32,
    dense_layers: int = 0,
) -> DepProblem:
    """An instance with the paper's linear models: ``coeffs[k] = (alpha, beta)`` for
    ``k`` in attn/shared/dense (per sample) and expert/comm (per token per expert), with
    ``me = ma * tokens_per_expert / r2`` and memory ``r1 * ma <= mem_limit``."""

    def times(ma: int, r2: int) -> DepTimes:
        me = ma * tokens_per_expert / r2
        lin = {
            k: a + b * (ma if k in ("attn", "shared", "dense") else me)
            for k, (a, b) in coeffs.items()
        }
        return DepTimes(
            attn=lin["attn"],
            shared=lin.get("shared", 0.0),
            expert=lin["expert"],
            a2e=lin["comm"],
            e2a=lin["comm"],
            dense=lin.get("dense", 0.0),
        )

    return DepProblem(
        ag=ag,
        eg=eg,
        seq_len=seq_len,
        layers=layers,
        dense_layers=dense_layers,
        batch=batch,
        r2_max=r2_max,
        times=times,
        me_per_ma=tokens_per_expert,
        max_r1=lambda ma: min(mem_limit, batch) // ma,
        label="alpha-beta",
    )


def dep_problem(
    model: ModelSpec,
    cluster: ClusterSpec,
    cm: CostModel,
    *,
    ag: int,
    eg: int,
    seq_len: int,
    layers: int | None = None,
    batch: int = 64,
    r2_max: int = 32,
    imbalance: float = 1.0,
) -> DepProblem:
    """The FinDEP instance of ``model`` on ``ag + eg`` GPUs of ``cluster`` for prompts of
    ``seq_len`` tokens; ``layers`` keeps only the first layers (the paper's reduced models).

    Raises :class:`MoeplanError` for impossible inputs (GPU count, memory), one line each.
    """
    model = _checked_model(
        model, cluster, ag=ag, eg=eg, seq_len=seq_len, layers=layers, imbalance=imbalance
    )
    n_moe = model.num_moe_layers
    local = math.ceil(model.num_experts / eg)
    gpu_mem = cluster.gpu.mem_bytes
    per_exp = ag * model.top_k * seq_len / model.num_experts  # me * r2 / ma
    mm = _MemoryModel(model=model, ag=ag, eg=eg, seq_len=seq_len, local=local, imbalance=imbalance)
    _require_weights_fit(mm, cluster)

    @lru_cache(maxsize=1024)
    def max_r1(ma: int) -> int:
        return 0 if ma < 1 else max(0, min(batch // ma, mm.max_r1(ma, gpu_mem)))

    problem = DepProblem(
        ag=ag,
        eg=eg,
        seq_len=seq_len,
        layers=n_moe,
        dense_layers=model.num_layers - n_moe,
        batch=batch,
        r2_max=r2_max,
        times=_task_times(model, cm, mm, per_exp=per_exp),
        max_r1=max_r1,
        me_per_ma=per_exp,
        label=f"{model.name}@{cluster.name}",
        memory=mm.breakdown,
        a2e_source=a2e_source(cm, ag, eg),
        prefetch=lambda pairs: cm.warm_expert_ffn(
            model, sorted({ma * per_exp / r2 * imbalance for ma, r2 in pairs}), local
        ),
    )
    _require_one_prompt_fits(problem, mm, cluster)
    return problem


def _checked_model(
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    ag: int,
    eg: int,
    seq_len: int,
    layers: int | None,
    imbalance: float,
) -> ModelSpec:
    """:func:`dep_problem`'s input checks, in order; ``model`` cut to its first ``layers``."""
    require(seq_len > 0, f"seq ({seq_len}) must be > 0")
    require(ag >= 1 and eg >= 1, f"ag ({ag}) and eg ({eg}) must both be >= 1")
    require(
        ag + eg <= cluster.num_gpus,
        f"ag + eg ({ag} + {eg} = {ag + eg}) must be <= the cluster's GPUs ({cluster.num_gpus})",
    )
    require(imbalance >= 1.0, f"imbalance ({imbalance}) must be >= 1")
    if layers is not None:
        require(layers >= 1, f"layers ({layers}) must be >= 1")
        model = model.with_layers(min(layers, model.num_layers))
    n_moe = model.num_moe_layers
    require(n_moe >= 1, f"model {model.name} with {model.num_layers} layers has no MoE layer")
    return model


def _require_weights_fit(mm: _MemoryModel, cluster: ClusterSpec) -> None:
    """The weights of an EG GPU, then of an AG GPU, within the GPU's usable memory."""
    cap = mem.usable_bytes(cluster.gpu.mem_bytes)
    for side, fixed in (("EG", mm.eg_weights), ("AG", mm.ag_weights)):
        if fixed > cap:
            raise MoeplanError(
                f"model {mm.model.name} does not fit the {side}: weights need"
                f" {fixed / GIB:.1f} GiB per {side} GPU (ag={mm.ag}, eg={mm.eg}), each"
                f" {cluster.gpu.name} has {cap / GIB:.1f} GiB usable"
            )


def _task_times(
    model: ModelSpec, cm: CostModel, mm: _MemoryModel, *, per_exp: float
) -> Callable[[int, int], DepTimes]:
    """``times(ma, r2)`` (module docstring): AG-side durations per ``ma``, EG-side per ``me``,
    each memoised."""
    ag, eg, seq_len, local, imbalance = mm.ag, mm.eg, mm.seq_len, mm.local, mm.imbalance
    a2e = a2e_function(cm, ag, eg)

    @lru_cache(maxsize=1024)
    def ag_side(ma: int) -> tuple[float, float, float]:
        tok = ma * seq_len
        attn = cm.attention_layer(model, ma, seq_len, seq_len)
        return (
            attn + cm.router(model, tok),
            cm.shared_expert(model, tok),
            attn + cm.dense_mlp(model, tok),
        )

    @lru_cache(maxsize=4096)
    def eg_side(me: float) -> tuple[float, float]:
        return cm.expert_ffn(model, me, local), a2e(me * local * model.hidden_bytes)

    @lru_cache(maxsize=8192)
    def times(ma: int, r2: int) -> DepTimes:
        attn, shared, dense = ag_side(ma)
        expert, comm = eg_side(ma * per_exp / r2 * imbalance)
        return DepTimes(attn=attn, shared=shared, expert=expert, a2e=comm, e2a=comm, dense=dense)

    return times


def _require_one_prompt_fits(problem: DepProblem, mm: _MemoryModel, cluster: ClusterSpec) -> None:
    """At least one prompt per AG GPU (``ma_max >= 1``) fits memory on both sides."""
    if problem.ma_max < 1:
        need = max(mm.ag_memory(1, 1).total, mm.eg_memory(1, 1).total)
        raise MoeplanError(
            f"one prompt of {mm.seq_len} tokens does not fit: needs {need / GIB:.1f}"
            f" GiB per GPU with the runtime reserve (ag={mm.ag}, eg={mm.eg}), a"
            f" {cluster.gpu.name} has {cluster.gpu.mem_bytes / GIB:.1f} GiB"
        )


@dataclass(frozen=True, kw_only=True)
class _MemoryModel:
    """Bytes per AG / EG GPU for ``r1`` micro-batches of ``ma`` prompts (module docstring)."""

    model: ModelSpec
    ag: int
    eg: int
    seq_len: int
    local: int
    imbalance: float

    @cached_property
    def ag_weights(self) -> float:
        m = self.model
        per_moe = (
            mem.attn_weight_bytes(m)
            + mem.shared_weight_bytes(m)
            + m.router_params * m.quant.router.bytes_per_weight
        )
        per_dense = mem.attn_weight_bytes(m) + mem.dense_mlp_weight_bytes(m)
        return (
            mem.embedding_bytes(m)
            + m.num_moe_layers * per_moe
            + (m.num_layers - m.num_moe_layers) * per_dense
        )

    @cached_property
    def eg_weights(self) -> float:
        m = self.model
        return m.num_moe_layers * mem.expert_weight_bytes(m, self.local)

    def ag_memory(self, ma: int, r1: int) -> mem.MemoryBreakdown:
        """One AG GPU: weights, KV of ``r1·ma`` prompts, one micro-batch's activations, and
        per in-flight micro-batch its residual stream and A2E/E2A buffers."""
        m, tok = self.model, ma * self.seq_len
        kv = mem.cache_bytes(m, ma, self.seq_len)  # ma prompts, each layer by its kind
        inflight = tok * m.hidden_bytes + mem.a2a_buffer_bytes(m, tok, m.top_k)
        return mem.MemoryBreakdown(
            weights=self.ag_weights,
            kv_cache=r1 * kv,
            activations=mem.activation_bytes(m, tok),
            buffers=r1 * inflight,
        )

    def eg_memory(self, ma: int, r1: int) -> mem.MemoryBreakdown:
        """One EG GPU: its experts and per in-flight micro-batch the routed tokens' buffers."""
        m = self.model
        routed = ma * self.ag * self.seq_len / self.eg * self.imbalance
        buf = mem.a2a_buffer_bytes(m, math.ceil(routed), m.top_k)
        return mem.MemoryBreakdown(
            weights=self.eg_weights, kv_cache=0.0, activations=0.0, buffers=r1 * buf
        )

    def max_r1(self, ma: int, gpu_mem_bytes: float) -> int:
        """Largest ``r1`` whose AG and EG breakdowns both fit (``MemoryBreakdown.fits``)."""
        best = []
        for side in (self.ag_memory, self.eg_memory):
            fixed = side(ma, 0).total
            per = side(ma, 1).total - fixed
            if fixed > gpu_mem_bytes:
                best.append(0)
                continue
            r1 = int((gpu_mem_bytes - fixed) // per) if per > 0 else 1 << 30
            while r1 > 0 and not side(ma, r1).fits(gpu_mem_bytes):  # float rounding guard
                r1 -= 1
            best.append(r1)
        return max(0, min(best))

    def breakdown(self, ma: int, r1: int) -> dict[str, object]:
        """Totals per side (``ag_bytes``/``eg_bytes``, reserve included) and both breakdowns."""
        a, e = self.ag_memory(ma, r1), self.eg_memory(ma, r1)
        return {
            "ag_bytes": a.total,
            "eg_bytes": e.total,
            "ag_weights": self.ag_weights,
            "eg_weights": self.eg_weights,
            "ag": a.to_dict(),
            "eg": e.to_dict(),
        }
