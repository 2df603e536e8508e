"""Per-module summaries of a :class:`~moeplan.specs.model.ModelSpec`: parameters, FLOPs per
token and stored bytes of each module kind, summed over all layers.

:func:`modules` is the table ``moeplan models`` prints (attention, routed experts, router,
shared experts, dense MLP, embedding, lm-head); FLOPs count 2 per multiply-accumulate, decode
of one token against ``context`` cached keys (sliding-window layers capped). The final norm
counts with the lm-head. :func:`weight_bytes_by_module` prices the same parameter sums with the
spec's :class:`~moeplan.specs.quant.WeightQuant` class of each module (scales and zero points
included), the figure weight memory is sized from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: a :class:`~moeplan.specs.model.ModelSpec` (not imported: the model module imports this one)
ModelSpec = Any


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleInfo:
    """One module kind of the model: total parameters and FLOPs per token (all layers)."""

    name: str
    params: int
    flops_per_token: float
    count: int


def modules(spec: ModelSpec, context: float = 4096.0) -> list[ModuleInfo]:
    """Per module kind: parameters and FLOPs per token (decode with ``context`` keys)."""
    nm, nd, nl = spec.num_moe_layers, spec.num_dense_layers, spec.num_layers
    attn_f = sum(spec.attn_proj_flops + spec.attn_core_flops(context, i) for i in range(nl))
    out = [
        ModuleInfo(
            name="attention", params=nl * spec.attn_params, flops_per_token=attn_f, count=nl
        ),
        ModuleInfo(
            name="routed_experts",
            params=nm * spec.num_experts * spec.expert_params,
            flops_per_token=nm * spec.top_k * spec.expert_flops,
            count=nm,
        ),
        ModuleInfo(
            name="router",
            params=nm * spec.router_params,
            flops_per_token=nm * spec.router_flops,
            count=nm,
        ),
    ]
    if spec.shared_intermediate_size:
        out.append(
            ModuleInfo(
                name="shared_experts",
                params=nm * spec.shared_params,
                flops_per_token=nm * spec.shared_flops,
                count=nm,
            )
        )
    if nd:
        out.append(
            ModuleInfo(
                name="dense_mlp",
                params=nd * spec.dense_mlp_params,
                flops_per_token=nd * spec.dense_mlp_flops,
                count=nd,
            )
        )
    out.append(
        ModuleInfo(name="embedding", params=spec.embedding_params, flops_per_token=0.0, count=1)
    )
    out.append(
        ModuleInfo(
            name="lm_head",
            params=spec.lm_head_params + spec.hidden_size,
            flops_per_token=2.0 * spec.vocab_size * spec.hidden_size,
            count=1,
        )
    )
    return out


def weight_bytes_by_module(spec: ModelSpec) -> dict[str, tuple[int, float]]:
    """Per module class: ``(parameters, bytes)`` over all layers; the final norm counts with
    the lm-head (``quant`` classes, same sums as :func:`modules`)."""
    nm, nd = spec.num_moe_layers, spec.num_dense_layers
    params = {
        "attention": spec.num_layers * spec.attn_params,
        "experts": nm * spec.num_experts * spec.expert_params,
        "shared": nm * spec.shared_params,
        "dense": nd * spec.dense_mlp_params,
        "router": nm * spec.router_params,
        "embedding": spec.embedding_params,
        "lm_head": spec.lm_head_params + spec.hidden_size,
    }
    q = spec.quant
    out = {c: (n, n * q.module(c).bytes_per_weight) for c, n in params.items()}
    if spec.params_towers:  # vision / audio towers: loaded in bf16, never quantized here
        out["towers"] = (spec.params_towers, spec.params_towers * TOWER_BYTES)
    return out


TOWER_BYTES = 2.0  # every sample checkpoint stores its towers in bf16 (quantization ignores them)
