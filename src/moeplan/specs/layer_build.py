"""Per-layer records from the uniform description of a model, and back.

:func:`legacy_layers` turns a :class:`~moeplan.specs.model.ModelSpec` built from its uniform
fields (one attention kind, ``first_k_dense`` / ``moe_layer_freq`` / ``dense_layers`` for the
FFN, ``sliding_layers``) into one :class:`~moeplan.specs.layers.LayerSpec` per decoder layer.
:func:`uniform_fields` goes the other way for a model described layer by layer: the fields
the rest of moeplan reads (the attention of its attention layers, the shape of its MoE and
dense layers), so both descriptions give the same sums.
"""

from __future__ import annotations

from typing import Any

from moeplan.errors import MoeplanError
from moeplan.specs.layers import FFN, LATENT_KINDS, LayerSpec, Mixer


def _attention_mixer(s: Any, sliding: bool) -> Mixer:
    if s.attention == "mla":
        return Mixer(
            kind="mla", num_heads=s.num_attention_heads, num_kv_heads=s.num_kv_heads,
            q_lora_rank=s.q_lora_rank, kv_lora_rank=s.kv_lora_rank,
            qk_nope_head_dim=s.qk_nope_head_dim, qk_rope_head_dim=s.qk_rope_head_dim,
            v_head_dim=s.v_head_dim,
        )  # fmt: skip
    return Mixer(
        kind="swa" if sliding else "mha", num_heads=s.num_attention_heads,
        num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, window=s.sliding_window if sliding
        else 0, bias=s.attention_bias, out_bias=s.attention_out_bias, sinks=s.attention_sinks,
        qk_norm=s.qk_norm,
    )  # fmt: skip


def legacy_layers(s: Any, moe_flags: tuple[bool, ...]) -> tuple[LayerSpec, ...]:
    """One record per layer from the uniform fields of spec ``s`` (``moe_flags``: per layer)."""
    moe = FFN(
        kind="moe", intermediate_size=s.moe_intermediate_size, gated=s.gated_experts,
        bias=s.expert_bias, num_experts=s.num_experts, top_k=s.top_k,
        num_shared_experts=s.num_shared_experts,
        shared_intermediate_size=s.shared_intermediate_size, shared_gate=s.shared_expert_gate,
        router=s.scoring_func, router_bias=s.router_bias, n_group=s.n_group,
        topk_group=s.topk_group,
    )  # fmt: skip
    dense = (
        FFN(kind="dense", intermediate_size=s.dense_intermediate_size)
        if s.dense_intermediate_size
        else None
    )
    full, window = _attention_mixer(s, False), None
    sliding = set(s.sliding_layers) if s.sliding_window > 0 else set()
    if sliding:
        window = _attention_mixer(s, True)
    out = []
    for i, is_moe in enumerate(moe_flags):
        ffn = moe if is_moe else dense
        if ffn is None:  # check_structure has refused this already
            raise MoeplanError(f"model[{s.name}] layer {i} is dense without an intermediate size")
        mixer = window if i in sliding and window is not None else full
        out.append(LayerSpec(mixer=mixer, ffn=ffn))
    return tuple(out)


def _first(layers: tuple[LayerSpec, ...], kinds: tuple[str, ...]) -> Mixer | None:
    return next((x.mixer for x in layers if x.mixer.kind in kinds), None)


FULL_KINDS = ("mla", "dsa", "mha", "msa", "csa", "hca")
WINDOW_KINDS = ("swa", "chunked")


def primary_layer(layers: tuple[LayerSpec, ...]) -> int:
    """The layer whose attention the uniform fields describe: the first full-context one,
    else the first windowed one, else layer 0."""
    for kinds in (FULL_KINDS, WINDOW_KINDS):
        for i, x in enumerate(layers):
            if x.mixer.kind in kinds:
                return i
    return 0


def uniform_fields(layers: tuple[LayerSpec, ...]) -> dict[str, Any]:
    """The uniform ModelSpec fields that summarise ``layers`` (see module docstring).

    Attention: the first full-context attention layer (else the first windowed one);
    ``attention`` is ``mla`` for the latent kinds with a ``kv_lora_rank`` (mla, dsa) and
    ``gqa`` otherwise (DeepSeek-V4's csa / hca are one-KV-head MQA of ``head_dim``)."""
    m = _first(layers, FULL_KINDS) or _first(layers, WINDOW_KINDS)
    if m is None:
        raise MoeplanError("model has no attention layer: a model of only linear / state-space "
                           "mixers is not supported")  # fmt: skip
    out: dict[str, Any] = dict(num_attention_heads=m.num_heads, num_kv_heads=max(1, m.num_kv_heads))
    if m.kind in LATENT_KINDS and m.kv_lora_rank:
        out.update(
            attention="mla", head_dim=0, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
            qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
            v_head_dim=m.v_head_dim,
        )  # fmt: skip
    else:
        out.update(
            attention="gqa",
            head_dim=m.head_dim,
            attention_bias=m.bias,
            attention_out_bias=m.out_bias,
            attention_sinks=m.sinks,
            qk_norm=m.qk_norm,
        )
    win = _first(layers, ("swa", "chunked"))
    if win is not None:
        out["sliding_window"] = win.window or win.chunk
        out["sliding_layers"] = tuple(i for i, x in enumerate(layers) if x.mixer.kind == win.kind)
    moes = [x.ffn for x in layers if x.ffn.kind == "moe"]
    moe = next((f for f in moes if f.router != "hash"), moes[0])
    out.update(
        num_experts=moe.num_experts, top_k=moe.top_k, moe_intermediate_size=moe.intermediate_size,
        expert_bias=moe.bias, gated_experts=moe.gated, num_shared_experts=moe.num_shared_experts,
        shared_intermediate_size=moe.shared_intermediate_size, shared_expert_gate=moe.shared_gate,
        router_bias=moe.router_bias, n_group=moe.n_group, topk_group=moe.topk_group,
        scoring_func="softmax" if moe.router == "hash" else moe.router,
    )  # fmt: skip
    dense = next((x.ffn for x in layers if x.ffn.kind == "dense"), None)
    out["dense_intermediate_size"] = dense.intermediate_size if dense else 0
    return out
