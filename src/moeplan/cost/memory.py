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
  zero points included (``model.quant``, issue 13 item 4): attention, routed experts, shared
  experts, dense MLP, router, embedding and lm-head each have their own.
- ``RESERVED_BYTES`` covers the CUDA context, allocator fragmentation and NCCL's own
  buffers (aiconfigurator's system.yaml uses 3.5 GiB "other" + ~0.4 GiB NCCL for H100).

One memory model for every family and command (issue 16): a planner describes a GPU's
bytes as a :class:`MemoryBreakdown` (weights + KV + activations + buffers + the reserve);
its fit check is :func:`fits` (``total <= GPU memory``, i.e. the rest within
:func:`usable_bytes`) and the figure it reports is ``total`` — the same number, so no plan
can be reported above the GPU's memory. ``moeplan inspect`` uses :func:`floor_breakdown`.
"""

from __future__ import annotations

from dataclasses import dataclass

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
