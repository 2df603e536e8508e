"""Engine knobs: an engine's scheduler with its defaults for a GPU, and the candidates a
search tries; the instance knobs a deployment search tries (:data:`KNOB_ENTRIES`: the MoE
all-to-all backend, two-batch overlap, redundant experts, multi-token prediction (the user's
only), the scheduler's host overlap (on where the engine runs it) — one entry each,
:func:`knob_variants`).

The engine's backend (:mod:`moeplan.backends`, each fact with its source) names its scheduler
model and gives its defaults; the two scheduler models (:data:`SCHEDULERS`):

- ``prefill-first`` (SGLang): ``max_running_requests = max_total_num_tokens // 2`` per DP
  rank, capped by the backend's request pool and, for models with recurrent state (linear /
  state-space layers), by the states its ``state_ratio`` share of the cache memory holds; the
  backend's ``new_token_ratio`` reserved for future output at admission.
- ``mixed`` (vLLM V1, TensorRT-LLM's in-flight batching): mixed prefill/decode batches, the
  backend's default batched tokens and sequences per DP engine rank (an instance of
  ``attn_dp`` ranks runs ``attn_dp`` times both); the backend's ``new_token_ratio`` of the
  outstanding output reserved at admission (vLLM 0: KV allocated on demand; TensorRT-LLM's
  ``GUARANTEED_NO_EVICT`` 1) and its KV pool at the engine's memory fraction
  (:func:`kv_pool`).

The KV pool comes from :func:`moeplan.serve.layout.kv_capacity_tokens` with the chunk as the
activation budget (no chunking: 16384 tokens assumed), at the engine's memory fraction
(:func:`kv_pool`: the user's ``--mem-fraction`` or the engine's own default, its rule from
the backend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from moeplan.backends import EngineBackend, backend, simulated
from moeplan.backends.base import MemoryContext
from moeplan.cost import memory as mem
from moeplan.cost.a2a import deepep_blockers
from moeplan.cost.memory import KVPool
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.serve.engine.config import EngineConfig
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.layout import kv_capacity_tokens, state_split
from moeplan.specs import ClusterSpec, ModelSpec

UNCHUNKED_ACTIVATION_TOKENS = 16384
CAPS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
CHUNKS = (2048, 4096, 8192, 16384)


def default_chunk(engine: str, cluster: ClusterSpec) -> int:
    """The engine's default step size on ``cluster``'s GPU
    (:meth:`moeplan.backends.EngineBackend.default_chunk`)."""
    return backend(engine).default_chunk(cluster.gpu)


#: the memory fractions ``plan`` tries beside the engine's default (up to its safe maximum,
#: :attr:`moeplan.backends.EngineBackend.max_mem_fraction`)
MEM_FRACTIONS = (0.8, 0.85, 0.9, 0.95)


def kv_pool(
    engine: str | None,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    chunk: int,
    mem_fraction: float | None = None,
    *,
    deepep: bool = False,
    role: str = "colocated",
    mtp: int = 0,
    running: int | None = None,
) -> KVPool | None:
    """The engine's KV pool rule at ``mem_fraction`` (None: the engine's default for this
    instance); None for no engine or an engine without the knob. The pool also carries what
    the engine's own memory profile charges (:meth:`moeplan.backends.EngineBackend.
    profile_bytes`, for ``running`` sequences of the instance, None: the engine's default
    cap) and how it pads the routed experts it loads (:meth:`moeplan.backends.EngineBackend.
    expert_alignment`)."""
    b = backend(engine) if engine in simulated() else None
    if b is None or b.mem_fraction_rule is None:
        return None
    ctx = MemoryContext(
        gpu=cluster.gpu,
        tp=layout.stage_gpus,
        pp=layout.pp,
        attn_dp=layout.attn_dp,
        chunk=chunk,
        deepep=deepep,
        mla=model.attention == "mla",
        role=role,
        mtp=mtp,
    )
    f = b.mem_fraction(ctx) if mem_fraction is None else mem_fraction
    if mem_fraction is None and not 0.0 < f < 1.0:
        raise MoeplanError(
            f"{b.label}'s default memory fraction for layout ({layout.label}) at a prefill "
            f"chunk of {chunk} tokens is {f:g}: its reserve leaves no pool; give --mem-fraction"
        )
    dp = layout.attn_dp
    rank_seqs = -(-running // dp) if running else None
    rank_tokens = -(-chunk // dp) if chunk else None
    return KVPool(
        b.mem_fraction_rule,
        f,
        b.mem_headroom(ctx),
        reserve=mem.RESERVED_BYTES if b.pool_reserve is None else b.pool_reserve,
        profile=b.profile_bytes(model, cluster.gpu, rank_seqs, rank_tokens),
        expert_align=b.expert_alignment(model.quant.experts.format, cluster.gpu),
        window_block=b.window_block,
    )


def mem_fraction_values(engine: str | None, given: float | None) -> tuple[float | None, ...]:
    """The fractions a search tries: the user's, else the engine's default (None) and
    :data:`MEM_FRACTIONS` up to the engine's safe maximum."""
    if given is not None:
        return (given,)
    b = backend(engine) if engine in simulated() else None
    if b is None or b.mem_fraction_rule is None:
        return (None,)
    return (None, *(f for f in MEM_FRACTIONS if f <= b.max_mem_fraction))


def _simulated(engine: str) -> EngineBackend:
    """The backend of ``engine`` if it has a scheduler model; else one line."""
    b = backend(engine) if engine in simulated() else None
    if b is None or b.scheduler not in SCHEDULERS:
        raise MoeplanError(f"engine ({engine!r}) must be one of {simulated()}")
    return b


def engine_config(
    engine: str,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    *,
    chunk_tokens: int | None = None,
    max_running: int | None = None,
    kv_scale: float = 1.0,
    mtp: int = 0,
    mem_fraction: float | None = None,
    deepep: bool = False,
    role: str = "colocated",
) -> EngineConfig:
    """The engine's scheduler with its defaults for ``cluster`` unless given; KV capacity from
    the memory model at the engine's memory fraction (``mem_fraction``; None: the engine's
    default, :func:`kv_pool`; raises :class:`MoeplanError` when the weights do not fit);
    ``kv_scale`` the stored KV bytes over the model records' (``--kv-dtype fp8`` on bf16: 0.5);
    ``role``: the instance's P/D role (``colocated``, ``prefill``, ``decode``). With
    speculative decoding (``mtp`` draft tokens) the default running cap is the engine's
    (:meth:`moeplan.backends.EngineBackend.mtp_running_cap`: SGLang's 48 per instance, split
    over the DP ranks)."""
    b = _simulated(engine)
    chunk = b.default_chunk(cluster.gpu) if chunk_tokens is None else chunk_tokens
    inst_chunk = chunk * layout.attn_dp if b.budgets_per_dp_rank and chunk_tokens is None else chunk
    pool = kv_pool(
        engine, model, cluster, layout, inst_chunk, mem_fraction, deepep=deepep, role=role,
        running=max_running,
    )  # fmt: skip
    run = SCHEDULERS[b.scheduler]
    cfg = run(b, model, cluster, layout, chunk, chunk_tokens, max_running, kv_scale, pool)
    cap = spec_running_cap(engine, layout.attn_dp, mtp) if max_running is None else None
    if cap is not None and cap < cfg.max_running:
        cfg = replace(cfg, max_running=cap)
    return replace(cfg, mem_fraction=None if pool is None else pool.fraction)


def spec_running_cap(engine: str | None, attn_dp: int, mtp: int) -> int | None:
    """The instance's default running cap under speculative decoding with ``mtp`` draft
    tokens (None: none, or no MTP): the engine's cap split evenly over the ``attn_dp`` ranks
    (SGLang model_runner_kv_cache_mixin.py ``_resolve_max_num_reqs``:
    ``max_num_reqs // self.dp_size`` per rank), at least one per rank."""
    if not mtp or engine not in simulated():
        return None
    spec = backend(engine).mtp_running_cap()
    return None if spec is None else max(1, spec[0] // attn_dp) * attn_dp


def _prefill_first_config(
    b: EngineBackend,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    chunk: int,
    chunk_tokens: int | None,
    max_running: int | None,
    kv_scale: float,
    pool: KVPool | None = None,
) -> EngineConfig:
    """SGLang's prefill-first scheduler (module docstring): one step budget for the
    instance, the running cap from the KV pool."""
    del chunk_tokens
    assert b.running_cap is not None and b.state_ratio is not None
    budget = chunk or UNCHUNKED_ACTIVATION_TOKENS
    per_rank = kv_capacity_tokens(model, cluster, layout, budget, kv_scale, pool=pool)
    dp = layout.attn_dp
    fixed = model.state_bytes_per_seq > 0 or any(
        x.mixer.kind in ("csa", "hca") for x in model.layer_specs
    )
    seq_cap = b.running_cap
    if fixed:  # the engine's split of the cache memory between states and the token pool
        per_rank, seq_cap = state_split(
            model, cluster, layout, budget, b.state_ratio, kv_scale, pool
        )
        if seq_cap < 1:
            raise MoeplanError(f"layout ({layout.label}) holds no sequence's recurrent state "
                               f"on {cluster.gpu.name}")  # fmt: skip
    cap = max_running or max(1, min(per_rank // 2, b.running_cap, seq_cap)) * dp
    return EngineConfig(
        policy="prefill-first",
        chunk_tokens=chunk,
        max_running=cap,
        kv_tokens=per_rank * dp,
        kv_tokens_per_rank=per_rank,
        admit_reserve=b.new_token_ratio,
        admit_reserve_new=b.admission_token_ratio,
    )


def _mixed_config(
    b: EngineBackend,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    chunk: int,
    chunk_tokens: int | None,
    max_running: int | None,
    kv_scale: float,
    pool: KVPool | None = None,
) -> EngineConfig:
    """vLLM V1 and TensorRT-LLM: one scheduler per DP engine rank, each with its own
    ``max_num_seqs`` and ``max_num_batched_tokens`` (vLLM docs/serving/data_parallel_deployment.md:
    every DP rank is a separate core engine; v1/core/sched/scheduler.py reads both from its own
    scheduler config; TensorRT-LLM's ``max_batch_size`` / ``max_num_tokens`` per rank): the
    instance's budgets are ``attn_dp`` times the per-rank defaults.
    Given budgets are the instance's (exported per rank: :meth:`moeplan.backends.EngineBackend.chunk_args`)."""
    dp = layout.attn_dp
    cap = max_running or b.default_running(cluster.gpu) * dp
    rank_chunk = chunk if chunk_tokens is None else -(-chunk_tokens // dp)
    fixed = model.state_bytes_per_seq > 0 or any(
        x.mixer.kind in ("csa", "hca") for x in model.layer_specs
    )
    seqs = -(-cap // dp) if fixed else 0  # a running sequence's state, before the token pool
    per_rank = kv_capacity_tokens(
        model, cluster, layout, rank_chunk or UNCHUNKED_ACTIVATION_TOKENS, kv_scale, seqs, pool
    )
    if per_rank < 1:
        raise MoeplanError(f"layout ({layout.label}) leaves no KV pool on {cluster.gpu.name}")
    shape = replace(layout.memory_shape(model), kv_scale=kv_scale)
    return EngineConfig(
        seq_kv=mem.window_tokens_per_seq(model, shape, pool),
        policy="mixed",
        chunk_tokens=chunk_tokens if chunk_tokens is not None else max(chunk * dp, cap + 1),
        max_running=cap,
        kv_tokens=per_rank * dp,
        kv_tokens_per_rank=per_rank,
        admit_reserve=b.new_token_ratio,
        admit_reserve_new=b.admission_token_ratio,
    )


#: the scheduler models an engine backend may name (:attr:`EngineBackend.scheduler`)
SCHEDULERS: dict[str, Callable[..., EngineConfig]] = {
    "prefill-first": _prefill_first_config,
    "mixed": _mixed_config,
}


def candidates(
    engine: str,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    chunk_tokens: int | None = None,
    max_running: int | None = None,
    kv_scale: float = 1.0,
    mtp: int = 0,
    mem_fraction: float | None = None,
    deepep: bool = False,
    fractions: tuple[float, ...] = (),
) -> list[EngineConfig]:
    """Configurations a search tries: the engine's defaults, then every smaller cap in
    :data:`CAPS` with every chunk in :data:`CHUNKS`; a given knob is fixed (both: one).
    ``mem_fraction``: the engine's memory fraction (None: its default); ``fractions``: other
    fractions tried at the default chunk and running cap (a fraction leaving no KV pool is
    skipped)."""
    config = partial(
        engine_config, engine, model, cluster, layout, kv_scale=kv_scale, mtp=mtp, deepep=deepep
    )
    base = config(chunk_tokens=chunk_tokens, max_running=max_running, mem_fraction=mem_fraction)
    out = [base]
    for f in fractions:
        if f == base.mem_fraction:
            continue
        try:
            out.append(config(chunk_tokens=chunk_tokens, max_running=max_running, mem_fraction=f))
        except MoeplanError:
            continue
    if chunk_tokens is not None and max_running is not None:
        return out
    b = backend(engine)
    per = layout.attn_dp if b.budgets_per_dp_rank else 1
    chunks = tuple(c * per for c in CHUNKS) if chunk_tokens is None else (chunk_tokens,)
    caps = tuple(c * per for c in CAPS) if max_running is None else (max_running,)
    for chunk in chunks:
        for cap in caps:
            if (cap, chunk) == (base.max_running, base.chunk_tokens):
                continue
            if (max_running is None and cap >= base.max_running) or (
                b.chunk_above_running and chunk <= cap
            ):
                continue
            try:
                out.append(config(chunk_tokens=chunk, max_running=cap, mem_fraction=mem_fraction))
            except MoeplanError:
                continue
    return out


# ---- instance knobs a search tries (one entry each; :func:`knob_variants`) ---------------
#: DeepSeek-V3 deploys 32 redundant experts for 256 routed ones (DeepSeek-V3 report §3.4;
#: SGLang's large-scale EP runs the same): the search keeps R <= E / 8
MAX_REDUNDANT_FRACTION = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class KnobEntry:
    """One instance knob: the values a search tries on ``(layout, knobs)`` when the user gave
    none, and how a value applies. ``values`` may return ``()`` (the variant is dropped)."""

    name: str
    values: Callable[[ModelSpec, Layout, InstanceKnobs, tuple], tuple]
    #: a value (of the entry's own type: str, bool or int) applied to ``(layout, knobs)``
    apply: Callable[[Layout, InstanceKnobs, Any], tuple[Layout, InstanceKnobs]]


@dataclass(frozen=True, slots=True)
class Allowed:
    """The instance knobs an engine can run for one layout of one model on one cluster:
    the MoE all-to-all backends (``nccl``: the engine's fused MoE, always; ``deepep``),
    whether two-batch overlap runs, whether multi-token prediction runs."""

    a2a: tuple[str, ...]
    tbo: bool
    mtp: bool


def allowed(
    engine: str | None,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    phase: str | None = None,
) -> Allowed:
    """What ``engine`` allows on ``layout`` (:class:`Allowed`) for an instance running
    ``phase`` (``prefill`` / ``decode``: a P/D pool; None: both), the one gate every search's
    knob variants read (:func:`knob_variants`): DeepEP where
    :func:`moeplan.cost.a2a.deepep_blockers` finds no blocker; two-batch overlap with DeepEP
    only (SGLang ``--enable-two-batch-overlap``, vLLM ``--enable-dbo``: both need a DeepEP
    all-to-all backend, :mod:`moeplan.serve.iteration.instance_knobs`) where the engine splits
    the family's decoder layer (:meth:`moeplan.backends.EngineBackend.tbo_blocker`); MTP where
    the model ships an MTP/NextN layer and the engine drafts with it
    (:meth:`~moeplan.backends.EngineBackend.mtp_blocker`)."""
    deepep = not deepep_blockers(engine, model, cluster, layout.moe_tp, layout.moe_ep, phase=phase)
    b = backend(engine) if engine in simulated() else None
    tbo = deepep and (b is None or b.tbo_blocker(model.architecture) is None)
    return Allowed(
        a2a=("nccl", "deepep") if deepep else ("nccl",),
        tbo=tbo,
        mtp=model.num_nextn_predict_layers > 0
        and (b is None or b.mtp_blocker(model.architecture) is None),
    )


def _a2a_values(model: ModelSpec, layout: Layout, kn: InstanceKnobs, ctx: tuple) -> tuple:
    a2a = _allowed(model, layout, ctx).a2a
    if kn.tbo:  # two-batch overlap was asked for: only DeepEP runs it
        return ("deepep",) if "deepep" in a2a else ()
    return a2a


def _tbo_values(model: ModelSpec, layout: Layout, kn: InstanceKnobs, ctx: tuple) -> tuple:
    return (False, True) if kn.a2a == "deepep" and _allowed(model, layout, ctx).tbo else (False,)


def _allowed(model: ModelSpec, layout: Layout, ctx: tuple) -> Allowed:
    engine, cluster, phase = ctx
    return allowed(engine, model, cluster, layout, phase)


def _redundant_values(model: ModelSpec, layout: Layout, kn: InstanceKnobs, ctx: tuple) -> tuple:
    """0 when ``moe_ep`` divides E, else the smallest R making E + R divisible by EP (at most
    E / :data:`MAX_REDUNDANT_FRACTION`). Replicas buy balance only against a routing profile
    with per-expert loads, which the deployment search does not take: with balanced routing
    they would cost memory and buy nothing, so they are tried where they enable an EP size."""
    r = redundant_for(model, layout.moe_ep)
    return () if r is None else (r,)


def redundant_for(model: ModelSpec, ep: int) -> int | None:
    """The fewest redundant experts ``R`` making ``E + R`` divisible by ``ep`` (0 when ``ep``
    divides ``E``), or None when that takes more than ``E /``
    :data:`MAX_REDUNDANT_FRACTION`."""
    e = model.num_experts
    if ep <= 1 or e % ep == 0:
        return 0
    r = ep - e % ep
    return r if r <= e // MAX_REDUNDANT_FRACTION else None


def _mtp_values(model: ModelSpec, layout: Layout, kn: InstanceKnobs, ctx: tuple) -> tuple:
    """Only the user's (``base``) where the engine allows MTP (:func:`allowed`): the
    acceptance rate is the user's statement about their workload, so MTP is never switched
    on by a search (no hidden default)."""
    return (kn.mtp,) if not kn.mtp or _allowed(model, layout, ctx).mtp else ()


def _overlap_values(model: ModelSpec, layout: Layout, kn: InstanceKnobs, ctx: tuple) -> tuple:
    """The engine's host overlap on where its release leaves it off but has the flag and
    runs it for this instance (:mod:`moeplan.cost.host`): overlapped, a step is never longer
    (the longer of the GPU's and the host's time, not their sum), so a search does not try
    both. Kept at the default where the release refuses it for the instance
    (:meth:`EngineBackend.overlap_blocker`: vLLM 0.11 with a pipeline or MTP) and on Ray,
    which an instance whose tensor parallelism spans nodes runs on (:mod:`moeplan.export.vllm`;
    vLLM's tests skip async scheduling with Ray: "Async scheduling is not supported with
    ray"). Without an engine, or where the default is on already, the knob stays unset."""
    del model
    engine, cluster, _ = ctx
    eng = backend(engine) if engine in simulated() else None
    nodes = -(-layout.gpus // cluster.gpus_per_node)
    ray = nodes > 1 and not (layout.attn_dp >= nodes and layout.attn_dp % nodes == 0)
    if (
        eng is None
        or kn.overlap is not None
        or eng.host_overlap()
        or eng.overlap_on_flag is None
        or eng.overlap_blocker(layout.pp, kn.mtp) is not None
        or ray
    ):
        return (kn.overlap,)
    return (True,)


KNOB_ENTRIES: tuple[KnobEntry, ...] = (
    KnobEntry(
        name="a2a",
        values=_a2a_values,
        apply=lambda lay, kn, v: (lay, replace(kn, a2a=v)),
    ),
    KnobEntry(name="tbo", values=_tbo_values, apply=lambda lay, kn, v: (lay, replace(kn, tbo=v))),
    KnobEntry(
        name="redundant_experts",
        values=_redundant_values,
        apply=lambda lay, kn, v: (replace(lay, redundant_experts=v), kn),
    ),
    KnobEntry(name="mtp", values=_mtp_values, apply=lambda lay, kn, v: (lay, replace(kn, mtp=v))),
    KnobEntry(
        name="overlap",
        values=_overlap_values,
        apply=lambda lay, kn, v: (lay, replace(kn, overlap=v)),
    ),
)


def knob_variants(
    engine: str | None,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    base: InstanceKnobs,
    given: frozenset[str] = frozenset(),
    phase: str | None = None,
) -> list[tuple[Layout, InstanceKnobs]]:
    """Every ``(layout, knobs)`` the search tries for an instance running ``phase``
    (:func:`allowed`): each :data:`KNOB_ENTRIES` entry not in ``given`` expands the variants
    by its values (``base`` and ``layout`` hold the given)."""
    variants = [(layout, base)]
    ctx = (engine, cluster, phase)
    for entry in KNOB_ENTRIES:
        if entry.name in given:
            continue
        variants = [
            entry.apply(lay, kn, v)
            for lay, kn in variants
            for v in entry.values(model, lay, kn, ctx)
        ]
    return variants
