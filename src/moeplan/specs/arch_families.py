"""Per-layer readers of the architectures whose layers differ (hybrid mixers, per-layer lists).

Each reader maps one architecture's ``config.json`` keys (of its language model: the
``text_config`` when there is one) onto :class:`~moeplan.specs.layers.LayerSpec` records; the
registry (:mod:`moeplan.specs.architectures`) names which reader serves which architecture.
Keys are read as each architecture's modelling code reads them (named per reader); defaults
are those of that code's config class, named where used.
"""

from __future__ import annotations

from moeplan.errors import MoeplanError
from moeplan.specs.config_reader import Cfg
from moeplan.specs.layers import FFN, LayerSpec, Mixer
from moeplan.specs.limits import MAX_CONTEXT, MAX_EXPERTS, MAX_INTERMEDIATE

ROUTER_KEYS = ("softmax", "sigmoid", "sqrtsoftplus")
FP32_STATE = {"float32": 4, "bfloat16": 2, "float16": 2}


def n_layers(c: Cfg) -> int:
    return c.int("num_hidden_layers", lo=1)


def gqa(c: Cfg, kind: str = "mha", **kw: object) -> Mixer:
    """Full / windowed attention from the usual keys (``kw`` overrides)."""
    h, heads = c.int("hidden_size", lo=1), c.int("num_attention_heads", lo=1)
    if not c.has("head_dim") and "head_dim" not in kw:
        _heads_fill_hidden(c, h, heads)
    base: dict[str, object] = dict(
        kind=kind, num_heads=heads, num_kv_heads=c.int("num_key_value_heads", default=heads),
        head_dim=c.int("head_dim", default=h // heads),
        bias=c.flag("attention_bias", False),
    )  # fmt: skip
    base.update(kw)
    return Mixer(**base)  # type: ignore[arg-type]


def _heads_fill_hidden(c: Cfg, h: int, heads: int) -> None:
    """Without ``head_dim`` the modelling code splits the hidden size over the heads."""
    if h % heads:
        raise MoeplanError(f"{c.field('hidden_size')} ({h}) must be num_attention_heads "
                           f"({heads}) x head_dim when head_dim is not given")  # fmt: skip


def moe(c: Cfg, **kw: object) -> FFN:
    """Routed experts from the usual keys (``kw`` overrides; an overridden key is not read)."""
    e_keys = ("num_experts", "num_local_experts", "n_routed_experts")
    k_keys = ("num_experts_per_tok", "top_k_experts", "moe_top_k")
    read = {
        "num_experts": lambda: c.int(*e_keys, lo=1, hi=MAX_EXPERTS),
        "top_k": lambda: c.int(*k_keys, lo=1, hi=MAX_EXPERTS),
        "intermediate_size": lambda: c.int("moe_intermediate_size", lo=1, hi=MAX_INTERMEDIATE),
        "router": lambda: c.text("scoring_func", "softmax", ROUTER_KEYS),
        "n_group": lambda: c.int("n_group", default=1, lo=1),
        "topk_group": lambda: c.int("topk_group", default=1, lo=1),
    }
    base: dict[str, object] = {k: f() for k, f in read.items() if k not in kw}
    return FFN(kind="moe", **base, **kw)  # type: ignore[arg-type]


def dense(c: Cfg, key: str = "intermediate_size", gated: bool = True) -> FFN:
    return FFN(kind="dense", intermediate_size=c.int(key, lo=1, hi=MAX_INTERMEDIATE), gated=gated)


def moe_flags(c: Cfg, n: int) -> tuple[bool, ...]:
    """MoE layers from ``first_k_dense_replace`` and ``moe_layer_freq`` (an int step, or a
    0/1 list per layer as MiMo-V2 and MiniMax-M3 write it)."""
    first = c.int("first_k_dense_replace", default=0)
    freq = c.raw("moe_layer_freq", 1)
    if isinstance(freq, list):
        flags = c.per_layer("moe_layer_freq", n, (0, 1))
        return tuple(i >= first and bool(f) for i, f in enumerate(flags))
    step = c.int("moe_layer_freq", default=1, lo=1)
    return tuple(i >= first and i % step == 0 for i in range(n))


# ---- Qwen3.5 / Qwen3-Next: Gated DeltaNet + gated full attention ---------------------------
def qwen3_5(c: Cfg) -> tuple[LayerSpec, ...]:
    """``Qwen3_5MoeTextConfig`` / ``Qwen3NextConfig``: ``layer_types`` of ``linear_attention``
    (Gated DeltaNet) and ``full_attention`` (output-gated GQA with q/k norms); every layer MoE
    with one gated shared expert (``mlp_only_layers`` dense)."""
    n = n_layers(c)
    types = c.per_layer("layer_types", n, ("linear_attention", "full_attention"))
    full = gqa(c, output_gate=c.flag("attn_output_gate", True), qk_norm=True)
    state = FP32_STATE.get(c.text("mamba_ssm_dtype", "float32", FP32_STATE), 4)
    lin = Mixer(
        kind="gdn", lin_key_heads=c.int("linear_num_key_heads", lo=1),
        lin_value_heads=c.int("linear_num_value_heads", lo=1),
        lin_key_dim=c.int("linear_key_head_dim", lo=1),
        lin_value_dim=c.int("linear_value_head_dim", lo=1),
        conv_kernel=c.int("linear_conv_kernel_dim", lo=1), state_bytes=state,
    )  # fmt: skip
    shared = c.int("shared_expert_intermediate_size", default=0)
    ffn = moe(c, num_shared_experts=1 if shared else 0, shared_intermediate_size=shared,
              shared_gate=bool(shared))  # fmt: skip
    mlp_only = set(c.raw("mlp_only_layers", []) or [])
    if mlp_only:
        raise MoeplanError(
            f"{c.field('mlp_only_layers')} ({sorted(mlp_only)[:4]}) is not "
            "supported for this architecture: every released Qwen3.5 layer is MoE"
        )
    return tuple(LayerSpec(mixer=lin if t == "linear_attention" else full, ffn=ffn) for t in types)


# ---- Gemma-4: sliding / global attention, MoE beside a dense MLP ---------------------------
def gemma4(c: Cfg) -> tuple[LayerSpec, ...]:
    """``Gemma4TextConfig``: ``layer_types`` sliding (``head_dim``, ``num_key_value_heads``,
    ``sliding_window``) / full (``global_head_dim``, ``num_global_key_value_heads``, K = V
    when ``attention_k_eq_v``), q/k norms; with ``enable_moe_block`` every layer runs its
    dense MLP (``intermediate_size``) and the routed experts side by side — the dense MLP is
    the layer's always-on shared expert. Norms: input, post-attention, pre/post feed-forward
    and the MoE block's three (seven per layer)."""
    n = n_layers(c)
    c.must_be("hidden_size_per_layer_input", (0,), "per-layer input embeddings are not modelled")
    c.must_be("num_kv_shared_layers", (0,), "KV sharing across layers is not modelled")
    c.must_be("use_double_wide_mlp", (False,), "double-wide MLPs are not modelled")
    c.must_be("enable_moe_block", (True,), "moeplan plans MoE models only")
    types = c.per_layer("layer_types", n, ("sliding_attention", "full_attention"))
    window = gqa(c, "swa", window=c.int("sliding_window", lo=1, hi=MAX_CONTEXT), qk_norm=True)
    full = gqa(
        c, head_dim=c.int("global_head_dim", "head_dim", lo=1),
        num_kv_heads=c.int("num_global_key_value_heads", "num_key_value_heads", lo=1),
        k_eq_v=c.flag("attention_k_eq_v", False), qk_norm=True,
    )  # fmt: skip
    ffn = moe(c, shared_intermediate_size=c.int("intermediate_size", lo=1),
              num_shared_experts=1)  # fmt: skip
    return tuple(
        LayerSpec(mixer=window if t == "sliding_attention" else full, ffn=ffn, norms=7)
        for t in types
    )


# ---- Llama-4: chunked local attention, NoPE global layers ----------------------------------
LLAMA4_NOPE_INTERVAL = 4  # transformers Llama4TextConfig: no_rope_layer_interval = 4


def llama4(c: Cfg) -> tuple[LayerSpec, ...]:
    """``Llama4TextConfig``: RoPE layers use chunked attention over ``attention_chunk_size``
    tokens, NoPE layers (``no_rope_layers[i] == 0``; default every 4th) full attention; MoE
    every ``interleave_moe_layer_step``-th layer (sigmoid router, one shared expert of
    ``intermediate_size``), dense layers ``intermediate_size_mlp``."""
    n = n_layers(c)
    if c.has("no_rope_layers"):
        rope = c.per_layer("no_rope_layers", n, (0, 1))
    else:
        rope = tuple(int((i + 1) % LLAMA4_NOPE_INTERVAL != 0) for i in range(n))
    chunk = c.int("attention_chunk_size", default=0, hi=MAX_CONTEXT)
    local = gqa(c, "chunked", chunk=chunk) if chunk else gqa(c)
    full = gqa(c)
    inter = c.int("intermediate_size", lo=1)
    ffn = moe(c, intermediate_size=inter, shared_intermediate_size=inter, num_shared_experts=1,
              router="sigmoid")  # fmt: skip
    step = c.int("interleave_moe_layer_step", default=1, lo=1)
    mlp = dense(c, "intermediate_size_mlp") if step > 1 else ffn
    return tuple(
        LayerSpec(mixer=local if rope[i] else full, ffn=ffn if (i + 1) % step == 0 else mlp)
        for i in range(n)
    )


# ---- Nemotron-H: Mamba-2 / attention / MoE blocks ------------------------------------------
NEMOTRON_BLOCKS = {"M": "mamba2", "*": "attention", "E": "moe", "-": "mlp"}


def nemotron_h(c: Cfg) -> tuple[LayerSpec, ...]:
    """``NemotronHConfig``: ``hybrid_override_pattern`` has one character per block — ``M``
    Mamba-2, ``*`` attention, ``E`` MoE, ``-`` MLP — each block one mixer *or* one FFN with
    one norm. Experts and MLPs are squared-ReLU (up/down, not gated); the router is sigmoid
    with a correction bias (``NemotronHTopkRouter``)."""
    n = n_layers(c)
    pat = c.raw("hybrid_override_pattern")
    if not isinstance(pat, str) or len(pat) != n:
        raise MoeplanError(f"{c.field('hybrid_override_pattern')} ({pat!r:.60}) must be a string "
                           f"of one character per layer ({n})")  # fmt: skip
    for i, ch in enumerate(pat):
        if ch not in NEMOTRON_BLOCKS:
            raise MoeplanError(
                f"{c.field('hybrid_override_pattern')}[{i}] ({ch!r}) is not "
                f"supported: supported blocks are {', '.join(NEMOTRON_BLOCKS)}"
            )
    state = FP32_STATE.get(c.text("mamba_ssm_cache_dtype", "float32", FP32_STATE), 4)
    mamba = Mixer(
        kind="mamba2", num_heads=c.int("mamba_num_heads", lo=1),
        head_dim=c.int("mamba_head_dim", lo=1), ssm_state=c.int("ssm_state_size", lo=1),
        ssm_groups=c.int("n_groups", lo=1), conv_kernel=c.int("conv_kernel", lo=1),
        state_bytes=state,
    )  # fmt: skip
    none_m, none_f = Mixer(kind="none"), FFN(kind="none")
    shared = c.int("moe_shared_expert_intermediate_size", default=0)
    experts = moe(c, gated=False, router="sigmoid", router_bias=True,
                  num_shared_experts=c.int("n_shared_experts", default=1 if shared else 0),
                  shared_intermediate_size=shared)  # fmt: skip
    blocks = {
        "M": (mamba, none_f), "*": (gqa(c), none_f), "E": (none_m, experts),
        "-": (none_m, dense(c, gated=False)) if "-" in pat else (none_m, none_f),
    }  # fmt: skip
    return tuple(LayerSpec(mixer=blocks[ch][0], ffn=blocks[ch][1], norms=1) for ch in pat)
