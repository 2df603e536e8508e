"""Validation of a :class:`~moeplan.specs.model.ModelSpec`: field types, size limits and the
structural rules of an MoE decoder, run once on construction.

Two passes, in this order: :func:`check_bounds` checks every integer field against
its ``MAX_*`` limit (:mod:`moeplan.specs.limits`), the layer-index tuples, the routed scaling
factor, the quantization rules and the scoring function — before anything is sized from them,
so a corrupt config fails with one line instead of allocating for 10^8 layers.
:func:`check_structure` then checks the rules between fields (attention kind and its head
dimensions, GQA head divisibility, top-k within the experts, DeepSeek's group-limited routing
``topk_group <= n_group`` dividing the experts, the dense prefix) and returns the per-layer MoE
flags the spec keeps. Every failure is one :class:`~moeplan.errors.MoeplanError` line naming
the field, its value and the rule.
"""

from __future__ import annotations

import math
from typing import Any

from moeplan.errors import check_int, require, show
from moeplan.specs.layers import ROUTER_FUNCS, LayerSpec
from moeplan.specs.limits import (
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_ROUTED_SCALE,
    MAX_VOCAB,
)
from moeplan.specs.quant import WeightQuant

#: a :class:`~moeplan.specs.model.ModelSpec` (not imported: the model module imports this one)
ModelSpec = Any

SCORING_FUNCS = tuple(f for f in ROUTER_FUNCS if f != "hash")

# integer fields: (lower bound, upper bound)
INT_FIELDS: dict[str, tuple[int, int]] = {
    "num_layers": (1, MAX_LAYERS),
    "hidden_size": (1, MAX_HIDDEN),
    "vocab_size": (1, MAX_VOCAB),
    "num_attention_heads": (1, MAX_HEADS),
    "num_kv_heads": (1, MAX_HEADS),
    "head_dim": (0, MAX_HEAD_DIM),
    "num_experts": (1, MAX_EXPERTS),
    "top_k": (1, MAX_EXPERTS),
    "moe_intermediate_size": (1, MAX_INTERMEDIATE),
    "q_lora_rank": (0, MAX_HIDDEN),
    "kv_lora_rank": (0, MAX_HIDDEN),
    "qk_nope_head_dim": (0, MAX_HEAD_DIM),
    "qk_rope_head_dim": (0, MAX_HEAD_DIM),
    "v_head_dim": (0, MAX_HEAD_DIM),
    "num_shared_experts": (0, MAX_EXPERTS),
    "shared_intermediate_size": (0, MAX_INTERMEDIATE),
    "dense_intermediate_size": (0, MAX_INTERMEDIATE),
    "first_k_dense": (0, MAX_LAYERS),
    "moe_layer_freq": (1, MAX_LAYERS),
    "n_group": (1, MAX_EXPERTS),
    "topk_group": (1, MAX_EXPERTS),
    "sliding_window": (0, MAX_CONTEXT),
}


def check_bounds(spec: ModelSpec, p: str) -> None:
    """Types and size limits, before anything is sized from them (``p``: the error prefix)."""
    for f, (lo, hi) in INT_FIELDS.items():
        check_int(f"{p}.{f}", getattr(spec, f), lo, hi)
    for f in ("dense_layers", "sliding_layers"):
        v = getattr(spec, f)
        require(
            isinstance(v, tuple)
            and len(v) <= spec.num_layers
            and all(isinstance(i, int) and 0 <= i < spec.num_layers for i in v),
            f"{p}.{f} ({show(v)}) must be layer indices in [0, {spec.num_layers})",
        )
    v = spec.routed_scaling_factor
    require(
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and 0 < v <= MAX_ROUTED_SCALE,
        f"{p}.routed_scaling_factor ({show(v)}) must be a finite number in "
        f"(0, {MAX_ROUTED_SCALE:g}]",
    )
    require(
        isinstance(spec.quant, WeightQuant),
        f"{p}.quant ({show(spec.quant)}) must be a WeightQuant",
    )
    require(
        spec.scoring_func in SCORING_FUNCS,
        f"{p}.scoring_func ({show(spec.scoring_func)}) must be one of {SCORING_FUNCS}",
    )


def check_structure(spec: ModelSpec, p: str) -> tuple[bool, ...]:
    """Rules between fields; returns per decoder layer whether it has routed experts."""
    if spec.layers:
        return _check_layers(spec, p)
    require(
        spec.attention in ("gqa", "mla"),
        f"{p}.attention ({spec.attention!r}) must be 'gqa' or 'mla'",
    )
    if spec.attention == "gqa":
        require(spec.head_dim > 0, f"{p}.head_dim ({spec.head_dim}) must be positive")
        require(
            spec.num_attention_heads % spec.num_kv_heads == 0,
            f"{p}.num_attention_heads ({spec.num_attention_heads}) must be divisible "
            f"by num_kv_heads ({spec.num_kv_heads})",
        )
    else:
        for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            require(
                getattr(spec, f) > 0,
                f"{p}.{f} ({getattr(spec, f)}) must be positive for MLA attention",
            )
    require(
        spec.top_k <= spec.num_experts,
        f"{p}.top_k ({spec.top_k}) must be <= num_experts ({spec.num_experts})",
    )
    require(
        spec.n_group >= 1 and spec.num_experts % spec.n_group == 0,
        f"{p}.num_experts ({spec.num_experts}) must be divisible by n_group ({spec.n_group})",
    )
    require(
        1 <= spec.topk_group <= spec.n_group,
        f"{p}.topk_group ({spec.topk_group}) must be in [1, n_group={spec.n_group}]",
    )
    require(
        0 <= spec.first_k_dense <= spec.num_layers,
        f"{p}.first_k_dense ({spec.first_k_dense}) must be in [0, num_layers]",
    )
    dense = set(spec.dense_layers)
    flags = tuple(
        i >= spec.first_k_dense and i not in dense and (i + 1) % spec.moe_layer_freq == 0
        for i in range(spec.num_layers)
    )
    require(any(flags), f"{p} has no MoE layer (first_k_dense={spec.first_k_dense})")
    if not all(flags):
        require(
            spec.dense_intermediate_size > 0,
            f"{p}.dense_intermediate_size ({spec.dense_intermediate_size}) must be "
            "positive when the model has dense layers",
        )
    return flags


def _check_layers(spec: ModelSpec, p: str) -> tuple[bool, ...]:
    """A model described layer by layer: one :class:`LayerSpec` per decoder layer, one MoE
    layer at least."""
    v = spec.layers
    require(
        isinstance(v, tuple) and all(isinstance(x, LayerSpec) for x in v),
        f"{p}.layers ({show(v)}) must be a tuple of LayerSpec",
    )
    require(
        len(v) == spec.num_layers,
        f"{p}.layers ({len(v)} records) must have one per layer ({spec.num_layers})",
    )
    flags = tuple(x.is_moe for x in v)
    require(any(flags), f"{p} has no MoE layer")
    return flags
