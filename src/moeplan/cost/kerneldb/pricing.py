"""Translate the CostModel's (and ``moeplan cost``'s) questions into kernel-database queries.

Pure. ``explicit_load`` turns per-expert token counts (a routing trace, optionally with EPLB
redundant experts) into the busiest rank's load for a ``moe`` query.

- ``expert_ffn(model, tokens_per_expert, local, tp)`` -> one fused-MoE call (``moe``) on an EP
  rank holding ``local`` experts: ``ep = round(E / local)``, a virtual layer of
  ``local * ep`` experts, ``num_tokens = tokens_per_expert * local * ep / top_k`` entering the
  EP group with a balanced load (the planner already put its imbalance into
  ``tokens_per_expert``); the weight dtype is the routed experts' kernel dtype from the
  checkpoint's quantization (``model.quant.experts``: ``fp8_block`` for DeepSeek/Kimi block
  fp8, ``w4a16_mxfp4`` for GPT-OSS, ``int4_wo`` / ``int8_wo`` for AWQ / GPTQ /
  compressed-tensors weight-only, ``int8`` for w8a8).
- ``attention_core`` -> ``generation_attention`` / ``generation_mla`` for one new token
  (``isl = 1``, ``step = ctx - 1``: the tables' decode convention), else ``context_attention``
  / ``context_mla`` over ``q_len`` tokens; a chunk over a prefix (``ctx_len > q_len``: chunked
  prefill, prefix-cache hits) costs the larger of the prefill with as many query-key pairs
  and the decode row at ``ctx_len`` (:func:`attention_query`; departure: the tables have no
  chunked-prefill rows). Heads per GPU are heads / tp (KV heads at least one).
- ``all_reduce`` inside one node -> the engine's custom all-reduce (``message_size`` = bf16
  elements). ``all_to_all`` inside one node -> the DeepEP normal kernels' analytic model
  (dispatch in fp8 + combine in bf16 averaged: one call prices one direction) on the bytes a
  rank sends; the per-token term is left out (the bytes alone do not say how many tokens).
"""

from __future__ import annotations

import math

import numpy as np

from moeplan.cost.kerneldb.db import KernelDB
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import EXPLICIT, KERNEL_FAMILIES, Features
from moeplan.cost.kerneldb.load import contiguous_busiest, eplb_busiest
from moeplan.cost.kerneldb.sources import Prediction
from moeplan.cost.price_keys import BYTES_A2A_NOTE
from moeplan.errors import MoeplanError
from moeplan.specs import ModelSpec

ALLREDUCE_GPUS = (2, 4, 8)  # group sizes the custom all-reduce tables cover
BF16_BYTES = 2


def moe_dtype(model: ModelSpec) -> str:
    """The measured tables' ``moe_dtype`` of the model's routed experts."""
    return model.quant.experts.format.kernel_dtype


def moe_shape(
    model: ModelSpec, tokens_per_expert: float, local: float, tp: int
) -> dict[str, object] | None:
    """The fused-MoE query for one EP rank, or ``None`` when it has no integral layout."""
    if local <= 0 or tokens_per_expert <= 0 or abs(local - round(local)) > 1e-9:
        return None
    local_i = int(round(local))
    ep = max(1, round(model.num_experts / local_i))
    experts = local_i * ep
    inter = model.moe_intermediate_size
    if inter % tp:
        return None
    return {
        "num_tokens": tokens_per_expert * experts / model.top_k,
        "hidden_size": model.hidden_size,
        "inter_size": inter,
        "topk": min(model.top_k, experts),
        "num_experts": experts,
        "moe_tp_size": tp,
        "moe_ep_size": ep,
        "distribution": "balanced",
        "moe_dtype": moe_dtype(model),
    }


def explicit_load(
    counts: np.ndarray, topk: int, ep: int, redundant: int = 0, eplb: bool = False
) -> dict[str, object]:
    """The ``moe`` columns of a batch with per-expert token ``counts`` (a routing trace) on
    ``ep`` ranks: the busiest rank's pairs and experts, with experts placed contiguously
    (no EPLB) or, with ``eplb`` or ``redundant`` replicas, packed by EPLB's greedy."""
    c = np.asarray(counts, dtype=float)
    if c.ndim != 1 or len(c) == 0 or np.any(c < 0) or not np.all(np.isfinite(c)):
        raise MoeplanError("expert counts must be a non-empty list of numbers >= 0")
    if c.sum() <= 0:
        raise MoeplanError("expert counts must route at least one token")
    if eplb or redundant:
        pairs, hit = eplb_busiest(c, ep, redundant)
    else:
        pairs, hit = contiguous_busiest(c, ep)
    return {
        "num_tokens": float(c.sum()) / topk,
        "num_experts": len(c),
        "topk": topk,
        "moe_ep_size": ep,
        "distribution": EXPLICIT,
        "rank_pairs": pairs,
        "rank_hit": hit,
    }


