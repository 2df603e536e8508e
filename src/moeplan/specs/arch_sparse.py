"""Per-layer readers of DeepSeek-style sparse attention and of the GQA MoE families with
DeepSeek-style experts or per-layer lists (DeepSeek-V3.2 / GLM-5 DSA, DeepSeek-V4 CSA / HCA,
GLM-4.x, MiMo-V2, MiniMax-M2 / M3, Step-3.x). See :mod:`moeplan.specs.arch_families` for the
conventions."""

from __future__ import annotations

from moeplan.errors import MoeplanError
from moeplan.specs.arch_families import dense, gqa, moe, moe_flags, n_layers
from moeplan.specs.config_reader import Cfg
from moeplan.specs.layers import FFN, MAX_HC_ITERS, MAX_HC_MULT, LayerSpec, Mixer
from moeplan.specs.limits import MAX_CONTEXT


def _deepseek_moe(c: Cfg, **kw: object) -> FFN:
    shared = c.int("n_shared_experts", default=0)
    base: dict[str, object] = dict(
        num_shared_experts=shared,
        shared_intermediate_size=shared * c.int("moe_intermediate_size", lo=1),
        router_bias=c.raw("topk_method") == "noaux_tc",
    )
    return moe(c, **{**base, **kw})


def _mla_fields(c: Cfg) -> dict[str, object]:
    heads = c.int("num_attention_heads", lo=1)
    return dict(
        num_heads=heads, num_kv_heads=c.int("num_key_value_heads", default=heads),
        q_lora_rank=c.int("q_lora_rank", default=0), kv_lora_rank=c.int("kv_lora_rank", lo=1),
        qk_nope_head_dim=c.int("qk_nope_head_dim", lo=1),
        qk_rope_head_dim=c.int("qk_rope_head_dim", lo=1), v_head_dim=c.int("v_head_dim", lo=1),
    )  # fmt: skip


def dsa(c: Cfg) -> tuple[LayerSpec, ...]:
    """DeepSeek-V3.2 (``DeepseekV32ForCausalLM``) and GLM-5 (``GlmMoeDsaForCausalLM``): every
    layer MLA with a lightning indexer (``index_n_heads`` x ``index_head_dim``, top
    ``index_topk`` keys); FFN as DeepSeek-V3 (``first_k_dense_replace``, ``moe_layer_freq``)."""
    n = n_layers(c)
    mixer = Mixer(
        kind="dsa", index_topk=c.int("index_topk", lo=1, hi=MAX_CONTEXT),
        index_n_heads=c.int("index_n_heads", lo=1), index_head_dim=c.int("index_head_dim", lo=1),
        **_mla_fields(c),  # type: ignore[arg-type]
    )  # fmt: skip
    experts, mlp = _deepseek_moe(c), dense(c)
    return tuple(LayerSpec(mixer=mixer, ffn=experts if f else mlp) for f in moe_flags(c, n))


def glm4_moe(c: Cfg) -> tuple[LayerSpec, ...]:
    """GLM-4.5 / 4.5-Air / 4.6 / 4.7 (``Glm4MoeForCausalLM``; transformers ``Glm4MoeConfig``
    and ``modeling_glm4_moe.py``): GQA of ``head_dim`` whose q/k/v projections carry a bias when
    ``attention_bias`` (``o_proj`` never does) and per-head q/k RMS norms when ``use_qk_norm``;
    layers before ``first_k_dense_replace`` are dense MLPs of ``intermediate_size``, every later
    layer MoE (the config has no layer step) with ``n_shared_experts`` x
    ``moe_intermediate_size`` shared and ``Glm4MoeTopkRouter`` — sigmoid scores with an
    ``e_score_correction_bias`` always (the config names no scoring function), grouped by
    ``n_group`` / ``topk_group``. ``partial_rotary_factor`` rotates part of each head (RoPE is
    elementwise and not priced; the cached key keeps its full ``head_dim``)."""
    n = n_layers(c)
    c.must_be("moe_layer_freq", (1,), "Glm4MoeConfig has no MoE layer step (every layer from "
              "first_k_dense_replace is MoE)")  # fmt: skip
    c.must_be("hidden_act", ("silu",), "the experts and MLPs are SiLU-gated (SGLang glm4_moe.py "
              "Glm4MoeMLP refuses other activations)")  # fmt: skip
    rotary = c.float("partial_rotary_factor", 0.5, hi=1.0)  # Glm4MoeConfig default 0.5
    if rotary <= 0.0:
        raise MoeplanError(f"{c.field('partial_rotary_factor')} ({rotary}) must be in (0, 1]")
    first = c.int("first_k_dense_replace", default=0, hi=n)
    if first >= n:
        raise MoeplanError(f"{c.field('first_k_dense_replace')} ({first}) leaves no MoE layer "
                           f"of num_hidden_layers ({n})")  # fmt: skip
    mixer = gqa(c, qk_norm=c.flag("use_qk_norm", False))
    experts = _deepseek_moe(c, router="sigmoid", router_bias=True)
    mlp = dense(c)
    return tuple(LayerSpec(mixer=mixer, ffn=experts if i >= first else mlp) for i in range(n))


