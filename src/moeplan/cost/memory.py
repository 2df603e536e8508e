"""Memory per GPU: weights, KV cache, activations and communication buffers (bytes).

Building blocks that every planner combines for its own layout. Conventions:

- Attention weights are split by ``tp``; MLA's latent projections (``kv_a``, ``q_a``) are
  replicated across TP ranks (as SGLang/vLLM do), heads are split.
- Routed experts: ``num_local_experts`` whole experts, each split ``tp`` ways.
- KV cache: GQA heads split by ``tp`` (replicated when ``tp > num_kv_heads``); MLA's latent is
  replicated on every TP rank.
- Activations: the live hidden/intermediate tensors of one forward step of ``tokens``
  tokens (the largest intermediate is the MLP/expert up-projection).
- Weights are charged at their module class's bytes per weight, quantization scales and
  zero points included (``model.quant``): attention, routed experts, shared
  experts, dense MLP, router, embedding and lm-head each have their own.
- ``RESERVED_BYTES`` covers the CUDA context, allocator fragmentation and NCCL's own
  buffers (aiconfigurator's system.yaml uses 3.5 GiB "other" + ~0.4 GiB NCCL for H100).

The KV pool of a served instance follows its engine's memory fraction (:class:`KVPool`):
what the fraction of the GPU covers differs by engine (``static``: weights + KV pool, SGLang;
``total``: everything the instance allocates, vLLM; ``free``: a share of what is left after
weights, activations and the reserve, TensorRT-LLM). Without a pool rule the KV cache takes
everything the weights, the step's activations, the buffers and the reserve leave.

One memory model for every family and command: a planner describes a GPU's
bytes as a :class:`MemoryBreakdown` (weights + KV + activations + buffers + the reserve);
its fit check is :func:`fits` (``total <= GPU memory``, i.e. the rest within
:func:`usable_bytes`) and the figure it reports is ``total`` — the same number, so no plan
can be reported above the GPU's memory. ``moeplan inspect`` uses :func:`floor_breakdown`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from moeplan.cost.offload import WeightOffload, offload_memory
from moeplan.errors import require
from moeplan.specs import ModelSpec, layer_math
from moeplan.specs.layers import LATENT_KINDS
from moeplan.specs.model import ACT_BYTES

RESERVED_BYTES = 4 * 1024**3


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBreakdown:
    """Bytes per GPU by kind."""

    weights: float
    kv_cache: float
    activations: float
    buffers: float
    reserved: float = RESERVED_BYTES

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.buffers + self.reserved

    def fits(self, gpu_mem_bytes: float) -> bool:
        """Whether this fits a GPU of ``gpu_mem_bytes`` (the one fit check; see module)."""
        return self.total <= gpu_mem_bytes

    def to_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "activations": self.activations,
            "buffers": self.buffers,
            "reserved": self.reserved,
            "total": self.total,
        }


def attn_weight_bytes(model: ModelSpec, tp: int = 1) -> float:
    """One layer's attention weights on one TP rank."""
    h = model.hidden_size
    if model.attention == "mla":
        replicated = h * (model.kv_lora_rank + model.qk_rope_head_dim) + (
            h * model.q_lora_rank if model.q_lora_rank else 0
        )
        split = model.attn_linear_params - replicated
        return (replicated + split / tp + 2 * h) * model.quant.attention.bytes_per_weight
    return ((model.attn_params - 2 * h) / tp + 2 * h) * model.quant.attention.bytes_per_weight


def expert_weight_bytes(model: ModelSpec, num_local_experts: float, tp: int = 1) -> float:
    """Routed experts held by one GPU in one layer (plus the replicated router)."""
    return (
        num_local_experts * model.expert_params / tp * model.quant.experts.bytes_per_weight
        + model.router_params * model.quant.router.bytes_per_weight
    )


