"""vLLM's ``vllm serve MODEL …`` flags as moeplan reads them (:mod:`moeplan.backends.launch_reader`).

Read from vLLM 0.10–0.11 (``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args``,
``vllm/entrypoints/openai/cli_args.py``). The parallel arithmetic
(``vllm/model_executor/layers/fused_moe/config.py`` ``FusedMoEParallelConfig.make``): an
instance is ``data_parallel_size`` engine ranks of ``tensor_parallel_size`` GPUs per pipeline
stage; attention runs TP ``tp`` within a rank and DP over the ranks; the MoE layers flatten
TP across DP (``tp_size = dp_size_ * tp_size_``) and, with ``--enable-expert-parallel``, turn
that whole group into expert parallelism (``use_ep``: MoE TP 1, EP ``tp × dp``).

``--max-num-batched-tokens`` and ``--max-num-seqs`` are per DP rank: every DP rank is a
separate engine core with its own scheduler config (docs/serving/data_parallel_deployment.md),
so the instance's budget is the flag times the DP size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from moeplan.backends.launch_reader import (
    Degrees,
    EngineArgs,
    LaunchSettings,
    choice,
    divisors,
    fraction,
    group,
    no_effect,
    positive_int,
    setting,
    unpriced,
)
from moeplan.errors import MoeplanError, show

#: ``--kv-cache-dtype`` choices (arg_utils ``CacheDType``): ``auto`` is the checkpoint's
#: dtype, the engine default moeplan's ``--kv-dtype auto`` names
VLLM_KV_DTYPES = {
    "auto": None,
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
#: ``--speculative-config`` methods that draft with the checkpoint's own MTP / EAGLE head
#: (vllm/config/speculative.py ``SpeculativeMethod``); n-gram and draft models are not MTP
MTP_METHODS = frozenset(
    {"mtp", "deepseek_mtp", "qwen3_next_mtp", "glm4_moe_mtp", "eagle", "eagle3"}
)
#: ``--dtype`` values that keep 16-bit activations (arg_utils ``ModelDType``)
DTYPES = {"auto": None, "bfloat16": None, "bf16": None, "float16": None, "half": None}

NO_EFFECT_SERVER = "an API-server setting: no effect on any performance figure"


def _spec_config(flag: str, text: str) -> dict[str, Any]:
    try:
        v = json.loads(text)
    except json.JSONDecodeError:
        raise MoeplanError(f"launch command {flag} ({show(text)}) must be JSON") from None
    if not isinstance(v, dict):
        raise MoeplanError(f"launch command {flag} ({show(text)}) must be a JSON object")
    return v


def _mtp_steps(flags: Mapping[str, Any]) -> int:
    cfg = flags["--speculative-config"]
    method = cfg.get("method")
    if method not in MTP_METHODS:
        raise MoeplanError(
            f"launch command --speculative-config method ({show(method)}) must be one of "
            f"{', '.join(sorted(MTP_METHODS))}: moeplan models drafts of the model's own "
            "MTP/EAGLE head only"
        )
    n = cfg.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise MoeplanError(
            f"launch command --speculative-config num_speculative_tokens ({show(n)}) must "
            "be an integer >= 1"
        )
    unknown = set(cfg) - {"method", "num_speculative_tokens", "model"}
    if unknown:
        raise MoeplanError(
            f"launch command --speculative-config keys {sorted(unknown)} are not read by "
            "moeplan (method, num_speculative_tokens, model)"
        )
    return n


def _degrees(s: LaunchSettings) -> Degrees:
    tp, dp, pp = s.tp or 1, s.dp or 1, s.pp or 1
    if s.ep is not None:
        raise MoeplanError("launch command: vllm serve has no --ep-size (--enable-expert-parallel)")
    group_size = tp * dp
    ep = group_size if s.expert_parallel and group_size > 1 else 1
    return Degrees(attn_tp=tp, attn_dp=dp, moe_tp=group_size // ep, moe_ep=ep, pp=pp)


def _space(model: str, gpus: int) -> list[str]:
    """``P`` pipeline stages (``-pp``, ``P`` divides ``gpus``) of ``W`` GPUs: ``-tp T -dp D``
    with ``T x D = W``, with and without ``--enable-expert-parallel`` (EP over every rank of
    the stage's ``T x D``; only when more than one)."""
    out = []
    for pp in divisors(gpus):
        w, stage = gpus // pp, f" -pp {pp}" if pp > 1 else ""
        for tp in divisors(w):
            dp = w // tp
            base = f"vllm serve {model}" + (f" -tp {tp}" if tp > 1 else "")
            base += (f" -dp {dp}" if dp > 1 else "") + stage
            out += [base, base + " --enable-expert-parallel"] if w > 1 else [base]
    return out


VLLM_ARGS = EngineArgs(
    engine="vllm",
    programs=(("vllm", "serve"),),
    positional_model=True,
    degrees=_degrees,
    instance_step_tokens=lambda v, dp: v * dp,
    instance_max_running=lambda v, dp: v * dp,
    mtp_flags=frozenset({"--speculative-config"}),
    mtp_steps=_mtp_steps,
    space=_space,
    flags=(
        setting(("--model",), "model", lambda f, t: t, "the checkpoint served"),
        setting(("-tp", "--tensor-parallel-size"), "tp", positive_int, "ParallelConfig"),
        setting(("-dp", "--data-parallel-size"), "dp", positive_int, "ParallelConfig"),
        setting(("-pp", "--pipeline-parallel-size"), "pp", positive_int, "ParallelConfig"),
        setting(("--enable-expert-parallel", "-ep"), "expert_parallel", None, "ParallelConfig"),
        setting(("--gpu-memory-utilization",), "mem_fraction", fraction, "CacheConfig"),
        setting(("--max-num-batched-tokens",), "step_tokens", positive_int, "SchedulerConfig"),
        setting(("--max-num-seqs",), "max_running", positive_int, "SchedulerConfig"),
        setting(("--kv-cache-dtype",), "kv_dtype", choice(VLLM_KV_DTYPES), "CacheConfig"),
        setting(("--max-model-len",), "max_model_len", positive_int, "ModelConfig"),
        setting(("-q", "--quantization"), "quantization", lambda f, t: t, "ModelConfig"),
        group(("--speculative-config",), _spec_config, "SpeculativeConfig"),
        setting(("--async-scheduling",), "overlap_on", None, "SchedulerConfig"),
        setting(("--no-async-scheduling",), "overlap_off", None, "SchedulerConfig"),
        unpriced(
            ("--enforce-eager",),
            "no CUDA graphs; the kernel tables were measured with graphs",
            takes_value=False,
        ),
        no_effect(("--dtype",), "16-bit activations either way", value=choice(DTYPES)),
        no_effect(("--host",), NO_EFFECT_SERVER),
        no_effect(("--port",), NO_EFFECT_SERVER),
        no_effect(("--served-model-name",), NO_EFFECT_SERVER),
        no_effect(("--api-key",), NO_EFFECT_SERVER),
        no_effect(("--tool-call-parser",), "parses tool calls in the API server's output"),
        no_effect(("--reasoning-parser",), "parses reasoning in the API server's output"),
        no_effect(("--enable-auto-tool-choice",), NO_EFFECT_SERVER, takes_value=False),
        no_effect(("--trust-remote-code",), "lets the config load", takes_value=False),
        no_effect(("--disable-log-requests",), "logging", takes_value=False),
        no_effect(("--disable-log-stats",), "logging", takes_value=False),
        no_effect(("--seed",), "sampling seed"),
        no_effect(("--download-dir",), "where weights are read from"),
        no_effect(("--tokenizer",), "the tokenizer of the API server"),
    ),
)
"""vLLM's launch grammar."""
