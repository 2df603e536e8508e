"""The memory budget of one serving engine instance of a :class:`~moeplan.planners.layout.Layout`.

The layout type itself (degrees, validation, the one label) is
:class:`moeplan.planners.layout.Layout`.

KV capacity (tokens) comes from :mod:`moeplan.cost.memory`: the GPU's memory minus the
weights of the worst stage, the activations of one forward pass of the engine's token budget,
the all-to-all buffers and ``RESERVED_BYTES``, divided by the KV bytes one token costs one
GPU of a stage (its layers only); with an engine's pool rule
(:class:`moeplan.cost.memory.KVPool`) the bytes are what the engine's memory fraction gives
its pool. With attention DP each DP rank has its own KV pool;
:func:`kv_capacity_tokens` returns the per-rank capacity (one request must fit in one rank).
Sliding-window layers are charged the full context (an over-estimate for GPT-OSS).
"""

from __future__ import annotations

from dataclasses import replace

from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.specs import ClusterSpec, ModelSpec


def stage_layers(model: ModelSpec, pp: int) -> list[range]:
    """Decoder layers of each pipeline stage (:func:`moeplan.cost.memory.stage_layers`)."""
    return mem.stage_layers(model.num_layers, pp)


def stage_weight_bytes(
    model: ModelSpec, layout: Layout, layers: range, first: bool, last: bool
) -> float:
    """Weights on one GPU of the stage holding ``layers`` (:func:`moeplan.cost.memory.stage_weights`)."""
    return mem.stage_weights(model, layout.memory_shape(model), layers, first, last)


def kv_capacity_tokens(
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    token_budget: int,
    kv_scale: float = 1.0,
    seqs: int = 0,
    pool: mem.KVPool | None = None,
) -> int:
    """KV tokens one attention-DP rank can hold (the tightest stage), after weights,
    activations of a step of ``token_budget`` tokens, all-to-all buffers, the reserve and
    the length-independent cache of ``seqs`` running sequences per rank (linear layers'
    state, csa / hca windows) — :func:`moeplan.cost.memory.kv_capacity`, the model the
    strategy planner's fit check uses too; ``kv_scale`` = the KV dtype's bytes per element
    over the model's. A token costs each layer its kind's rate. ``pool``: the engine's KV
    pool at its memory fraction (:class:`moeplan.cost.memory.KVPool`; None: all that is
    left).

    Raises :class:`MoeplanError` when the weights (and the states) alone do not fit.
    Memoised per argument tuple (the specs are frozen): a knob search asks the same layout
    and step budget once per running cap.
    """
    key = (model, cluster, layout, token_budget, kv_scale, seqs, pool)
    got = _KV_TOKENS.get(key)
    if got is None:
        got = _kv_capacity_tokens(model, cluster, layout, token_budget, kv_scale, seqs, pool)
        if len(_KV_TOKENS) >= KV_MEMO:
            _KV_TOKENS.clear()
        _KV_TOKENS[key] = got
    return got


KV_MEMO = 65_536  # memoised KV capacities before the memo is cleared (as the kernel tables')
_KV_TOKENS: dict[tuple, int] = {}


def _kv_capacity_tokens(
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    token_budget: int,
    kv_scale: float,
    seqs: int,
    pool: mem.KVPool | None,
) -> int:
    """:func:`kv_capacity_tokens`, computed."""
    lay = layout
    shape = replace(lay.memory_shape(model), kv_scale=kv_scale)
    gib, g = 1024**3, cluster.gpu.mem_bytes
    tokens, need = mem.kv_capacity(model, shape, g, token_budget, seqs, pool)
    if tokens <= 0 and pool is not None:
        graphs = f", {pool.headroom / gib:.1f} GiB of CUDA graphs" if pool.headroom else ""
        raise MoeplanError(
            f"--mem-fraction ({pool.fraction:g}) leaves layout ({lay.label}) no KV cache on "
            f"{cluster.gpu.name} ({g / gib:.1f} GiB; {mem.POOL_TEXT[pool.rule]}): it needs "
            f"{need / gib:.1f} GiB per GPU before any KV cache (weights, a step's activations "
            f"and buffers, the {mem.RESERVED_BYTES / gib:.0f} GiB reserve{graphs})"
        )
    if tokens <= 0:
        raise MoeplanError(
            f"layout ({lay.label}) needs {need / 1024**3:.1f} GiB per GPU before any KV cache; "
            f"{cluster.gpu.name} has {cluster.gpu.mem_bytes / 1024**3:.1f} GiB"
        )
    return tokens


def state_split(
    model: ModelSpec, cluster: ClusterSpec, layout: Layout, token_budget: int,
    state_ratio: float, kv_scale: float = 1.0, pool: mem.KVPool | None = None,
) -> tuple[int, int]:  # fmt: skip
    """``(KV tokens, sequences)`` per rank with the cache memory split between the token pool
    and the sequences' recurrent state as SGLang splits it
    (:func:`moeplan.cost.memory.state_split`)."""
    shape = replace(layout.memory_shape(model), kv_scale=kv_scale)
    return mem.state_split(model, shape, cluster.gpu.mem_bytes, token_budget, state_ratio, pool)