def padded_experts(model: ModelSpec, moe_tp: int, align: tuple[int, int]) -> ModelSpec:
    """``model`` with its routed experts at the bytes an engine holds when it pads one
    expert's per-rank intermediate size (``ceil(I / moe_tp)``) to a multiple of ``align[0]``
    and the hidden size to one of ``align[1]`` (:meth:`moeplan.backends.EngineBackend.
    expert_alignment`): the experts' bytes per weight scaled by the padded expert's
    parameters over the stored one's, scales and biases alike. ``model`` itself when nothing
    pads. Only memory reads the result (the kernel tables time the engine's own padded
    kernels on the stored shapes)."""
    ai, ah = align
    require(ai >= 1 and ah >= 1, f"expert alignment ({ai}, {ah}) must be >= 1")
    h = model.hidden_size
    i_rank = -(-model.moe_intermediate_size // moe_tp)
    i_pad, h_pad = -(-i_rank // ai) * ai, -(-h // ah) * ah
    if (i_pad, h_pad) == (i_rank, h) or model.num_experts == 0:
        return model
    g, b = model.gated_experts, model.expert_bias
    ratio = layer_math.mlp_params(h_pad, i_pad, g, b) / layer_math.mlp_params(h, i_rank, g, b)
    q = model.quant.experts
    mq = replace(q, bytes_per_weight=q.bytes_per_weight * ratio)
    return replace(model, quant=replace(model.quant, experts=mq))


def shared_weight_bytes(model: ModelSpec, tp: int = 1) -> float:
    return model.shared_params / tp * model.quant.shared.bytes_per_weight


def dense_mlp_weight_bytes(model: ModelSpec, tp: int = 1) -> float:
    return model.dense_mlp_params / tp * model.quant.dense.bytes_per_weight


def embedding_bytes(model: ModelSpec, tp: int = 1) -> float:
    """Embedding + lm-head (vocab-parallel over ``tp``), each at its own bytes per weight,
    plus any vision / audio tower (loaded though not served; sharded over ``tp`` as vLLM's
    default ``mm_encoder_tp_mode="weights"`` does)."""
    q = model.quant
    towers = model.weight_bytes_by_module().get("towers", (0, 0.0))[1]
    return (
        model.embedding_params * q.embedding.bytes_per_weight
        + model.lm_head_params * q.lm_head.bytes_per_weight
        + towers
    ) / tp


def _kv_split(model: ModelSpec, layer: int, tp: int) -> int:
    """TP ranks one layer's cache is split over: latent / shared-KV kinds are replicated on
    every rank, K/V heads (and linear layers' state heads) are split up to their count."""
    m = model.layer_specs[layer].mixer
    if m.kind in LATENT_KINDS or m.shared_kv:
        return 1
    heads = m.num_kv_heads if m.has_kv_cache else (m.lin_value_heads or m.num_heads)
    return max(1, min(tp, heads or 1))


def kv_bytes_per_token_layer(model: ModelSpec, tp: int = 1, layer: int | None = None) -> float:
    """KV bytes one token adds to decoder layer ``layer`` on one TP rank (per layer kind,
    :mod:`moeplan.specs.layer_math`; linear layers 0); ``None``: the mean over layers, so
    ``num_layers`` times it is the model's per-token figure."""
    if layer is not None:
        return model.kv_bytes_per_token_layer(layer) / _kv_split(model, layer, tp)
    n = model.num_layers
    return sum(kv_bytes_per_token_layer(model, tp, i) for i in range(n)) / n


def cache_bytes(
    model: ModelSpec, seqs: float, context: int, tp: int = 1, layers: range | None = None
) -> float:
    """Cache of ``seqs`` sequences of ``context`` tokens on one TP rank over ``layers`` (all
    by default), each layer by its kind: full KV, window- or chunk-capped, compressed
    (csa / hca) or the fixed recurrent state of linear layers."""
    idx = range(model.num_layers) if layers is None else layers
    specs = model.layer_specs
    return seqs * sum(
        layer_math.kv_bytes_for_context(specs[i].mixer, context) / _kv_split(model, i, tp)
        for i in idx
    )


def fixed_bytes_per_seq(model: ModelSpec, tp: int = 1, layers: range | None = None) -> float:
    """Cache one sequence holds whatever its length, on one TP rank: linear layers' state and
    the full local window of csa / hca layers (what a token pool cannot share)."""
    idx = range(model.num_layers) if layers is None else layers
    specs = model.layer_specs
    total = 0.0
    for i in idx:
        m = specs[i].mixer
        fixed = layer_math.state_bytes_per_seq(m) + m.window * layer_math.window_bytes_per_token(m)
        total += fixed / _kv_split(model, i, tp)
    return total


def activation_bytes(model: ModelSpec, tokens: int, tp: int = 1) -> float:
    """Peak live activations of one forward step over ``tokens`` tokens on one rank."""
    inter = max(
        model.moe_intermediate_size * model.top_k,
        model.dense_intermediate_size,
        model.shared_intermediate_size,
    )
    per_token = (4 * model.hidden_size + 2 * inter / tp) * ACT_BYTES
    return tokens * per_token


def a2a_buffer_bytes(model: ModelSpec, tokens: int, k: float) -> float:
    """Send + receive buffers of an all-to-all moving ``tokens * k`` hidden states."""
    return 2 * tokens * k * model.hidden_bytes


def weights_floor_per_gpu(model: ModelSpec, num_gpus: int) -> float:
    """Lower bound: all weights spread evenly over ``num_gpus`` GPUs, nothing else."""
    return model.weight_bytes_total() / num_gpus


def usable_bytes(gpu_mem_bytes: float) -> float:
    """The one usable-memory figure: a GPU's memory less :data:`RESERVED_BYTES`."""
    return gpu_mem_bytes - RESERVED_BYTES


def fits(breakdown: MemoryBreakdown, gpu_mem_bytes: float) -> bool:
    """The one fit check every family uses: ``breakdown.total <= gpu_mem_bytes``."""
    return breakdown.fits(gpu_mem_bytes)


def floor_breakdown(model: ModelSpec, num_gpus: int, tokens: int = 1) -> MemoryBreakdown:
    """Least any plan on ``num_gpus`` GPUs can need per GPU: weights spread evenly, the KV
    cache and activations of ``tokens`` tokens spread evenly, and the reserve."""
    kv = tokens * model.num_layers * kv_bytes_per_token_layer(model) / num_gpus
    return MemoryBreakdown(
        weights=weights_floor_per_gpu(model, num_gpus),
        kv_cache=kv,
        activations=activation_bytes(model, tokens) / num_gpus,
        buffers=0.0,
    )


# ---- one instance's GPUs: the model the strategy planner and the serving simulator share ----


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceShape:
    """What memory needs to know of an instance's layout: per-block degrees, pipeline
    stages, routed experts held per GPU (``(E + redundant) / moe_ep``), the all-to-all's
    experts per token ``k``, whether MixServe's fused RS-Combine/AG-Dispatch runs, and the
    KV cache's bytes relative to the model's own KV dtype (``kv_scale``: 0.5 for an fp8 cache
    of a bf16 model), and the weight offload to host memory (``offload``: None, none;
    :mod:`moeplan.cost.offload`)."""

    attn_tp: int
    attn_dp: int
    moe_tp: int
    moe_ep: int
    pp: int
    dense_tp: int
    local_experts: float
    k: float
    fused: bool = False
    kv_scale: float = 1.0
    offload: WeightOffload | None = None

    def __post_init__(self) -> None:
        for f in ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "dense_tp"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1, f"shape.{f} ({v!r}) must be an integer >= 1")
        for f in ("local_experts", "k"):
            v = getattr(self, f)
            require(v >= 0, f"shape.{f} ({v!r}) must be >= 0")
        require(self.kv_scale > 0, f"shape.kv_scale ({self.kv_scale!r}) must be > 0")


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Decoder layers of each pipeline stage: contiguous, counts differing by at most one."""
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def stage_weights(
    model: ModelSpec, shape: InstanceShape, layers: range, first: bool, last: bool
) -> float:
    """Weights on one GPU of the stage holding ``layers``: attention, routed + shared experts
    or the dense MLP per layer; the embedding on the first stage, the lm-head on the last
    (each vocab-parallel over ``attn_tp``). With a weight offload, the offloaded layers'
    routed experts live on the host and the GPU holds the offloader's prefetch buffers
    instead (:func:`moeplan.cost.offload.offload_memory`)."""
    s, q = shape, model.quant
    attn = attn_weight_bytes(model, s.attn_tp)
    moe = expert_weight_bytes(model, s.local_experts, s.moe_tp) + shared_weight_bytes(
        model, s.attn_tp
    )
    dense = dense_mlp_weight_bytes(model, s.dense_tp)
    total = sum(attn + (moe if model.is_moe_layer(i) else dense) for i in layers)
    if first:
        total += model.embedding_params * q.embedding.bytes_per_weight / s.attn_tp
    if last:
        total += model.lm_head_params * q.lm_head.bytes_per_weight / s.attn_tp
    if s.offload is not None:
        total -= offload_memory(model, s.offload, layers, s.local_experts, s.moe_tp).saved
    return total


def step_bytes(model: ModelSpec, shape: InstanceShape, step_tokens: int) -> tuple[float, float]:
    """(activations, communication buffers) of one forward step of ``step_tokens`` tokens
    over the instance: an attention-DP rank's share of the tokens is live on every GPU of
    its TP group; the all-to-all's send + receive buffers hold one GPU's share of the stage's
    tokens times ``k`` when the MoE is expert-parallel; MixServe's fused rounds stage one
    hidden state per token of the attention rank (Algorithms 1-2)."""
    s = shape
    per_rank = -(-step_tokens // s.attn_dp)
    act = activation_bytes(model, per_rank, s.attn_tp)
    per_gpu = -(-step_tokens // (s.attn_tp * s.attn_dp))
    buf = a2a_buffer_bytes(model, per_gpu, s.k) if s.moe_ep > 1 else 0.0
    if s.fused:
        buf += per_rank * model.hidden_bytes
    return act, buf


#: a stage of only linear layers has no per-token cache: its pool is bounded by this instead
MAX_POOL_TOKENS = 2**31 - 1


def _stage_rates(
    model: ModelSpec, shape: InstanceShape, layers: range, pool: KVPool | None = None
) -> tuple[float, float]:
    """(cache bytes per token, fixed cache bytes per sequence) of one stage on one GPU, each
    layer by its kind (:func:`kv_bytes_per_token_layer`, :func:`fixed_bytes_per_seq`); the
    sliding-window layers left out of the per-token rate where the pool shares its blocks
    with them (:attr:`KVPool.window_block`, :func:`window_tokens_per_seq`)."""
    shared = _shares_windows(model, layers, pool)
    per_token = sum(
        kv_bytes_per_token_layer(model, shape.attn_tp, i)
        for i in layers
        if not (shared and model.layer_specs[i].mixer.kind == "swa")
    )
    return per_token * shape.kv_scale, fixed_bytes_per_seq(model, shape.attn_tp, layers)


def _shares_windows(model: ModelSpec, layers: range, pool: KVPool | None) -> bool:
    """Whether ``pool`` charges the stage's sliding-window layers per sequence: it shares
    its blocks, and the stage has both window and full-cache layers."""
    if pool is None or not pool.window_block:
        return False
    kinds = {model.layer_specs[i].mixer.kind for i in layers}
    return "swa" in kinds and bool(kinds - {"swa"})


def window_tokens_per_seq(model: ModelSpec, shape: InstanceShape, pool: KVPool | None) -> int:
    """What one running sequence's sliding-window layers hold in a pool that shares its
    blocks with them, in tokens of the pool's per-token rate (its full layers), on the
    stage where that is most: the blocks covering a window of ``W`` tokens,
    ``ceil((W - 1) / B) + 1`` blocks of ``B`` tokens (vLLM v1/core/single_type_kv_cache_manager.py
    ``SlidingWindowManager`` frees every block wholly before the window). 0 where the pool
    charges every layer per token."""
    worst = 0
    for layers in stage_layers(model.num_layers, shape.pp):
        if not _shares_windows(model, layers, pool):
            continue
        assert pool is not None
        b = pool.window_block
        full, _ = _stage_rates(model, shape, layers, pool)
        held = sum(
            (-(-(m.window - 1) // b) + 1) * b * kv_bytes_per_token_layer(model, shape.attn_tp, i)
            for i in layers
            if (m := model.layer_specs[i].mixer).kind == "swa"
        )
        worst = max(worst, math.ceil(held * shape.kv_scale / full - 1e-9))
    return worst


def instance_breakdown(
    model: ModelSpec,
    shape: InstanceShape,
    kv_tokens_per_rank: float,
    step_tokens: int,
    seqs: float = 0.0,
) -> MemoryBreakdown:
    """Bytes per GPU of the fullest stage holding ``kv_tokens_per_rank`` KV tokens per
    attention-DP rank (and the fixed state of ``seqs`` sequences: linear layers, csa / hca
    windows) while running a step of ``step_tokens`` tokens."""
    act, buf = step_bytes(model, shape, step_tokens)
    stages = stage_layers(model.num_layers, shape.pp)
    best: MemoryBreakdown | None = None
    for i, layers in enumerate(stages):
        per_token, fixed = _stage_rates(model, shape, layers)
        b = MemoryBreakdown(
            weights=stage_weights(model, shape, layers, i == 0, i == len(stages) - 1),
            kv_cache=per_token * kv_tokens_per_rank + fixed * seqs,
            activations=act,
            buffers=buf,
        )
        best = b if best is None or b.total > best.total else best
    assert best is not None
    return best


#: what an engine's memory fraction covers (:class:`KVPool`), as a message says it
POOL_TEXT = {
    "static": "the fraction holds weights and KV pool, the rest a step and the engine's graphs",
    "total": "the fraction holds weights, activations, the reserve and the KV pool",
    "free": "the fraction is the KV pool's share of what weights and activations leave",
}
POOL_RULES = tuple(POOL_TEXT)


@dataclass(frozen=True, slots=True)
class KVPool:
    """How an engine sizes its KV pool from its memory fraction ``fraction`` of a GPU of
    ``G`` bytes holding weights ``W``, a step's activations and buffers ``A`` and the reserve
    ``R`` (CUDA context, NCCL, fragmentation: :data:`RESERVED_BYTES`):

    - ``static`` (SGLang ``--mem-fraction-static``): ``fraction`` of the memory free at start
      (``G - R``) holds weights and KV pool; the rest must hold ``A`` and the engine's
      ``headroom`` (CUDA graphs; SGLang
      python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py
      ``profile_max_num_token``: ``rest_memory = available_gpu_memory - total_gpu_memory *
      (1 - mem_fraction_static)``, ``available_gpu_memory`` read after the weights load);
    - ``total`` (vLLM ``--gpu-memory-utilization``): ``fraction * G`` holds everything the
      instance allocates, the KV pool what weights, the profiled peak activations and the
      non-torch memory leave (vllm/v1/worker/gpu_worker.py ``determine_available_memory``:
      ``requested_memory - non_kv_cache_memory``, 0.11.0), ``reserve`` being the
      non-torch memory that profile charges (the CUDA context and the CUDA graphs live in
      the rest of the GPU);
    - ``free`` (TensorRT-LLM ``kv_cache_config.free_gpu_memory_fraction``): ``fraction`` of
      the memory free after weights, activations and the reserve."""

    rule: str
    fraction: float
    #: bytes the engine needs outside a ``static`` pool besides a step (CUDA graphs)
    headroom: float = 0.0
    #: bytes outside torch's allocator a ``total`` fraction charges (vLLM's profiled
    #: non-torch increase; default: the whole reserve)
    reserve: float = RESERVED_BYTES
    #: bytes the engine's start-up profile holds besides a step (vLLM's dummy sampler run);
    #: a ``total`` fraction charges the larger of the two
    profile: float = 0.0
    #: the multiples the engine pads a routed expert's per-rank intermediate size and the
    #: hidden size to when it loads them (:func:`padded_experts`)
    expert_align: tuple[int, int] = (1, 1)
    #: > 0: the pool's blocks (of this many tokens) are shared between full and sliding-
    #: window layers, a window layer holding only the blocks that cover its window
    #: (:func:`window_tokens_per_seq`), so only the full layers cost per token; 0: every
    #: layer's cache costs per token
    window_block: int = 0

    def __post_init__(self) -> None:
        require(self.rule in POOL_RULES, f"pool.rule ({self.rule!r}) must be one of {POOL_RULES}")
        require(
            0.0 < self.fraction < 1.0,
            f"--mem-fraction ({self.fraction!r}) must be in (0, 1)",
        )
        require(self.reserve >= 0, f"pool.reserve ({self.reserve!r}) must be >= 0")
        require(self.profile >= 0, f"pool.profile ({self.profile!r}) must be >= 0")
        require(self.window_block >= 0, f"pool.window_block ({self.window_block!r}) must be >= 0")

    def kv_bytes(self, gpu_mem_bytes: float, weights: float, step: float) -> float:
        """Bytes of the KV pool (state included) on a GPU of ``gpu_mem_bytes`` holding
        ``weights`` and a step's activations and buffers ``step``; <= 0 when none fits (for
        ``static``, also when the rest of the memory cannot hold the step and the headroom)."""
        free = gpu_mem_bytes - RESERVED_BYTES
        f = self.fraction
        if self.rule == "static":
            return f * free - weights if step + self.headroom <= (1.0 - f) * free else 0.0
        if self.rule == "total":
            return f * gpu_mem_bytes - weights - max(step, self.profile) - self.reserve
        return f * (free - weights - step)


def _held(model: ModelSpec, shape: InstanceShape, pool: KVPool | None) -> ModelSpec:
    """``model`` with its routed experts as the pool's engine holds them (padded)."""
    return model if pool is None else padded_experts(model, shape.moe_tp, pool.expert_align)