V4_RATIOS = {0: "swa", 4: "csa", 128: "hca"}  # DeepSeek-V4 compress_ratios values


def deepseek_v4(c: Cfg) -> tuple[LayerSpec, ...]:
    """DeepSeek-V4 (``DeepseekV4ForCausalLM``): ``compress_ratios[i]`` picks layer ``i``'s
    attention — 0: sliding window only, 4: CSA (compressed entries, indexer top
    ``index_topk``), 128: HCA — all one-KV-head MQA of ``head_dim`` with low-rank q
    (``q_lora_rank``), grouped low-rank output (``o_groups`` x ``o_lora_rank``), attention
    sinks and a ``sliding_window`` local branch. The list has one more entry per MTP layer
    (dropped). FFN: MoE in every layer, the first ``num_hash_layers`` routed by token-id
    hash, the rest by ``scoring_func``."""
    n = n_layers(c)
    ratios = c.per_layer("compress_ratios", n, tuple(V4_RATIOS), at_least=True)
    common: dict[str, object] = dict(
        num_heads=c.int("num_attention_heads", lo=1),
        num_kv_heads=c.int("num_key_value_heads", lo=1), head_dim=c.int("head_dim", lo=1),
        q_lora_rank=c.int("q_lora_rank", lo=1), qk_rope_head_dim=c.int("qk_rope_head_dim", lo=1),
        o_lora_rank=c.int("o_lora_rank", default=0), o_groups=c.int("o_groups", default=0),
        window=c.int("sliding_window", lo=1, hi=MAX_CONTEXT), sinks=True, shared_kv=True,
    )  # fmt: skip
    index: dict[str, object] = dict(
        index_topk=c.int("index_topk", lo=1, hi=MAX_CONTEXT),
        index_n_heads=c.int("index_n_heads", lo=1), index_head_dim=c.int("index_head_dim", lo=1),
    )  # fmt: skip
    mixers = {
        0: Mixer(kind="swa", **common),  # type: ignore[arg-type]
        4: Mixer(kind="csa", compress_ratio=4, **common, **index),  # type: ignore[arg-type]
        128: Mixer(kind="hca", compress_ratio=128, **common),  # type: ignore[arg-type]
    }  # fmt: skip
    hashed = c.int("num_hash_layers", default=0)
    learned, by_hash = _deepseek_moe(c), _deepseek_moe(c, router="hash", router_bias=False)
    hc = c.int("hc_mult", default=0, hi=MAX_HC_MULT)  # mHC residual streams (0: none)
    iters = c.int("hc_sinkhorn_iters", default=0, hi=MAX_HC_ITERS) if hc else 0
    return tuple(
        LayerSpec(mixer=mixers[r], ffn=by_hash if i < hashed else learned, hc_mult=hc,
                  hc_sinkhorn_iters=iters)
        for i, r in enumerate(ratios)
    )  # fmt: skip


