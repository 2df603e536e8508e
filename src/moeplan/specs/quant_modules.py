"""The model's linear modules as its Hugging Face checkpoint names them, layer by layer.

What a quantization config's target and ignore patterns are matched against
(:meth:`moeplan.specs.quant.QuantRules.resolve`): ``(class, name, params)`` of every linear
module a method may cover — each decoder layer's mixer projections (named per mixer kind),
expert 0 of each MoE layer (every expert of a layer alike), shared experts, dense MLPs and the
lm-head. Layers sit under the architecture's ``module_prefix`` (``model.layers``,
``model.language_model.layers``, ``backbone.layers``...).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from moeplan.specs.layer_math import mixer_linear_params
from moeplan.specs.layers import Mixer

GATED = ("gate_proj", "up_proj", "down_proj")


def _mixer_names(m: Mixer, h: int) -> list[tuple[str, int]]:
    """``(suffix, params)`` of the mixer's projections (sizes from :mod:`.layer_math`,
    split evenly where the checkpoint's split does not change the bytes)."""
    k = m.kind
    if k in ("mla", "dsa"):
        nh, qd = m.num_heads, m.qk_nope_head_dim + m.qk_rope_head_dim
        out = [("self_attn.kv_a_proj_with_mqa", h * (m.kv_lora_rank + m.qk_rope_head_dim)),
               ("self_attn.kv_b_proj", m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)),
               ("self_attn.o_proj", nh * m.v_head_dim * h)]  # fmt: skip
        if m.q_lora_rank:
            out += [("self_attn.q_a_proj", h * m.q_lora_rank),
                    ("self_attn.q_b_proj", m.q_lora_rank * nh * qd)]  # fmt: skip
        else:
            out.append(("self_attn.q_proj", h * nh * qd))
        if k == "dsa":
            rest = mixer_linear_params(m, h) - sum(n for _, n in out)
            out.append(("self_attn.indexer.wq_b", max(0, rest)))
        return out
    total = mixer_linear_params(m, h)
    if k in ("mha", "swa", "chunked", "msa"):
        kv = h * m.num_kv_heads * m.head_dim
        q = total - 2 * kv - m.num_heads * m.vo_dim * h
        return [
            ("self_attn.q_proj", max(0, q)),
            ("self_attn.k_proj", kv),
            ("self_attn.v_proj", kv),
            ("self_attn.o_proj", m.num_heads * m.vo_dim * h),
        ]
    names = {
        "csa": ("attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b"),
        "hca": ("attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b"),
        "gdn": ("linear_attn.in_proj_qkvz", "linear_attn.out_proj"),
        "kda": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
        "mamba2": ("mixer.in_proj", "mixer.out_proj"),
    }.get(k, ())
    return [(n, total // len(names)) for n in names]


def _mlp(prefix: str, h: int, inter: int, gated: bool, names: tuple[str, ...] = GATED
         ) -> list[tuple[str, int]]:  # fmt: skip
    used = names if gated else (names[1], names[2])
    return [(f"{prefix}.{n}", h * inter) for n in used]


def linear_modules(m: Any) -> Iterator[tuple[str, str, int]]:
    """``(class, name, params)`` of every linear module of spec ``m`` (see module docstring;
    Mixtral ``block_sparse_moe.experts.N.w1``, GPT-OSS fused ``mlp.experts.gate_up_proj``,
    Qwen ``mlp.shared_expert``, DeepSeek ``mlp.shared_experts``, Nemotron-H ``mixer.*``,
    Gemma-4 ``experts.gate_up_proj`` with its dense ``mlp`` beside them)."""
    arch = m.architecture.lower().replace("_", "")
    h = m.hidden_size
    ffn_at = "mixer" if "nemotronh" in arch else "mlp"
    shared_name = f"{ffn_at}.shared_expert" if "qwen" in arch else f"{ffn_at}.shared_experts"
    for layer, spec in enumerate(m.layer_specs):
        pre = f"{m.module_prefix}.{layer}"
        for suffix, n in _mixer_names(spec.mixer, h):
            yield "attention", f"{pre}.{suffix}", n
        f = spec.ffn
        if f.kind == "moe":
            i = f.intermediate_size
            if "mixtral" in arch:
                experts = _mlp("block_sparse_moe.experts.0", h, i, True, ("w1", "w3", "w2"))
            elif "gptoss" in arch:
                experts = [
                    ("mlp.experts.gate_up_proj", 2 * h * i),
                    ("mlp.experts.down_proj", h * i),
                ]
            elif "gemma4" in arch:  # transformers Gemma4TextExperts: 3D tensors beside the MLP
                experts = [("experts.gate_up_proj", 2 * h * i), ("experts.down_proj", h * i)]
            else:
                experts = _mlp(f"{ffn_at}.experts.0", h, i, f.gated)
            for suffix, n in experts:
                yield "experts", f"{pre}.{suffix}", n
            if f.shared_intermediate_size:
                # Gemma-4's dense MLP runs beside the experts (Gemma4TextDecoderLayer.mlp)
                at = "mlp" if "gemma4" in arch else shared_name
                for suffix, n in _mlp(at, h, f.shared_intermediate_size, f.gated):
                    yield "shared", f"{pre}.{suffix}", n
        elif f.kind == "dense":
            for suffix, n in _mlp(ffn_at, h, f.intermediate_size, f.gated):
                yield "dense", f"{pre}.{suffix}", n
    if m.lm_head_params:
        yield "lm_head", "lm_head", m.lm_head_params