def kv_capacity(
    model: ModelSpec,
    shape: InstanceShape,
    gpu_mem_bytes: float,
    step_tokens: int,
    seqs: int = 0,
    pool: KVPool | None = None,
) -> tuple[int, float]:
    """(KV tokens one attention-DP rank can hold on the tightest stage, the bytes per GPU
    that stage needs before any KV cache — the fixed state of ``seqs`` sequences included).
    The capacity is <= 0 when nothing fits. Without ``pool`` it is the largest ``n`` with
    ``instance_breakdown(..., n, ..., seqs).fits(gpu_mem_bytes)``; with it, the engine's
    pool (:class:`KVPool`) less the fixed state."""
    act, buf = step_bytes(model, shape, step_tokens)
    stages = stage_layers(model.num_layers, shape.pp)
    held = _held(model, shape, pool)
    best: tuple[int, float] | None = None
    for i, layers in enumerate(stages):
        per_token, fixed = _stage_rates(model, shape, layers, pool)
        weights = stage_weights(held, shape, layers, i == 0, i == len(stages) - 1)
        need = weights + act + buf + RESERVED_BYTES + seqs * fixed
        if pool is None:
            left = gpu_mem_bytes - need
        else:
            left = pool.kv_bytes(gpu_mem_bytes, weights, act + buf) - seqs * fixed
        tokens = int(left // per_token) if per_token > 0 else (MAX_POOL_TOKENS if left > 0 else 0)
        best = (tokens, need) if best is None or tokens < best[0] else best
    assert best is not None
    return best


def state_split(
    model: ModelSpec, shape: InstanceShape, gpu_mem_bytes: float, step_tokens: int,
    state_ratio: float, pool: KVPool | None = None,
) -> tuple[int, int]:  # fmt: skip
    """``(KV tokens, sequences)`` per rank when the cache memory is split as SGLang splits it
    for models with recurrent state: ``state_ratio / (1 + state_ratio)`` of it holds the
    sequences' fixed state, the rest the token pool (the tightest stage of each)."""
    act, buf = step_bytes(model, shape, step_tokens)
    stages = stage_layers(model.num_layers, shape.pp)
    held = _held(model, shape, pool)
    tokens, seqs = MAX_POOL_TOKENS, MAX_POOL_TOKENS
    for i, layers in enumerate(stages):
        per_token, fixed = _stage_rates(model, shape, layers, pool)
        weights = stage_weights(held, shape, layers, i == 0, i == len(stages) - 1)
        if pool is None:
            free = gpu_mem_bytes - weights - act - buf - RESERVED_BYTES
        else:
            free = pool.kv_bytes(gpu_mem_bytes, weights, act + buf)
        states = max(0.0, free) * state_ratio / (1 + state_ratio)
        if fixed > 0:
            seqs = min(seqs, int(states // fixed))
        if per_token > 0:
            tokens = min(tokens, int((free - states) // per_token))
    return tokens, seqs
