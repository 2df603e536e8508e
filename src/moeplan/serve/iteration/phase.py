"""Phase questions: the steady-state step of one phase alone, per GPU, without arrivals.

- ``decode``: every GPU holds ``batch_per_gpu`` sequences at KV length ``context``; one step
  advances each by ``InstanceKnobs.tokens_per_step`` tokens (1 without MTP).
- ``prefill``: every GPU takes ``tokens_per_gpu`` prompt tokens in prompts of ``isl`` tokens:
  whole prompts and one chunk of the rest, as a chunked-prefill engine fills its budget
  (:func:`prefill_batch`; 16,384 tokens at ISL 4,000 are four prompts and a 384-token chunk).

One step on the busiest GPU, per decoder layer (``W = attn_tp * attn_dp`` GPUs, each attention
DP rank holding ``attn_tp`` GPUs' share of the sequences):

- ``attention``: the attention block of the rank's sequences — the wide-EP MLA tables when the
  MoE runs on DeepEP without attention TP (:meth:`CostModel.wide_mla`), else
  :meth:`CostModel.attention_layer` (a ``--kv-dtype fp8`` cache reads half the KV bytes:
  the difference at the roofline's HBM rate) — plus the TP all-reduce of its output and the
  layer's two fused residual-add RMSNorms (:meth:`CostModel.layer_norms`, memory-bound:
  :mod:`moeplan.cost.elementwise`).
- ``moe``: router, shared experts (on DeepEP without attention TP: the wide-EP MLP tables,
  :meth:`CostModel.wide_shared_expert`) and the routed experts' GEMMs; ``dispatch`` / ``combine``:
  DeepEP's kernels (:mod:`moeplan.cost.wideep`) or, on the fused-MoE path, the engine's
  gather of the MoE group's tokens and the reduction of the outputs
  (:mod:`moeplan.planners.ep_comm`; without an engine, the all-to-all of the routed
  copies each way). The busiest EP rank carries ``imbalance`` times the mean load:
  the routing profile's per-expert load placed by the project's EPLB
  (:func:`moeplan.planners.placement.eplb.rebalance_experts`, with the layout's redundant
  experts) or contiguously without redundant experts; 1 for a static profile; times the
  caller's factor; on the DeepEP path times the busiest rank of one micro-batch drawn from
  the routing at its token count (:mod:`moeplan.cost.ep_spread`, priced in
  :class:`moeplan.cost.wideep.WideEP`; ``PhaseResult.imbalance`` reports the product) —
  none with ``knobs.routing = "balanced"`` (every rank its exact share in every batch).
- ``dense``: dense layers' MLP (sharded ``dense_tp``) and its all-reduce.
- ``other``: the final norm, the lm-head GEMM (one row per sequence) and MTP's draft passes.

Two-batch overlap (``knobs.tbo``): the rank's batch split in two micro-batches by SGLang's rule
(:mod:`moeplan.serve.iteration.tbo`: decode ``bs // 2`` sequences, none with one sequence;
prefill at the balanced prompt boundary, or at half the tokens with a prompt cut across the
two), each priced at its own size (the split's cost: smaller kernels, and in prefill the
compute on the SMs DeepEP's normal kernels leave, :func:`moeplan.cost.wideep.tbo_gemm_factor`),
scheduled by :func:`moeplan.cost.overlap.alternating_makespan` as two chains of ``compute``
(attention, experts, dense) and ``comm`` (dispatch, combine) pieces; ``overlap`` (negative) is
the makespan minus the sum of every piece.

Weight offload (``knobs.offload``, :mod:`moeplan.cost.offload`): the offloaded layers' routed
experts live in host memory and cross the GPU's host link every forward pass, prefetched
``prefetch_step`` offloaded layers ahead on a copy stream; the memory holds the GPU's share
without them plus the prefetch buffers. The pass is :func:`moeplan.cost.offload.offloaded_span`
over the layers' times (each layer's pieces in the order above; under two-batch overlap both
micro-batches' pieces of the layer, scaled to the overlapped pass) and the work after the last
layer; ``offload`` in the breakdown is what it adds: the compute stream's wait for copies the
layers in between do not cover. :meth:`PhaseModel.fit_offload` finds the smallest offload the
engine's flags express that makes the phase fit when the weights alone do not.

MTP (``knobs.mtp = N``, decode): the verify pass is the step above with ``N + 1`` tokens per
sequence (attention priced as ``N + 1`` decode queries per sequence: an upper bound, the
kernel reads the KV once per sequence), plus ``N`` draft passes of the MTP module (one MoE
decoder layer and the lm-head at one token per sequence) in ``other``, not overlapped.

Pure: the cost model is handed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from moeplan.cost import CostModel
from moeplan.cost import memory as mem
from moeplan.cost.ep_spread import balanced_spread
from moeplan.cost.offload import WeightOffload, layer_bytes, offloaded_span
from moeplan.cost.overlap import Piece, alternating_makespan
from moeplan.errors import MoeplanError, require
from moeplan.planners.ep_comm import fused_ep_seconds
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.balance import layer_imbalances
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.tbo import extend_cut
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile

PHASES = ("prefill", "decode")
#: the parts a phase step's seconds are broken into (:attr:`PhaseResult.breakdown`)
BREAKDOWN_KEYS = ("attention", "moe", "dispatch", "combine", "dense", "other")
COMM_KEYS = ("dispatch", "combine")
#: the kinds an overlapped prefill slows by :func:`moeplan.cost.wideep.tbo_gemm_factor`:
#: every compute kind (DeepGEMM's cap is SGLang's; the attention core's share is an
#: assumption, cost/wideep.py; bench/bench_published.py prints the rows without it)
TBO_SLOWED = tuple(k for k in BREAKDOWN_KEYS if k not in COMM_KEYS)
MAX_PER_GPU = 1 << 22  # a bound on the phase inputs (tokens or sequences per GPU)


class MicroBatch:
    """Groups of ``seqs`` sequences of ``q`` new tokens at KV length ``ctx`` (keys after the
    new tokens) on one attention rank; empty groups are dropped."""

    __slots__ = ("groups",)

    def __init__(self, *groups: tuple[int, int, int]) -> None:
        self.groups = tuple(g for g in groups if g[0] > 0 and g[1] > 0)

    @property
    def seqs(self) -> int:
        return sum(g[0] for g in self.groups)

    @property
    def tokens(self) -> int:
        return sum(g[0] * g[1] for g in self.groups)

    @property
    def decode(self) -> bool:
        """One new token per sequence (a decode step; priced with the decode kernels)."""
        return all(g[1] == 1 for g in self.groups)

    def cut(self, tokens: int) -> tuple[MicroBatch, MicroBatch]:
        """The first ``tokens`` tokens in group order and the rest; a sequence cut in two
        leaves its first part at its own keys and its second attending to all of them."""
        a: list[tuple[int, int, int]] = []
        b: list[tuple[int, int, int]] = []
        for seqs, q, ctx in self.groups:
            if tokens >= seqs * q:
                a.append((seqs, q, ctx))
                tokens -= seqs * q
                continue
            whole, part = divmod(tokens, q)
            a += [(whole, q, ctx), (1 if part else 0, part, ctx - q + part)]
            b += [(1 if part else 0, q - part, ctx), (seqs - whole - (1 if part else 0), q, ctx)]
            tokens = 0
        return MicroBatch(*a), MicroBatch(*b)


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseResult:
    """One phase's steady step on the busiest GPU (seconds; ``breakdown`` by :data:`BREAKDOWN_KEYS`,
    plus ``overlap`` <= 0 under two-batch overlap)."""

    phase: str
    per_gpu: int
    context: int
    step_s: float
    tokens_per_s_per_gpu: float
    breakdown: dict[str, float]
    tokens_per_step: float
    imbalance: float
    memory_bytes: dict[str, float] = field(default_factory=dict)


class PhaseModel:
    """Prices one phase's step for (model, cluster, cost, layout, knobs); memoised pieces."""

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        cost: CostModel,
        layout: Layout,
        knobs: InstanceKnobs,
        routing: RoutingProfile | None = None,
        imbalance: float = 1.0,
    ) -> None:
        layout.validate(model, cluster)
        require(layout.pp == 1, f"--phase prices one stage: layout.pp ({layout.pp}) must be 1")
        self.model, self.cluster, self.cost, self.layout, self.knobs = (
            model,
            cluster,
            cost,
            layout,
            knobs,
        )
        gpn = cluster.nvlink_domain  # NVLink peers: a group past them crosses the network
        self._nodes = {
            "attn": -(-layout.attn_tp // gpn),
            "dense": -(-layout.dense_tp // gpn),
            "ep": -(-layout.stage_gpus // gpn),
        }
        route = routing if routing is not None else RoutingProfile.static(model.top_k)
        self._imbs = layer_imbalances(route, model, layout, imbalance, self._nodes["ep"])
        self._k = route.mean_over_layers()
        self._wide = cost.wide_ep if knobs.a2a == "deepep" else None
        if knobs.a2a == "deepep" and self._wide is None:
            raise MoeplanError(
                "--a2a deepep needs an engine's kernel tables (--cost-engine engine)"
            )

    # ---- pieces of one layer on one micro-batch ------------------------------------------
    def _attention(self, mb: MicroBatch) -> float:
        t = sum(self._attention_group(*g) for g in mb.groups)
        md, cm, lay = self.model, self.cost, self.layout
        if lay.attn_tp > 1:
            nbytes = mb.tokens * md.hidden_bytes
            t += cm.collective("all_reduce", nbytes, lay.attn_tp, self._nodes["attn"])
        t += cm.layer_norms(md, mb.tokens)  # the layer's two fused residual-add RMSNorms
        return t + cm.hyper_connections(md, mb.tokens)  # mHC (mean over layers), 0 without

    def _attention_group(self, seqs: int, q: int, ctx: int) -> float:
        md, cm, lay, kv = self.model, self.cost, self.layout, self.knobs.kv_stored
        t = cm.wide_mla(md, seqs, q, ctx, kv) if self._wide and lay.attn_tp == 1 else None
        if t is None:  # a sparse-attention model: its module tables at the stored KV dtype
            t = cm.sparse_mixers(md, seqs, q, ctx, lay.attn_tp, kv)
        if t is None:
            t = cm.attention_layer(md, seqs, q, ctx, lay.attn_tp, hc=False)
            if self.knobs.kv_scale != 1.0:  # stored KV of another width than the tables'
                kv_read = seqs * ctx * mem.kv_bytes_per_token_layer(md, lay.attn_tp)
                saved = kv_read * (1.0 - self.knobs.kv_scale) / (cm.cluster.gpu.mem_bw * 0.8)
                t = max(0.5 * t, t - saved)  # 0.8: CostModel DEFAULT_BW_EFF
        return t

    def _moe(self, mb: MicroBatch, imb: float) -> tuple[float, float, float, float]:
        """(router + shared experts, dispatch, routed GEMMs, combine) of one MoE layer."""
        md, cm, lay = self.model, self.cost, self.layout
        t_gpu = mb.tokens / lay.attn_tp  # tokens entering the EP group per GPU
        pre = cm.router(md, mb.tokens) + cm.shared_expert(md, mb.tokens, lay.attn_tp)
        if self._wide is not None:
            shared = cm.wide_shared_expert(md, mb.tokens, mb.decode) if lay.attn_tp == 1 else None
            if shared is not None:  # the wide-EP MLP tables (CostModel.wide_shared_expert)
                pre = cm.router(md, mb.tokens) + shared
            w = self._wide.moe(
                md,
                t_gpu,
                lay.moe_ep,
                redundant=lay.redundant_experts,
                imbalance=imb,
                phase="generation" if mb.decode else "context",
                batch_spread=self.knobs.routing == "random",
            )
            return pre, w.dispatch, w.gemm, w.combine
        e_local = (md.num_experts + lay.redundant_experts) / lay.moe_ep
        copies = t_gpu * self._k * imb
        gemm = cm.expert_ffn(md, copies / e_local, e_local, lay.moe_tp)
        tokens = mb.tokens * lay.attn_dp  # the MoE group's tokens: every attention-DP rank's
        fused = fused_ep_seconds(
            cm, md, lay, self.cluster.nvlink_domain, not mb.decode, tokens, mb.tokens
        )
        if fused is not None:  # the engine's gather / reduce collectives (planners/ep_comm)
            return pre, fused[0], gemm, fused[1]
        a2a = 0.0
        if lay.moe_ep > 1:
            nbytes = copies * md.hidden_bytes
            a2a = cm.collective("all_to_all", nbytes, lay.moe_ep, self._nodes["ep"])
        if lay.moe_tp > 1:
            a2a += cm.collective("all_reduce", t_gpu * md.hidden_bytes, lay.moe_tp, 1) / 2
        return pre, a2a, gemm, a2a

    def _dense(self, mb: MicroBatch) -> float:
        md, cm, lay = self.model, self.cost, self.layout
        tokens = math.ceil(mb.tokens * lay.dense_tp / lay.attn_tp)
        t = cm.dense_mlp(md, tokens, lay.dense_tp)
        if lay.dense_tp > 1:
            nbytes = tokens * md.hidden_bytes
            t += cm.collective("all_reduce", nbytes, lay.dense_tp, self._nodes["dense"])
        return t

    def steps(self, mb: MicroBatch, layers: int | None = None) -> list[tuple[str, float]]:
        """``(key, seconds)`` of every step of the first ``layers`` decoder layers (all by
        default) for ``mb``, in execution order (module docstring)."""
        md = self.model
        attn, dense = self._attention(mb), None
        moe_memo: dict[float, tuple[float, float, float, float]] = {}
        out: list[tuple[str, float]] = []
        j = 0
        for layer in range(md.num_layers if layers is None else layers):
            out.append(("attention", attn))
            if not md.is_moe_layer(layer):
                dense = self._dense(mb) if dense is None else dense
                out.append(("dense", dense))
                continue
            imb = self._imbs[j % len(self._imbs)]
            j += 1
            if imb not in moe_memo:
                moe_memo[imb] = self._moe(mb, imb)
            pre, disp, gemm, comb = moe_memo[imb]
            out += [("moe", pre), ("dispatch", disp), ("moe", gemm), ("combine", comb)]
        return out

    def lm_head(self, seqs: int) -> float:
        md = self.model
        return self.cost.gemm(seqs, md.vocab_size / self.layout.attn_tp, md.hidden_size)

    # ---- one step -------------------------------------------------------------------------
    def _forward(self, halves: list[MicroBatch]) -> dict[str, float]:
        """Breakdown of one forward pass over ``halves`` (one micro-batch, or two overlapped)."""
        chains = [self.steps(mb) for mb in halves]
        if len(halves) > 1 and self._wide is not None:  # DeepEP normal keeps its SMs busy
            f = self._wide.tbo_gemm_factor("generation" if halves[0].decode else "context")
            chains = [[(k, s * f if k in TBO_SLOWED else s) for k, s in c] for c in chains]
        out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        for chain in chains:
            for key, sec in chain:
                out[key] += sec
        tail = self.lm_head(sum(mb.seqs for mb in halves))
        tail += self.cost.final_norm(self.model, sum(mb.tokens for mb in halves))
        out["other"] += tail
        if len(halves) > 1:
            span = alternating_makespan(
                [[Piece("comm" if k in COMM_KEYS else "compute", s) for k, s in c] for c in chains]
            )
            out["overlap"] = span - sum(sum(s for _, s in c) for c in chains)
        if self.knobs.offload is not None:
            out["offload"] = self._offload_wait(chains, sum(out.values()), tail)
        return out

    def _offload_wait(
        self, chains: list[list[tuple[str, float]]], span: float, tail: float
    ) -> float:
        """Seconds the weight offload adds to a forward pass of ``span`` seconds whose layers'
        pieces are ``chains`` and whose work after the last layer takes ``tail`` (module
        docstring)."""
        off = self.knobs.offload
        assert off is not None
        layers = [0.0] * self.model.num_layers
        for chain in chains:
            i = -1
            for key, sec in chain:
                i += key == "attention"  # every layer opens with its attention block
                layers[i] += sec
        scale = (span - tail) / sum(layers) if sum(layers) > 0 else 1.0
        compute = [x * scale for x in layers] + [tail]
        wait = offloaded_span(compute, *self.offload_transfers(off), off.prefetch_step) - span
        return max(0.0, wait)  # 0 up to rounding when every copy is covered

    def offload_transfers(self, off: WeightOffload) -> tuple[list[float], list[int]]:
        """(seconds each offloaded layer's copy takes over the host link, the offloaded
        layers)."""
        md, lay, gpu = self.model, self.layout, self.cluster.gpu
        assert gpu.host_link_bw is not None  # WeightOffload.check
        e_local = (md.num_experts + lay.redundant_experts) / lay.moe_ep
        layers = list(off.layers(md.num_layers))
        secs = [layer_bytes(md, i, e_local, lay.moe_tp) / gpu.host_link_bw for i in layers]
        return secs, layers

    def step(self, phase: str, per_gpu: int, context: int) -> PhaseResult:
        """The steady step of ``phase`` with ``per_gpu`` sequences (decode) or prompt tokens
        (prefill) per GPU at ``context`` (KV length for decode, prompt length for prefill)."""
        require(phase in PHASES, f"--phase ({phase!r}) must be one of {', '.join(PHASES)}")
        require(
            1 <= per_gpu <= MAX_PER_GPU,
            f"{'--batch-per-gpu' if phase == 'decode' else '--tokens-per-gpu'} ({per_gpu}) "
            f"must be in 1..{MAX_PER_GPU}",
        )
        require(1 <= context <= MAX_PER_GPU, f"context ({context}) must be in 1..{MAX_PER_GPU}")
        kn, lay = self.knobs, self.layout
        full, seqs = self._batch(phase, per_gpu, context)
        if phase == "decode":
            split = seqs // 2 * (kn.mtp + 1)  # SGLang: bs // 2 sequences (tbo.py)
        else:
            split = extend_cut([q for n, q, _ in full.groups for _ in range(n)]) or 0
        halves = list(full.cut(split)) if kn.tbo and split else [full]
        parts = self._forward(halves)
        if phase == "decode" and kn.mtp:
            one = MicroBatch((seqs, 1, context))
            draft = sum(s for _, s in self.steps(one, layers=_first_moe(self.model) + 1)[-5:])
            head = self.lm_head(seqs) + self.cost.final_norm(self.model, seqs)
            parts["other"] += kn.mtp * (draft + head)
        step_s = sum(parts.values())
        made = seqs * kn.tokens_per_step if phase == "decode" else full.tokens
        return PhaseResult(
            phase=phase,
            per_gpu=per_gpu,
            context=context,
            step_s=step_s,
            tokens_per_s_per_gpu=made / lay.attn_tp / step_s,
            breakdown=parts,
            tokens_per_step=kn.tokens_per_step if phase == "decode" else 1.0,
            imbalance=max(self._imbs, default=1.0) * self._spread(halves[0]),
            memory_bytes=self.memory(seqs, context, full.tokens),
        )

    def _batch(self, phase: str, per_gpu: int, context: int) -> tuple[MicroBatch, int]:
        """The step's tokens on one attention rank and its sequences (module docstring)."""
        kn, lay = self.knobs, self.layout
        if phase == "decode":
            seqs = per_gpu * lay.attn_tp
            return MicroBatch((seqs * (kn.mtp + 1), 1, context)), seqs
        require(kn.mtp == 0, "--mtp applies to --phase decode")
        full = prefill_batch(per_gpu * lay.attn_tp, context)
        return full, full.seqs

    def fit_offload(self, phase: str, per_gpu: int, context: int) -> WeightOffload | None:
        """The smallest weight offload the engine's flags express (fewest offloaded layers,
        then the fewest per group, prefetch step 1: the engines' default) under which the
        phase fits, when the weights with the step alone do not fit the GPU (a KV cache that
        does not fit is the batch's to shrink, not offloading's); None when the phase fits
        as it is, when only its KV does not, or when no offload makes it fit."""
        md = self.model
        full, seqs = self._batch(phase, per_gpu, context)
        if self._breakdown(seqs, context, full.tokens, None).fits(self.cluster.gpu.mem_bytes):
            return None
        if self._breakdown(0, context, full.tokens, None).fits(self.cluster.gpu.mem_bytes):
            return None  # the weights and the step fit: the KV is what does not
        n = md.num_layers
        cands = [WeightOffload(g, k) for g in range(1, n + 1) for k in range(1, g + 1)]
        cands.sort(key=lambda o: (len(o.layers(n)), o.num_in_group, o.group_size))
        for off in cands:
            if not any(md.is_moe_layer(i) for i in off.layers(n)):
                continue
            if self._breakdown(seqs, context, full.tokens, off).fits(self.cluster.gpu.mem_bytes):
                return off
        return None

    def _spread(self, mb: MicroBatch) -> float:
        """The busiest rank of one micro-batch's routing on the wide-EP path (what
        :class:`moeplan.cost.wideep.WideEP` prices: :mod:`moeplan.cost.ep_spread`); 1 else."""
        if self._wide is None or self.knobs.routing == "balanced":
            return 1.0
        md, lay = self.model, self.layout
        t_gpu = mb.tokens / lay.attn_tp
        return balanced_spread(t_gpu * lay.moe_ep, lay.moe_ep, md.top_k, md.num_experts)

    def _breakdown(
        self, seqs: int, context: int, tokens: int, offload: WeightOffload | None
    ) -> mem.MemoryBreakdown:
        """The one memory model's bytes per GPU of a step (no fit check) under ``offload``."""
        md, lay = self.model, self.layout
        shape = replace(lay.memory_shape(md), kv_scale=self.knobs.kv_scale, offload=offload)
        return mem.instance_breakdown(md, shape, seqs * context, tokens * lay.attn_dp)

    def memory_need(
        self, phase: str, per_gpu: int, context: int, offload: WeightOffload | None
    ) -> float:
        """Bytes per GPU the phase step needs under ``offload`` (no fit check)."""
        full, seqs = self._batch(phase, per_gpu, context)
        return self._breakdown(seqs, context, full.tokens, offload).total

    def memory(self, seqs: int, context: int, tokens: int) -> dict[str, float]:
        """Bytes per GPU (weights with the redundant experts, KV of ``seqs`` x ``context`` at
        the KV dtype, activations and all-to-all buffers of a step of ``tokens`` per
        attention rank, reserve) by the one memory model
        (:func:`moeplan.cost.memory.instance_breakdown`); raises when over the GPU."""
        lay, gpu = self.layout, self.cluster.gpu
        b = self._breakdown(seqs, context, tokens, self.knobs.offload)
        out = {
            "weights": b.weights,
            "kv_cache": b.kv_cache,
            "activations": b.activations,
            "a2a_buffers": b.buffers,
            "reserved": b.reserved,
        }
        if not b.fits(gpu.mem_bytes):
            raise MoeplanError(
                f"phase step needs {b.total / 1024**3:.1f} GiB per GPU ({lay.label}, "
                f"{seqs} sequences x {context} tokens of KV"
                + (f", weight offload {off.label}" if (off := self.knobs.offload) else "")
                + f"); {gpu.name} has "
                f"{gpu.mem_bytes / 1024**3:.1f} GiB"
            )
        return out


def prefill_batch(tokens: int, isl: int) -> MicroBatch:
    """A prefill step's ``tokens`` on one attention rank in prompts of ``isl`` tokens, as a
    chunked-prefill engine fills its token budget: ``tokens // isl`` whole prompts and a
    chunk of the remaining ``r = tokens % isl`` tokens of one more prompt (SGLang's
    ``PrefillAdder.add_one_req`` truncates the prompt that does not fit to the budget left,
    ``trunc_len = self.rem_chunk_tokens // self.page_size * self.page_size``, page size 1 by
    default; python/sglang/srt/managers/schedule_policy.py, v0.5.x), never rounded up to a
    whole prompt. In the steady state the cut chunk sits anywhere in
    its prompt; it is priced at keys ``(isl + r) / 2`` after it, so its queries see
    ``isl / 2`` keys on average, as a prompt's tokens do over its whole prefill."""
    whole, rest = divmod(tokens, isl)
    return MicroBatch((whole, isl, isl), (1 if rest else 0, rest, (isl + rest) // 2))


def _first_moe(model: ModelSpec) -> int:
    return model.moe_layers[0] if model.moe_layers else model.num_layers - 1