def mimo_v2(c: Cfg) -> tuple[LayerSpec, ...]:
    """MiMo-V2-Flash (``MiMoV2FlashForCausalLM``): ``hybrid_layer_pattern`` 1 = sliding window
    (``swa_*`` heads and dims, sinks when ``add_swa_attention_sink_bias``), 0 = full
    attention; ``moe_layer_freq`` per layer (dense layers ``intermediate_size``)."""
    n = n_layers(c)
    pattern = c.per_layer("hybrid_layer_pattern", n, (0, 1))
    full = gqa(c, v_head_dim=c.int("v_head_dim", default=0),
               sinks=c.flag("add_full_attention_sink_bias", False))  # fmt: skip
    window = gqa(
        c, "swa", num_heads=c.int("swa_num_attention_heads", "num_attention_heads", lo=1),
        num_kv_heads=c.int("swa_num_key_value_heads", "num_key_value_heads", lo=1),
        head_dim=c.int("swa_head_dim", "head_dim", lo=1),
        v_head_dim=c.int("swa_v_head_dim", "v_head_dim", default=0),
        window=c.int("sliding_window", lo=1, hi=MAX_CONTEXT),
        sinks=c.flag("add_swa_attention_sink_bias", False),
    )  # fmt: skip
    experts, mlp = _deepseek_moe(c), dense(c)
    flags = moe_flags(c, n)
    return tuple(
        LayerSpec(mixer=window if p else full, ffn=experts if f else mlp)
        for p, f in zip(pattern, flags, strict=True)
    )


def minimax(c: Cfg) -> tuple[LayerSpec, ...]:
    """MiniMax-M2 / M3 (``MiniMaxM2ForCausalLM``, ``MiniMaxM3ForCausalLM``): GQA with q/k norms,
    sigmoid router with a routing bias (``use_routing_bias``); M3: dense first
    ``first_k_dense_replace`` layers (``dense_intermediate_size``), ``moe_layer_freq`` per
    layer, shared experts, and MiniMax sparse attention where
    ``sparse_attention_config.sparse_attention_freq`` is 1."""
    n = n_layers(c)
    c.must_be("attention_output_gate", (False,), "gated attention output is not modelled")
    full = gqa(c, qk_norm=c.flag("use_qk_norm", False))
    shared = c.int("shared_intermediate_size", default=0)
    inter = c.int("moe_intermediate_size", "intermediate_size", lo=1)
    experts = moe(
        c, intermediate_size=inter, router_bias=c.flag("use_routing_bias", False),
        num_shared_experts=c.int("n_shared_experts", default=1 if shared else 0),
        shared_intermediate_size=shared,
    )  # fmt: skip
    flags = moe_flags(c, n)
    mlp = dense(c, "dense_intermediate_size") if not all(flags) else experts
    sparse = c.sub("sparse_attention_config")
    use = sparse is not None and sparse.flag("use_sparse_attention", False)
    kinds = sparse.per_layer("sparse_attention_freq", n, (0, 1)) if use else (0,) * n
    msa = full
    if use and sparse is not None:
        msa = gqa(
            c, "msa", qk_norm=full.qk_norm, block_size=sparse.int("sparse_block_size", lo=1),
            topk_blocks=sparse.int("sparse_topk_blocks", lo=1),
            local_blocks=sparse.int("sparse_local_block", default=0),
            index_n_heads=sparse.int("sparse_num_index_heads", lo=1),
            index_head_dim=sparse.int("sparse_index_dim", lo=1),
        )  # fmt: skip
    return tuple(
        LayerSpec(mixer=msa if k else full, ffn=experts if f else mlp)
        for k, f in zip(kinds, flags, strict=True)
    )


def step3(c: Cfg) -> tuple[LayerSpec, ...]:
    """Step-3.5 / 3.7 Flash (``Step3p7FlashForCausalLM``): ``layer_types`` full / sliding
    (``sliding_window``), dense first ``first_k_dense_replace`` layers, MoE with
    ``n_shared_experts`` x ``share_expert_dim`` shared, sigmoid router with a bias
    (``use_moe_router_bias``)."""
    n = n_layers(c)
    types = c.per_layer("layer_types", n, ("full_attention", "sliding_attention"))
    full = gqa(c)
    window = gqa(c, "swa", window=c.int("sliding_window", lo=1, hi=MAX_CONTEXT))
    shared_n = c.int("n_shared_experts", default=0)
    experts = moe(c, num_shared_experts=shared_n,
                  shared_intermediate_size=shared_n * c.int("share_expert_dim", default=0),
                  router_bias=c.flag("use_moe_router_bias", False))  # fmt: skip
    mlp = dense(c)
    first = c.int("first_k_dense_replace", default=0)
    if first >= n:
        raise MoeplanError(f"{c.field('first_k_dense_replace')} ({first}) leaves no MoE layer")
    return tuple(
        LayerSpec(
            mixer=full if t == "full_attention" else window, ffn=experts if i >= first else mlp
        )  # fmt: skip
        for i, t in enumerate(types)
    )
