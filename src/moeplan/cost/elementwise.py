"""Element-wise work of a decoder layer: the memory-bound passes no kernel table times.

A step's GEMMs, attention cores and fused-MoE calls are priced from kernel tables or the GEMM
model; between them the engines run element-wise kernels that read and write the activations
once each and do almost no arithmetic, so each is priced as its bytes over the GPU's memory
rate (:meth:`moeplan.cost.model.CostModel.elementwise`). Per token, bf16 activations
(:data:`ACT_BYTES`), on one GPU:

- **The layer's two RMSNorms with their residual adds** (pre-attention, pre-MLP), one fused
  kernel each: SGLang's ``RMSNorm.forward_cuda`` calls ``fused_add_rmsnorm(x, residual, ...)``
  when the decoder layer hands it the residual (python/sglang/srt/layers/layernorm.py,
  v0.5.x), vLLM's ``RMSNorm.forward_cuda`` ``fused_add_rms_norm`` (vllm/model_executor/layers/
  layernorm.py, v0.10-0.11): reads ``x`` and the residual, writes both, ``4 h`` elements per
  norm (:func:`layer_norm_bytes`). The final norm before the lm-head is one more
  (:func:`final_norm_bytes`; SGLang and vLLM norm every token of the step before the logits
  processor keeps the last). The first layer's norm has no residual yet (``2 h``): counted
  as fused, ``h`` elements per token per step too many. None of these is inside a table: the
  module tables time ``layers[i].self_attn`` (aiconfigurator collector/sglang/
  collect_wideep_attn.py ``attention_module = model_runner.model.model.layers[test_layer]
  .self_attn``), the MoE tables one fused-MoE call, the GEMM tables one GEMM.
- **Inside an attention block priced from GEMMs and its core** (not from a module table,
  whose ``self_attn`` forward holds them): rotary embedding over the query and key heads, read
  and written in place (SGLang ``rotary_emb`` / vLLM ``RotaryEmbedding``), and with per-head
  QK-norm (Qwen3, GLM with ``use_qk_norm``) one more pass over them: SGLang's
  ``Qwen3MoeAttention._apply_qk_norm`` then ``self.rotary_emb`` (python/sglang/srt/models/
  qwen3_moe.py, v0.5.x) — two kernels; vLLM 0.11's ``Qwen3MoeAttention.forward`` runs the
  same two modules, which its ``torch.compile`` may fuse into one pass (an upper bound there).
  MLA: the ``q_a_layernorm`` and ``kv_a_layernorm`` of the latent vectors and RoPE over the
  query's rope heads and the shared rope key (:func:`attention_bytes`). Partial rotary
  (GLM-4.5's 0.5) is priced over the whole head: in-place kernels touch the rotary half only,
  ``(nh + nkv) hd`` elements per token too many.
- **SwiGLU's activation** of a dense or shared-expert MLP priced as two GEMMs:
  ``silu(gate) * up`` reads ``2 I / tp`` and writes ``I / tp`` (SGLang ``SiluAndMul``,
  vLLM ``SiluAndMul``; :func:`swiglu_act_bytes`). The fused-MoE kernels apply it inside the
  call the MoE tables time; the wide-EP MLP table times the whole module.

Departure: no per-kernel launch floor. In a CUDA graph a kernel this small costs 1-2 µs:
the attention block's norm, QK-norm, RoPE and residual add took 5.6 µs per layer beside
its projections and core at batch 1 on an H200 (0.27 ms of Qwen3-30B's 8.5 ms decode step;
bench/data/gpu_h200_2026-11-27/stack.json, ``attn_block_s - attn_core_s - attn_proj_s``).
Pure: closed forms, no I/O.
"""

from __future__ import annotations

from moeplan.specs import ModelSpec

ACT_BYTES = 2  # bf16 activations (ModelSpec.hidden_bytes's element)


def layer_norm_bytes(model: ModelSpec) -> int:
    """Bytes one token moves through a layer's two fused residual-add RMSNorms."""
    return 2 * 4 * model.hidden_size * ACT_BYTES


def final_norm_bytes(model: ModelSpec) -> int:
    """Bytes one token moves through the final fused residual-add RMSNorm."""
    return 4 * model.hidden_size * ACT_BYTES


def attention_bytes(model: ModelSpec, tp: int = 1) -> float:
    """Bytes one token moves through the element-wise passes inside an attention block on
    one of ``tp`` ranks (RoPE, QK-norm; MLA's latent norms; module docstring)."""
    nh = model.num_attention_heads / tp
    if model.attention == "mla":
        rope = model.qk_rope_head_dim * (nh + 1)  # the query's rope heads, the shared key
        latent = model.kv_lora_rank + model.q_lora_rank  # q_a / kv_a RMSNorm (unsharded)
        return 2.0 * (rope + latent) * ACT_BYTES
    kv = max(1.0, model.num_kv_heads / tp)
    heads = (nh + kv) * model.head_dim
    passes = 2 if model.qk_norm else 1
    return 2.0 * heads * passes * ACT_BYTES


def swiglu_act_bytes(inter: float, tp: int = 1) -> float:
    """Bytes one token moves through ``silu(gate) * up`` of an MLP of ``inter`` columns
    sharded ``tp`` ways."""
    return 3.0 * inter / tp * ACT_BYTES