#: (hidden, q_lora, kv_lora, rope, nope, v) of DeepSeek-V3 — the module tables' model
DSV3_MLA = (7168, 1536, 512, 64, 128, 128)


def mla_module_query(
    model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, tp: int
) -> tuple[str, dict[str, object]] | None:
    """The MLA module query of one TP rank (the prefix is left to the caller), or ``None``
    when the model's MLA is not DeepSeek-V3's shape or heads do not split ``tp`` ways."""
    dims = (
        model.hidden_size,
        model.q_lora_rank,
        model.kv_lora_rank,
        model.qk_rope_head_dim,
        model.qk_nope_head_dim,
        model.v_head_dim,
    )
    if model.attention != "mla" or dims != DSV3_MLA or model.num_attention_heads % tp:
        return None
    shape: dict[str, object] = {
        "batch_size": num_seqs,
        "num_heads": model.num_attention_heads // tp,
        "gemm_type": "fp8_block"
        if model.quant.attention.format.kernel_dtype == "fp8_block"
        else "bfloat16",
    }
    if q_len == 1:
        shape.update(isl=1, step=max(0, ctx_len - 1))
        return "generation_mla_module", shape
    shape.update(isl=q_len)
    return "context_mla_module", shape


def equivalent_prefill(q_len: int, ctx_len: int) -> int:
    """The prompt length ``L`` whose causal prefill scores as many query-key pairs as a
    chunk of ``q_len`` new tokens over ``ctx_len`` keys: ``L (L + 1) / 2 = q (ctx - (q - 1) / 2)``
    (rounded up, at most ``ctx_len``); ``L = q`` without a prefix."""
    pairs = q_len * (ctx_len - (q_len - 1) / 2.0)
    root = (-1.0 + math.sqrt(1.0 + 8.0 * pairs)) / 2.0
    return int(min(ctx_len, max(q_len, math.ceil(root - 1e-9))))


def attention_query(
    model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, tp: int, sliding: bool
) -> list[tuple[str, dict[str, object]]]:
    """The (op, shape) table queries of the attention core of one TP rank; its price is the
    largest of their times. One new token: the decode row (``isl = 1``, ``step = ctx - 1``).
    ``q_len`` tokens with no prefix: the prefill row. A chunk over a prefix (chunked
    prefill, prefix-cache hits): its scores at the prefill kernel's measured rate — the
    prefill of :func:`equivalent_prefill` tokens — and, as a floor, the decode row of one
    new token at ``ctx_len`` (the chunk reads the whole KV cache at least once); a few new
    tokens over a long context thus cost what a decode step does. Both terms grow with
    ``q_len`` and ``ctx_len``, so the price is monotone in both (departure: the tables have no
    chunked-prefill rows)."""
    heads = max(1, math.ceil(model.num_attention_heads / tp))
    if model.attention == "mla":
        ops = ("context_mla", "generation_mla")
        base: dict[str, object] = {"batch_size": num_seqs, "num_heads": heads}
    else:
        ops = ("context_attention", "generation_attention")
        base = {
            "batch_size": num_seqs,
            "num_heads": heads,
            "num_key_value_heads": max(1, math.ceil(model.num_kv_heads / tp)),
            "head_dim": model.head_dim,
            "window_size": model.sliding_window if sliding else 0,
        }
    decode = (ops[1], {**base, "isl": 1, "step": max(0, ctx_len - 1)})
    if q_len == 1:
        return [decode]
    prefill = (ops[0], {**base, "isl": equivalent_prefill(q_len, max(ctx_len, q_len))})
    return [prefill] if ctx_len <= q_len else [prefill, decode]


def all_to_all(db: KernelDB, device: Device, engine: str, nbytes: float) -> Prediction | None:
    """One direction of a DeepEP normal all-to-all sending ``nbytes`` per rank (8 ranks)."""
    times, errs = [], []
    for op in ("deepep_normal_dispatch", "deepep_normal_combine"):
        key = db.choose(device.reference, engine, op, {"sms": "24"})
        vm = db.variant(device.reference, engine, op, key) if key else None
        if vm is None:
            return None
        f = Features(
            flops=np.zeros(1),
            nbytes=np.array([nbytes]),
            work=np.zeros(1),
            fp8=np.zeros(1, bool),
            tokens=np.zeros(1),
            coords=np.zeros((1, len(KERNEL_FAMILIES[op].x_cols))),
        )
        times.append(float(vm.model.scaled(vm.device, device, True).predict(f, device, True)[0]))
        err = db.error(device.table, engine, op, "transferred")
        errs.append(err)
    e = [x for x in errs if x is not None]
    return Prediction(
        seconds=float(np.mean(times)),
        source="transferred",
        error=max(x[0] for x in e) if e else None,
        error_p90=max(x[1] for x in e) if e else None,
        detail=BYTES_A2A_NOTE,
    )
