"""Engine flags of the instance knobs (:class:`moeplan.serve.iteration.instance_knobs.InstanceKnobs`).

The MoE backend itself (``--moe-a2a-backend deepep``) is decided by
:func:`moeplan.cost.a2a.moe_backend` — the function that decides what the cost model prices —
in :mod:`moeplan.export.sglang`; this module adds the knobs' own flags (sources: SGLang
server_args.py and docs/advanced_features; vLLM engine/arg_utils.py and the expert-parallel
deployment guide):

- two-batch overlap: SGLang ``--enable-two-batch-overlap``; vLLM ``--enable-dbo``.
- DeepEP on vLLM: ``deepep_high_throughput`` (prefill-heavy instances) or
  ``deepep_low_latency`` (decode instances), chosen in vLLM 0.11.0 by the environment variable
  ``VLLM_ALL2ALL_BACKEND`` (vllm/envs.py; 0.11.0's ``vllm serve`` has no ``--all2all-backend``
  flag: its parser refuses it, ``bench/check_exports.py``) — :func:`vllm_knob_env`. SGLang's ``--deepep-mode`` default ``auto`` runs
  normal kernels for prefill and low-latency kernels for decode, what the cost model prices.
- MTP: SGLang ``--speculative-algorithm EAGLE --speculative-num-steps N
  --speculative-eagle-topk 1 --speculative-num-draft-tokens N+1`` (DeepSeek's NextN module is
  loaded as the EAGLE draft); vLLM ``--speculative-config
  '{"method": "deepseek_mtp", "num_speculative_tokens": N}'``.
- KV dtype: SGLang ``--kv-cache-dtype fp8_e4m3`` / ``bf16``; vLLM ``fp8`` / ``bfloat16``
  (``auto``: no flag, the engines' default).
- A prefill pool's chunk (the instance's prompt tokens per iteration, as priced): SGLang
  ``--chunked-prefill-size`` takes the instance total and divides it by the DP size under DP
  attention (server_args.py); vLLM runs one scheduler per DP rank, each with its own
  ``--max-num-batched-tokens``: the total over ``attn_dp``.
"""

from __future__ import annotations

import json

from moeplan.serve.iteration.instance_knobs import InstanceKnobs

SGLANG_KV = {"fp8": "fp8_e4m3", "bf16": "bf16"}
VLLM_KV = {"fp8": "fp8", "bf16": "bfloat16"}


def sglang_knob_args(knobs: InstanceKnobs) -> list[str]:
    """SGLang flags of ``knobs`` (module docstring)."""
    out: list[str] = []
    if knobs.tbo:
        out.append("--enable-two-batch-overlap")
    if knobs.mtp:
        n = str(knobs.mtp)
        out += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", n]
        out += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens"]
        out.append(str(knobs.mtp + 1))
    if knobs.kv_dtype in SGLANG_KV:
        out += ["--kv-cache-dtype", SGLANG_KV[knobs.kv_dtype]]
    return out


def prefill_chunk_args(engine: str, chunk_tokens: int | None, attn_dp: int) -> list[str]:
    """The flag of a prefill pool's chunk (module docstring); none when not given."""
    if not chunk_tokens:
        return []
    if engine == "sglang":
        return ["--chunked-prefill-size", str(chunk_tokens)]
    return ["--max-num-batched-tokens", str(max(1, chunk_tokens // max(1, attn_dp)))]


def vllm_knob_env(knobs: InstanceKnobs | None, role: str = "colocated") -> list[tuple[str, str]]:
    """The environment of ``knobs`` for a vLLM instance of ``role`` (module docstring)."""
    if knobs is None or knobs.a2a != "deepep":
        return []
    mode = "deepep_low_latency" if role == "decode" else "deepep_high_throughput"
    return [("VLLM_ALL2ALL_BACKEND", mode)]


def vllm_knob_args(knobs: InstanceKnobs, role: str = "colocated") -> list[str]:
    """vLLM flags of ``knobs`` for an instance of ``role`` (colocated, prefill, decode)."""
    out: list[str] = []
    if knobs.tbo:
        out.append("--enable-dbo")
    if knobs.mtp:
        cfg = {"method": "deepseek_mtp", "num_speculative_tokens": knobs.mtp}
        out += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    if knobs.kv_dtype in VLLM_KV:
        out += ["--kv-cache-dtype", VLLM_KV[knobs.kv_dtype]]
    return out
