"""ModelSpec: an MoE transformer's shape, from a Hugging Face ``config.json`` or DeepSeek's keys.

What is derived, per decoder layer and per module (attention, shared experts, routed experts,
dense MLP, router, embeddings / lm-head): parameter counts, FLOPs per token (2 per multiply-
accumulate), KV-cache bytes per token, and the activation size of one token.

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
  qk_rope_head_dim`` values per token per layer. Attention FLOPs use the non-absorbed form
  (per head ``qk_nope + qk_rope`` for scores and ``v_head_dim`` for values).
- GPT-OSS: attention sinks add one parameter per head; sliding-window layers cap both the
  KV cache and the attention context at ``sliding_window`` tokens
  (:meth:`ModelSpec.kv_bytes_for_context`, :meth:`ModelSpec.attn_core_flops`).
- Dense layers: the first ``first_k_dense`` layers (DeepSeek ``first_k_dense_replace``),
  Qwen's ``mlp_only_layers`` and layers skipped by ``moe_layer_freq`` / ``decoder_sparse_step``
  use a dense SwiGLU MLP of ``dense_intermediate_size``.
- Weight storage (issue 13 item 4): ``quant`` (:class:`~moeplan.specs.quant.WeightQuant`)
  gives the bytes per weight, scales and zero points included, of each module class, read
  from the config's ``quantization_config`` (fp8 block, MXFP4, AWQ, GPTQ, bitsandbytes,
  compressed-tensors, ModelOpt; an unknown method is an error, never bf16).
  ``weight_bytes`` (attention) and ``expert_weight_bytes`` (routed experts) are its two
  most used figures;
  :meth:`ModelSpec.weight_bytes_total` sums every class. KV cache and activations are bf16.
- Size limits (issue 17): every dimension is bounded by a ``MAX_*`` constant below, checked
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

from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.specs import model_summary
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
from moeplan.specs.quant import UNQUANTIZED, WeightQuant, linear_modules

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
    quant: WeightQuant = UNQUANTIZED
    _moe_flags: tuple[bool, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        p = f"model[{self.name}]"
        check_bounds(self, p)
        object.__setattr__(self, "_moe_flags", check_structure(self, p))

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
        return self.sliding_window > 0 and layer in self.sliding_layers

    def with_layers(self, num_layers: int) -> ModelSpec:
        """Same shape with ``num_layers`` decoder layers (keeps the dense prefix if it fits)."""
        require(num_layers >= 1, f"layers ({num_layers}) must be >= 1")
        fkd = min(self.first_k_dense, max(0, num_layers - 1))
        return replace(
            self,
            num_layers=num_layers,
            first_k_dense=fkd,
            _moe_flags=(),
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

    @property
    def attn_linear_params(self) -> int:
        """Projection weights (and biases) of one attention layer, norms excluded."""
        h, nh = self.hidden_size, self.num_attention_heads
        if self.attention == "mla":
            qd = nh * self.q_dim
            q = (
                h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * qd
                if self.q_lora_rank
                else h * qd
            )
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * nh * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv_a + kv_b + nh * self.v_head_dim * h
        hd, nkv = self.head_dim, self.num_kv_heads
        n = h * nh * hd + 2 * h * nkv * hd + nh * hd * h
        if self.attention_bias:
            n += nh * hd + 2 * nkv * hd
        if self.attention_out_bias:
            n += h
        return n

    @property
    def attn_params(self) -> int:
        """One attention block: projections, sinks, q/k norms and the two layer norms."""
        n = self.attn_linear_params + 2 * self.hidden_size
        if self.attention_sinks:
            n += self.num_attention_heads
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    @property
    def expert_params(self) -> int:
        """One routed SwiGLU expert (gate, up, down)."""
        h, i = self.hidden_size, self.moe_intermediate_size
        return 3 * h * i + ((2 * i + h) if self.expert_bias else 0)

    @property
    def shared_params(self) -> int:
        """All shared experts of one MoE layer (and Qwen2-MoE's shared-expert gate)."""
        n = 3 * self.hidden_size * self.shared_intermediate_size
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
    def params_total(self) -> int:
        moe = self.num_moe_layers * (
            self.num_experts * self.expert_params + self.shared_params + self.router_params
        )
        dense = self.num_dense_layers * self.dense_mlp_params
        return (
            self.num_layers * self.attn_params
            + moe
            + dense
            + self.embedding_params
            + self.lm_head_params
            + self.hidden_size
        )

    @property
    def params_active(self) -> int:
        inactive = self.num_moe_layers * (self.num_experts - self.top_k) * self.expert_params
        if not self.active_counts_embedding:
            inactive += self.embedding_params
        return self.params_total - inactive

    # ---- FLOPs per token (2 per multiply-accumulate) ----------------------------------
    @property
    def attn_proj_flops(self) -> float:
        return 2.0 * self.attn_linear_params

    def attn_core_flops(self, context: float, layer: int | None = None) -> float:
        """Scores and weighted values of one token attending to ``context`` keys."""
        if layer is not None and self.is_sliding_layer(layer):
            context = min(context, self.sliding_window)
        return 2.0 * self.num_attention_heads * (self.q_dim + self.vo_dim) * context

    @property
    def expert_flops(self) -> float:
        return 6.0 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_flops(self) -> float:
        return 6.0 * self.hidden_size * self.shared_intermediate_size

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
        total = 2.0 * self.vocab_size * self.hidden_size
        for layer in range(self.num_layers):
            total += self.attn_proj_flops + self.attn_core_flops(ctx, layer)
            if self.is_moe_layer(layer):
                total += self.top_k * self.expert_flops + self.shared_flops + self.router_flops
            else:
                total += self.dense_mlp_flops
        return total

    # ---- memory per token ---------------------------------------------------------------
    def kv_bytes_per_token_layer(self, layer: int = 0) -> int:
        """KV-cache bytes one token adds to one layer (MLA: latent + rope key)."""
        del layer  # every layer stores the same per-token size
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * ACT_BYTES
        return 2 * self.num_kv_heads * self.head_dim * ACT_BYTES

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token over all layers (sliding layers included, uncapped)."""
        return self.num_layers * self.kv_bytes_per_token_layer()

    def kv_bytes_for_context(self, context: int) -> int:
        """KV-cache bytes of one sequence of ``context`` tokens (sliding layers capped)."""
        total = 0
        for layer in range(self.num_layers):
            kept = min(context, self.sliding_window) if self.is_sliding_layer(layer) else context
            total += kept * self.kv_bytes_per_token_layer(layer)
        return total

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
    def from_config(cls, config: dict[str, Any], name: str = "custom") -> ModelSpec:
        """Build from a Hugging Face MoE ``config.json`` dict or DeepSeek's native keys."""
        from moeplan.specs.hf_config import quant_rules, spec_kwargs_from_config

        spec = cls(**spec_kwargs_from_config(config, name))
        rules = quant_rules(config, name)
        return spec if rules is None else replace(spec, quant=rules.resolve(linear_modules(spec)))


def parse_error(name: str, err: Exception) -> MoeplanError:
    """Turn an unexpected parsing failure into one user-facing line."""
    return MoeplanError(f"config[{name}] could not be read: {type(err).__name__}: {err}")
