"""SMIDT module cost tables: ``Dur`` and ``Mem`` of every module under every ``(t, e, d)``.

Paper 001, §4.2 (Eq. 1): the model is the sequence of ``2N`` modules ``[attn_1, moe_1, …]``
(a dense layer's MLP is a ``mlp`` module); with ``r = P/S`` GPUs per stage, every module picks
``t·e·d = r`` (attention and dense MLP: ``e = 1``, ``d`` = attention DP; MoE: ``t`` TP inside
experts, ``e`` EP, ``d`` DPMoE replicas). The paper profiles ``Dur``/``Mem`` on GPUs; moeplan
takes them from the shared :class:`moeplan.cost.CostModel` for the workload.

Cost of one module, per micro-batch (``mb = ceil(batch / S)`` requests; ``batch`` is the number
of requests in flight in the whole pipeline), summed over the workload's passes — prefill
(``mb`` sequences of ``isl`` tokens) and/or ``osl`` decode steps at mean context
``isl + osl/2``:

* **Layout between modules** is canonical: tokens sharded over the stage's ``r`` GPUs. A module
  with ``t > 1`` all-gathers its input over its TP group and reduce-scatters its output
  (``AG + RS`` moves what one all-reduce moves: priced as the cost model's ``all_reduce``,
  the engine's custom all-reduce inside a node when it has one, as MixServe's evaluator and
  the serving model price a TP block), which also *is* the re-sharding between attention
  and MoE layouts. Departure: this makes each module's cost
  independent of its neighbours' choices — what the per-stage knapsack (and an exact check)
  needs; the paper leaves re-sharding implicit in its profiles.
* **Attention / MLP**: ``ceil(mb/d)`` sequences per DP group, heads (or MLP columns) split ``t``.
* **MoE**: replica group of ``t·e`` GPUs serves ``n = tokens/d``; each EP rank's ``n/e`` tokens
  go through dispatch and combine all-to-all over ``e`` ranks (spanning
  ``min(e, ceil(t·e / nvlink_domain))`` NVLink domains — DPMoE shrinks the group and its span), routed
  experts at ``n·k/E`` tokens each (``k`` = the layer's mean activated experts, × the EP
  imbalance when the profile has expert loads), ``E/e`` local experts split ``t``, shared
  experts on ``n/e`` tokens. Addition: only the local experts that some token picks run (and
  have their weights read) — ``E/e · (1 - (1 - 1/E)^{n·k})`` of them under uniform routing —
  which matters for small decode batches; their tokens are spread over those experts.
* **Memory per GPU**: weights (``moeplan.cost.memory`` conventions) plus the KV cache of all
  ``batch`` requests at ``isl + osl`` context (``ceil(batch/d)`` per DP group); the first module
  carries the embedding, the last the lm-head (vocab-parallel over ``r``). Activation and
  all-to-all buffers are one per-GPU reserve (:func:`memory_reserve`), not per module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from moeplan.cost import CostModel, memory
from moeplan.errors import require
from moeplan.specs import ModelSpec, RoutingProfile, Workload

KINDS = ("attn", "moe", "mlp")
PREFILL_CHUNK = 8192  # tokens per forward step (SGLang's chunked-prefill size) for buffers


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleRef:
    """One of the 2N modules: position, kind, decoder layer, MoE-layer index, mean k."""

    index: int
    kind: str
    layer: int
    moe_index: int = -1
    mean_k: float | None = None

    def __post_init__(self) -> None:
        require(self.kind in KINDS, f"module.kind ({self.kind!r}) must be one of {KINDS}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """A module's parallel degrees: ``tp * ep * dpmoe == r`` (``dpmoe`` = attention DP)."""

    tp: int
    ep: int
    dpmoe: int

    @property
    def size(self) -> int:
        return self.tp * self.ep * self.dpmoe

    def short(self) -> str:
        return (
            f"t{self.tp}e{self.ep}d{self.dpmoe}" if self.ep > 1 or self.dpmoe > 1 else f"t{self.tp}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleCost:
    """Duration (s) split into compute and communication, and memory per GPU (bytes)."""

    compute_s: float
    comm_s: float
    mem_bytes: float

    @property
    def time_s(self) -> float:
        return self.compute_s + self.comm_s


@dataclass(frozen=True, kw_only=True, slots=True)
class StageContext:
    """What a module's cost depends on besides its choice: workload, PP shape, cluster."""

    model: ModelSpec
    workload: Workload
    routing: RoutingProfile
    pp: int
    r: int
    #: GPUs of one NVLink domain (the node, or an NVL72 rack): a group past them crosses the
    #: network
    nvlink_domain: int

    @property
    def micro_batch(self) -> int:
        return math.ceil(self.workload.batch / self.pp)

    def passes(self) -> list[tuple[float, int, int, float]]:
        """(repeats, sequences, new tokens per sequence, context) of each pass."""
        w, out = self.workload, []
        if w.phase in ("prefill", "both"):
            out.append((1.0, self.micro_batch, w.isl, float(w.isl)))
        if w.phase in ("decode", "both") and w.osl > 0:
            out.append((float(w.osl), self.micro_batch, 1, w.isl + w.osl / 2.0))
        return out

    def tokens_per_microbatch(self) -> float:
        return sum(rep * seqs * q for rep, seqs, q, _ in self.passes())

    def span(self, members: int, stride: int = 1) -> int:
        """NVLink domains spanned by ``members`` ranks ``stride`` apart inside a stage."""
        return max(1, min(members, math.ceil(members * stride / self.nvlink_domain)))


Evaluator = Callable[[ModuleRef, Choice, StageContext], ModuleCost]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleTable:
    """Every allowed choice of one module with its cost."""

    module: ModuleRef
    choices: tuple[Choice, ...]
    costs: tuple[ModuleCost, ...]

    def times(self) -> np.ndarray:
        return np.array([c.time_s for c in self.costs])

    def mems(self) -> np.ndarray:
        return np.array([c.mem_bytes for c in self.costs])


def modules_of(model: ModelSpec, routing: RoutingProfile) -> list[ModuleRef]:
    """The 2N modules in order; MoE modules carry their layer's mean k."""
    if routing.mean_k is not None:
        require(
            len(routing.mean_k) == model.num_moe_layers,
            f"routing profile length ({len(routing.mean_k)}) must equal the model's MoE "
            f"layers ({model.num_moe_layers})",
        )
    out: list[ModuleRef] = []
    moe_i = 0
    for layer in range(model.num_layers):
        out.append(ModuleRef(index=len(out), kind="attn", layer=layer))
        if model.is_moe_layer(layer):
            out.append(
                ModuleRef(
                    index=len(out),
                    kind="moe",
                    layer=layer,
                    moe_index=moe_i,
                    mean_k=min(routing.k(moe_i), float(model.num_experts)),
                )
            )
            moe_i += 1
        else:
            out.append(ModuleRef(index=len(out), kind="mlp", layer=layer))
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choices_for(module: ModuleRef, model: ModelSpec, r: int) -> list[Choice]:
    """Allowed ``(t, e, d)`` with ``t·e·d = r``: heads/columns divisible by ``t``, experts by ``e``."""
    out = []
    for t in _divisors(r):
        if module.kind == "attn":
            if model.num_attention_heads % t == 0:
                out.append(Choice(tp=t, ep=1, dpmoe=r // t))
        elif module.kind == "mlp":
            if model.dense_intermediate_size % t == 0:
                out.append(Choice(tp=t, ep=1, dpmoe=r // t))
        elif model.moe_intermediate_size % t == 0:
            out += [
                Choice(tp=t, ep=e, dpmoe=r // (t * e))
                for e in _divisors(r // t)
                if model.num_experts % e == 0
            ]
    return out


def _tp_comm(cm: CostModel, ctx: StageContext, tokens: float, t: int) -> float:
    """All-gather in + reduce-scatter out over the TP group (canonical layout): one
    all-reduce of the block's tokens (module docstring)."""
    return cm.collective("all_reduce", tokens * ctx.model.hidden_bytes, t, ctx.span(t))


def _dense_cost(cm: CostModel, m: ModuleRef, c: Choice, ctx: StageContext) -> tuple[float, float]:
    comp = comm = 0.0
    for rep, seqs, q, context in ctx.passes():
        group_seqs = math.ceil(seqs / c.dpmoe)
        tokens = group_seqs * q
        if m.kind == "attn":
            comp += rep * cm.attention_layer(
                ctx.model, group_seqs, q, int(context), tp=c.tp, layer=m.layer
            )
        else:
            comp += rep * cm.dense_mlp(ctx.model, tokens, tp=c.tp)
        comm += rep * _tp_comm(cm, ctx, tokens, c.tp)
    return comp, comm


def _moe_cost(cm: CostModel, m: ModuleRef, c: Choice, ctx: StageContext) -> tuple[float, float]:
    model, k = ctx.model, float(m.mean_k if m.mean_k is not None else ctx.model.top_k)
    skew = ctx.routing.imbalance(m.moe_index, groups=c.ep) if c.ep > 1 else 1.0
    comp = comm = 0.0
    for rep, seqs, q, _ in ctx.passes():
        rank_tokens = math.ceil(seqs / c.dpmoe) * q / c.ep  # tokens owned by one EP rank
        local = model.num_experts / c.ep
        # experts hit at least once by the group's n·k picks (uniform routing): small decode
        # batches read only those experts' weights, not all local ones
        hit = local * -math.expm1(rank_tokens * c.ep * k * math.log1p(-1 / model.num_experts))
        active = max(min(local, hit), 1e-9)
        per_expert = rank_tokens * c.ep * k / model.num_experts * skew * local / active
        comp += rep * (
            cm.router(model, rank_tokens)
            + cm.expert_ffn(model, per_expert, active, tp=c.tp)
            + cm.shared_expert(model, rank_tokens, tp=c.tp)
        )
        a2a = rank_tokens * k * skew * model.hidden_bytes
        comm += rep * (
            2 * cm.collective("all_to_all", a2a, c.ep, ctx.span(c.ep, c.tp))
            + _tp_comm(cm, ctx, rank_tokens, c.tp)
        )
    return comp, comm


def module_memory(m: ModuleRef, c: Choice, ctx: StageContext, last_index: int) -> float:
    """Weights + KV cache per GPU of one module under choice ``c`` (bytes)."""
    model, w = ctx.model, ctx.workload
    if m.kind == "attn":
        seqs = math.ceil(w.batch / c.dpmoe)  # the layer's kind: window, compression, state
        kv = memory.cache_bytes(model, seqs, w.isl + w.osl, c.tp, range(m.layer, m.layer + 1))
        mem = memory.attn_weight_bytes(model, c.tp) + kv
    elif m.kind == "mlp":
        mem = memory.dense_mlp_weight_bytes(model, c.tp)
    else:
        mem = memory.expert_weight_bytes(
            model, model.num_experts / c.ep, c.tp
        ) + memory.shared_weight_bytes(model, c.tp)
    if m.index == 0:
        mem += model.embedding_params * model.quant.embedding.bytes_per_weight / ctx.r
    if m.index == last_index:
        mem += model.lm_head_params * model.quant.lm_head.bytes_per_weight / ctx.r
    return float(mem)


def cost_model_evaluator(cm: CostModel) -> Evaluator:
    """The default evaluator: module durations from ``cm``, memory from ``cost.memory``."""

    def evaluate(m: ModuleRef, c: Choice, ctx: StageContext) -> ModuleCost:
        comp, comm = (_moe_cost if m.kind == "moe" else _dense_cost)(cm, m, c, ctx)
        last = 2 * ctx.model.num_layers - 1
        return ModuleCost(compute_s=comp, comm_s=comm, mem_bytes=module_memory(m, c, ctx, last))

    return evaluate


def build_tables(
    modules: Sequence[ModuleRef], ctx: StageContext, evaluate: Evaluator
) -> list[ModuleTable]:
    """Cost table of every module for the stage context (one PP degree)."""
    tables = []
    for m in modules:
        choices = choices_for(m, ctx.model, ctx.r)
        require(
            len(choices) > 0,
            f"module {m.kind}{m.layer}: no (tp, ep, dpmoe) with "
            f"tp*ep*dpmoe = {ctx.r} divides its heads/experts",
        )
        tables.append(
            ModuleTable(
                module=m, choices=tuple(choices), costs=tuple(evaluate(m, c, ctx) for c in choices)
            )
        )
    return tables


def memory_reserve(ctx: StageContext) -> float:
    """Per-GPU bytes kept out of the knapsack: runtime reserve, activations, A2A buffers.

    Sized for the largest forward step of one micro-batch on one GPU (conservative: all its
    tokens, as with ``t = r``), capped at a chunked-prefill step of ``PREFILL_CHUNK`` tokens.
    """
    model = ctx.model
    tokens = min(PREFILL_CHUNK, max((seqs * q for _, seqs, q, _ in ctx.passes()), default=1))
    k = max(ctx.routing.k(i) for i in range(max(1, model.num_moe_layers)))
    return (
        memory.RESERVED_BYTES
        + memory.activation_bytes(model, tokens, tp=1)
        + memory.a2a_buffer_bytes(model, math.ceil(tokens / ctx.r), k)
    )


def p2p_seconds(cm: CostModel, ctx: StageContext, boundary: int) -> float:
    """Activation send from stage ``boundary`` to the next, per micro-batch, one GPU's shard
    to its counterpart GPU: :meth:`CostModel.p2p`, which prices one GPU pair's link (on a
    full-mesh fabric such as HCCS, one of the ``nvlink_domain - 1`` pair links)."""
    inter = ctx.r >= ctx.nvlink_domain or ((boundary + 1) * ctx.r) % ctx.nvlink_domain == 0
    return sum(
        rep * cm.p2p(seqs * q * ctx.model.hidden_bytes / ctx.r, inter)
        for rep, seqs, q, _ in ctx.passes()
    )
