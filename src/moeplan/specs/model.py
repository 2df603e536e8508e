"""ModelSpec: an MoE transformer's shape, from a Hugging Face ``config.json`` or DeepSeek's keys.

One record per decoder layer (``layers``: :class:`~moeplan.specs.layers.LayerSpec`, a mixer —
full, latent, windowed, chunked, sparse, compressed, linear or state-space attention — and an
FFN); every total is summed over them (:mod:`moeplan.specs.layer_math`). The uniform fields
(``attention``, ``num_kv_heads``, ``num_experts``...) describe the model's attention layers and
its MoE / dense layers; a model built from them alone (every layer alike) gets its records
from :func:`~moeplan.specs.layer_build.legacy_layers`, a model read layer by layer
(:mod:`moeplan.specs.architectures`) gets the fields from
:func:`~moeplan.specs.layer_build.uniform_fields`.

What is derived, per decoder layer and per module (attention, shared experts, routed experts,
dense MLP, router, embeddings / lm-head): parameter counts, FLOPs per token (2 per multiply-
accumulate), KV-cache / recurrent-state bytes per token and per sequence, and the activation
size of one token. Vision / audio towers (``towers``) are weights only.

Conventions and decisions (tested in ``tests/test_specs_model.py``):

- Parameters are counted exactly as the checkpoint stores them, norms and biases included.
  ``params_active`` counts every non-routed parameter plus ``top_k`` routed experts per MoE
  layer. Publishers disagree on one term: DeepSeek, Moonshot (Kimi) and OpenAI (GPT-OSS)
  leave the input-embedding table out of "activated" (a lookup touches one row), Qwen and
  Mistral count it. ``active_counts_embedding`` records the family's convention (set from
  ``model_type``); with it every preset matches its published total/activated size within
  2 %. DeepSeek's multi-token-prediction layers
  (``num_nextn_predict_layers``) are not part of the published 671B and are not counted.
- MLA (DeepSeek-V2/V3, Kimi-K2) caches the compressed latent: ``kv_lora_rank +
  qk_rope_head_dim`` values per token per layer (other kinds: :mod:`.layer_math`). Attention FLOPs use the non-absorbed form
  (per head ``qk_nope + qk_rope`` for scores and ``v_head_dim`` for values).
- GPT-OSS: attention sinks add one parameter per head; sliding-window layers cap both the
  KV cache and the attention context at ``sliding_window`` tokens
  (:meth:`ModelSpec.kv_bytes_for_context`, :meth:`ModelSpec.attn_core_flops`).
- Dense layers: the first ``first_k_dense`` layers (DeepSeek ``first_k_dense_replace``),
  Qwen's ``mlp_only_layers`` and layers skipped by ``moe_layer_freq`` / ``decoder_sparse_step``
  use a dense SwiGLU MLP of ``dense_intermediate_size``.
- Weight storage: ``quant`` (:class:`~moeplan.specs.quant.WeightQuant`)
  gives the bytes per weight, scales and zero points included, of each module class, read
  from the config's ``quantization_config`` (fp8 block, MXFP4, AWQ, GPTQ, bitsandbytes,
  compressed-tensors, ModelOpt; an unknown method is an error, never bf16).
  ``weight_bytes`` (attention) and ``expert_weight_bytes`` (routed experts) are its two
  most used figures;
  :meth:`ModelSpec.weight_bytes_total` sums every class. KV cache and activations are bf16.
- Size limits: every dimension is bounded by a ``MAX_*`` constant below, checked
  before anything is sized from it, so a corrupt config fails in microseconds with one line
  instead of allocating for 10^8 layers. The limits are far above every released MoE (largest
  shipped preset: 94 layers, 7168 hidden, 384 experts, 201088 vocabulary).

Split by concern: this module holds the dataclass and the derived per-layer and per-token
quantities; the validation run on construction is :mod:`moeplan.specs.model_checks`, the
per-module tables (:class:`ModuleInfo`) are :mod:`moeplan.specs.model_summary`, and reading a
``config.json`` into the fields is :mod:`moeplan.specs.hf_config`. Every name is still
importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.errors import require
from moeplan.specs import layer_math, model_summary
from moeplan.specs.layer_build import legacy_layers, primary_layer
from moeplan.specs.layers import LayerSpec, Tower
from moeplan.specs.limits import (  # noqa: F401 (re-exported)
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_ROUTED_SCALE,
    MAX_VOCAB,
    MAX_WEIGHT_BYTES,
)
from moeplan.specs.model_checks import SCORING_FUNCS, check_bounds, check_structure  # noqa: F401 (re-exported)
from moeplan.specs.model_summary import ModuleInfo
from moeplan.specs.quant import UNQUANTIZED, WeightQuant

ACT_BYTES = 2  # bf16 activations and KV cache


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Shape of an MoE decoder-only transformer. Validated on construction."""

    name: str
    architecture: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    attention: str = "gqa"  # "gqa" (MHA/GQA/MQA) or "mla"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    attention_bias: bool = False
    attention_out_bias: bool = False
    attention_sinks: bool = False
    qk_norm: bool = False
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    expert_bias: bool = False
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    shared_expert_gate: bool = False
    dense_intermediate_size: int = 0
    first_k_dense: int = 0
    #: DeepSeek's multi-token-prediction modules (config ``num_nextn_predict_layers``): not
    #: counted in the model's size, used by speculative decoding (``--mtp``)
    num_nextn_predict_layers: int = 0
    moe_layer_freq: int = 1
    dense_layers: tuple[int, ...] = ()  # extra dense layers (Qwen mlp_only_layers)
    router_bias: bool = False
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    scoring_func: str = "softmax"
    tie_word_embeddings: bool = False
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    active_counts_embedding: bool = False
    active_counts_lm_head: bool = True  # the family's "activated" figure includes the lm-head
    quant: WeightQuant = UNQUANTIZED
    #: one record per decoder layer (:mod:`moeplan.specs.layers`); empty: built from the
    #: uniform fields above (every layer the same attention, MoE / dense as the fields say)
    layers: tuple[LayerSpec, ...] = ()
    #: vision / audio towers loaded with the model (weights only, not served)
    towers: tuple[Tower, ...] = ()
    gated_experts: bool = True  # SwiGLU experts (3 matrices); False: up/down only
    module_prefix: str = "model.layers"  # the checkpoint's name of the decoder-layer list
    _moe_flags: tuple[bool, ...] = field(default=(), repr=False, compare=False)
    _layers: tuple[LayerSpec, ...] = field(default=(), repr=False, compare=False)
    _primary: int = field(default=0, repr=False, compare=False)
    #: whole-model sums over ``_layers``, computed once (the spec is frozen; emptied by
    #: ``__post_init__``, so ``dataclasses.replace`` never carries a stale one)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        p = f"model[{self.name}]"
        check_bounds(self, p)
        flags = check_structure(self, p)
        layers = self.layers or legacy_layers(self, flags)
        object.__setattr__(self, "_layers", layers)
        object.__setattr__(self, "_moe_flags", tuple(x.is_moe for x in layers))
        object.__setattr__(self, "_primary", primary_layer(layers))
        object.__setattr__(self, "_memo", {})

    # ---- layer structure -------------------------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        """True when decoder layer ``layer`` (0-based) has routed experts."""
        return self._moe_flags[layer]

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self._moe_flags) if m)

    @property
    def num_moe_layers(self) -> int:
        return sum(self._moe_flags)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def is_sliding_layer(self, layer: int) -> bool:
        """Whether ``layer`` attends to a window (``swa``) or a chunk (``chunked``) only."""
        return self._layers[layer].mixer.kind in ("swa", "chunked")

    @property
    def layer_specs(self) -> tuple[LayerSpec, ...]:
        """One record per decoder layer (given, or built from the uniform fields)."""
        return self._layers

    def layer_kinds(self) -> dict[str, int]:
        """Decoder layers per ``<mixer>+<ffn>`` kind, in first-seen order."""
        out: dict[str, int] = {}
        for x in self._layers:
            out[x.kind] = out.get(x.kind, 0) + 1
        return out

    def with_layers(self, num_layers: int) -> ModelSpec:
        """Same shape with ``num_layers`` decoder layers (keeps the dense prefix if it fits;
        a per-layer description keeps its first layers, repeating its pattern if longer)."""
        require(num_layers >= 1, f"layers ({num_layers}) must be >= 1")
        if self.layers:
            n = len(self.layers)
            kept = tuple(self.layers[i % n] for i in range(num_layers))
            require(any(x.is_moe for x in kept), f"layers ({num_layers}) keep no MoE layer")
            return replace(self, num_layers=num_layers, layers=kept, _moe_flags=(), _layers=(),
                           sliding_layers=tuple(i for i in self.sliding_layers if i < num_layers),
                           dense_layers=(), first_k_dense=0)  # fmt: skip
        fkd = min(self.first_k_dense, max(0, num_layers - 1))
        return replace(
            self,
            num_layers=num_layers,
            first_k_dense=fkd,
            _moe_flags=(),
            _layers=(),
            sliding_layers=tuple(i for i in self.sliding_layers if i < num_layers),
            dense_layers=tuple(i for i in self.dense_layers if i < num_layers),
        )

    # ---- per-layer parameters -------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Per-head query/key dimension used for scores."""
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def vo_dim(self) -> int:
        """Per-head value dimension."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    def _once(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` the first time ``key`` is asked of this spec, then remembered (the
        serving search asks the memory model for these sums once per engine candidate)."""
        memo = self._memo
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def _mean(self, values: list[int]) -> float | int:
        total = sum(values)
        return total // len(values) if total % len(values) == 0 else total / len(values)

    @property
    def attn_linear_params(self) -> float | int:
        """Projection weights (and biases) of the mixer, per decoder layer (the mean over
        layers when they differ, so ``num_layers`` times it is the model's sum); norms
        excluded."""
        h = self.hidden_size
        return self._once(
            "attn_linear_params",
            lambda: self._mean([layer_math.mixer_linear_params(x.mixer, h) for x in self._layers]),
        )

    @property
    def attn_params(self) -> float | int:
        """One mixer block: projections, sinks, q/k norms, the layer's norms and its mHC
        mixing weights (:func:`~.layer_math.hc_params`; the mean over layers when they
        differ). mHC weights are stored in fp32 but counted at the attention's storage here
        (DeepSeek-V4-Flash: 34 M parameters, < 0.1 % of its weight bytes)."""
        h = self.hidden_size
        return self._once("attn_params", lambda: self._mean(
            [layer_math.mixer_params(x.mixer, h) + x.norms * h + layer_math.hc_params(x, h)
             for x in self._layers]
        ))  # fmt: skip

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down; up, down when not gated)."""
        h, i = self.hidden_size, self.moe_intermediate_size
        return layer_math.mlp_params(h, i, self.gated_experts, self.expert_bias)

    @property
    def shared_params(self) -> int:
        """All shared experts of one MoE layer (and Qwen2-MoE's shared-expert gate)."""
        n = layer_math.mlp_params(
            self.hidden_size, self.shared_intermediate_size, self.gated_experts
        )
        return n + (self.hidden_size if self.shared_expert_gate else 0)

    @property
    def router_params(self) -> int:
        n = self.hidden_size * self.num_experts
        return n + (self.num_experts if self.router_bias else 0)

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.dense_intermediate_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def params_towers(self) -> int:
        """Vision / audio tower parameters (loaded, not served; not in ``params_total``)."""
        return sum(t.params for t in self.towers)

    @property
    def params_total(self) -> int:
        """Every parameter of the language model (towers excluded, see ``params_towers``)."""
        h = self.hidden_size
        layers = self._once(
            "layers_total", lambda: sum(layer_math.layer_params(x, h) for x in self._layers)
        )
        return layers + self.embedding_params + self.lm_head_params + h

    @property
    def params_active(self) -> int:
        """Parameters one token uses: ``top_k`` experts per MoE layer; the embedding table
        as the family counts it (``active_counts_embedding``)."""
        h = self.hidden_size
        layers = self._once(
            "layers_active",
            lambda: sum(layer_math.layer_params(x, h, active=True) for x in self._layers),
        )
        emb = self.embedding_params if self.active_counts_embedding else 0
        head = self.lm_head_params if self.active_counts_lm_head else 0
        return layers + emb + head + h

    # ---- FLOPs per token (2 per multiply-accumulate) ----------------------------------
    @property
    def attn_proj_flops(self) -> float:
        return 2.0 * self.attn_linear_params

    def attn_core_flops(self, context: float, layer: int | None = None) -> float:
        """Mixer work of one token attending to ``context`` cached keys (``layer``: that
        layer's kind, window and sparse selection; ``None``: the uniform attention)."""
        if layer is not None:
            return layer_math.mixer_core_flops(self._layers[layer].mixer, context)
        return 2.0 * self.num_attention_heads * (self.q_dim + self.vo_dim) * context

    @property
    def expert_flops(self) -> float:
        return (
            2.0 * (3 if self.gated_experts else 2) * self.hidden_size * self.moe_intermediate_size
        )

    @property
    def shared_flops(self) -> float:
        mats = 3 if self.gated_experts else 2
        return 2.0 * mats * self.hidden_size * self.shared_intermediate_size

    @property
    def dense_mlp_flops(self) -> float:
        return 6.0 * self.hidden_size * self.dense_intermediate_size

    @property
    def router_flops(self) -> float:
        return 2.0 * self.hidden_size * self.num_experts

    def flops_per_token(self, context: float, phase: str = "decode") -> float:
        """Forward FLOPs of one token, all layers plus lm-head.

        ``phase='decode'``: the token attends to ``context`` cached tokens.
        ``phase='prefill'``: a prompt of ``context`` tokens, averaged per token (causal:
        the mean token sees ``(context + 1) / 2`` keys).
        """
        ctx = (context + 1) / 2 if phase == "prefill" else context
        h = self.hidden_size
        total = 2.0 * self.vocab_size * h
        for x in self._layers:
            total += 2.0 * layer_math.mixer_linear_params(x.mixer, h)
            total += layer_math.mixer_core_flops(x.mixer, ctx) + layer_math.ffn_flops(x.ffn, h)
        return total

    # ---- memory per token (per layer kind: :mod:`moeplan.specs.layer_math`) --------------
    def kv_bytes_per_token_layer(self, layer: int | None = None) -> float:
        """Cache bytes one token adds to decoder layer ``layer`` (MLA: latent + rope key;
        linear mixers: 0); ``None``: a layer of the uniform attention the fields describe
        (what the uniform attention path reads per cached token; totals over the model are
        :attr:`kv_bytes_per_token` and :mod:`moeplan.cost.memory`)."""
        if layer is None:
            layer = self._primary
        return layer_math.kv_bytes_per_token(self._layers[layer].mixer)

    @property
    def kv_bytes_per_token(self) -> float:
        """Cache bytes per token over all layers (window caps not applied)."""
        return self._once(
            "kv_bytes_per_token",
            lambda: sum(layer_math.kv_bytes_per_token(x.mixer) for x in self._layers),
        )

    def kv_bytes_for_context(self, context: int) -> float:
        """Cache bytes of one sequence of ``context`` tokens: KV capped per layer by its
        window / chunk, compressed for csa / hca, plus linear layers' fixed state."""
        return sum(layer_math.kv_bytes_for_context(x.mixer, context) for x in self._layers)

    @property
    def state_bytes_per_seq(self) -> float:
        """Fixed recurrent state of one sequence over the linear / state-space layers."""
        return self._once(
            "state_bytes_per_seq",
            lambda: sum(layer_math.state_bytes_per_seq(x.mixer) for x in self._layers),
        )

    def kv_bytes_by_kind(self, context: int) -> dict[str, float]:
        """Cache bytes of one ``context``-token sequence per mixer kind (all its layers)."""
        out: dict[str, float] = {}
        for x in self._layers:
            k = x.mixer.kind
            out[k] = out.get(k, 0.0) + layer_math.kv_bytes_for_context(x.mixer, context)
        return out

    @property
    def hidden_bytes(self) -> int:
        """One token's hidden state in bf16 (what all-to-all and P2P move per token)."""
        return self.hidden_size * ACT_BYTES

    # ---- summaries --------------------------------------------------------------------
    def modules(self, context: float = 4096.0) -> list[ModuleInfo]:
        """Per module kind: parameters and FLOPs per token (decode with ``context`` keys)."""
        return model_summary.modules(self, context)

    # ---- weight storage (quantization, see ``quant``) ------------------------------------
    @property
    def weight_bytes(self) -> float:
        """Bytes per attention weight (scales included)."""
        return self.quant.attention.bytes_per_weight

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes per routed-expert weight (scales included)."""
        return self.quant.experts.bytes_per_weight

    def weight_bytes_by_module(self) -> dict[str, tuple[int, float]]:
        """Per module class: ``(parameters, bytes)`` over all layers; the final norm counts
        with the lm-head (``quant`` classes, same sums as :meth:`modules`)."""
        return model_summary.weight_bytes_by_module(self)

    def weight_bytes_total(self) -> float:
        """Bytes of every weight as the checkpoint stores them (scales included)."""
        return sum(b for _, b in self.weight_bytes_by_module().values())

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_config(
        cls, config: dict[str, Any], name: str = "custom", hf_quant: Any = None
    ) -> ModelSpec:
        """Build from a model ``config.json`` dict (any registered architecture, or DeepSeek's
        native keys); ``hf_quant``: the ``hf_quant_config.json`` beside it, if any."""
        from moeplan.specs.model_reader import spec_kwargs, with_quantization

        return with_quantization(cls(**spec_kwargs(config, name)), config, name, hf_quant)
