"""SGLang's ``python -m sglang.launch_server …`` flags as moeplan reads them
(:mod:`moeplan.backends.launch_reader`).

Read from SGLang 0.5.3–0.5.14 (``python/sglang/srt/server_args.py`` ``ServerArgs.add_cli_args``).
The parallel arithmetic (server_args.py and ``managers/data_parallel_controller.py``):
``--tp-size`` GPUs per pipeline stage run one instance; with ``--enable-dp-attention`` the
attention of those GPUs is ``--dp-size`` data-parallel groups of ``tp / dp`` (the
``attn_tp_size``), without it ``--dp-size`` starts that many independent copies behind the
data-parallel controller (replicas); ``--ep-size`` splits the MoE layers ``ep`` ways by
expert and ``tp / ep`` ways by tensor (``moe_tp_size``).

``--chunked-prefill-size`` and ``--max-running-requests`` are instance totals: under DP
attention each rank gets the total divided by the DP size (server_args.py; the scheduler's
``max_running_requests // dp_size``).
"""

from __future__ import annotations

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

#: ``--kv-cache-dtype`` choices (server_args.py): ``auto`` is the checkpoint's dtype
SGLANG_KV_DTYPES = {
    "auto": None,
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
#: ``--speculative-algorithm`` values drafting with the model's own MTP / EAGLE head
#: (python/sglang/srt/speculative/spec_info.py ``SpeculativeAlgorithm``; NEXTN is EAGLE)
MTP_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
#: ``--moe-a2a-backend`` (server_args.py): ``none`` is the all-gather/all-reduce path
A2A = {"none": "nccl", "deepep": "deepep"}
#: ``--moe-runner-backend`` values moeplan prices (layers/moe/utils.py ``MoeRunnerBackend``,
#: 0.5.14 / 0.5.23): ``auto``, the NVFP4 runner ``auto`` resolves to on SM100, the Marlin
#: W4A16 fallback below (layers/quantization/modelopt_quant.py ``create_moe_runner``) and
#: the NVFP4 runner under DeepEP's low-latency dispatch (``flashinfer_cutedsl``:
#: layers/moe/moe_runner/flashinfer_cutedsl.py:624-626, 0.5.23); the other runners have no
#: table moeplan reads
MOE_RUNNERS = {
    "auto": "auto",
    "flashinfer_trtllm": "flashinfer_trtllm",
    "marlin": "marlin",
    "flashinfer_cutedsl": "flashinfer_cutedsl",
}
NO_EFFECT_SERVER = "an API-server setting: no effect on any performance figure"
SPEC = (
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-draft-model-path",
)


def _mtp_steps(flags: Mapping[str, Any]) -> int:
    algo = flags.get("--speculative-algorithm")
    if algo not in MTP_ALGORITHMS:
        raise MoeplanError(
            f"launch command --speculative-algorithm ({show(algo)}) must be one of "
            f"{', '.join(sorted(MTP_ALGORITHMS))}: moeplan models drafts of the model's own "
            "MTP/EAGLE head only"
        )
    topk = flags.get("--speculative-eagle-topk", 1)
    if topk != 1:
        raise MoeplanError(
            f"launch command --speculative-eagle-topk ({topk}) must be 1: moeplan models a "
            "chain of draft tokens, not a tree"
        )
    steps = flags.get("--speculative-num-steps")
    drafts = flags.get("--speculative-num-draft-tokens")
    if steps is None:
        raise MoeplanError("launch command --speculative-num-steps is needed with a draft")
    if drafts is not None and drafts != steps + 1:
        raise MoeplanError(
            f"launch command --speculative-num-draft-tokens ({drafts}) must be "
            f"--speculative-num-steps + 1 ({steps + 1}) with top-k 1"
        )
    return int(steps)


def _degrees(s: LaunchSettings) -> Degrees:
    tp, dp, pp = s.tp or 1, s.dp or 1, s.pp or 1
    ep = s.ep or 1
    if tp % ep:
        raise MoeplanError(f"launch command --ep-size ({ep}) must divide --tp-size ({tp})")
    if s.dp_attention:
        if tp % dp:
            raise MoeplanError(
                f"launch command --dp-size ({dp}) must divide --tp-size ({tp}) with "
                "--enable-dp-attention"
            )
        return Degrees(attn_tp=tp // dp, attn_dp=dp, moe_tp=tp // ep, moe_ep=ep, pp=pp)
    return Degrees(attn_tp=tp, attn_dp=1, moe_tp=tp // ep, moe_ep=ep, pp=pp, replicas=dp)


def _space(model: str, gpus: int) -> list[str]:
    """``P`` pipeline stages (``--pp-size``) of ``W`` GPUs: ``--tp-size W`` with ``--ep-size
    E`` (``E`` divides ``W``) and attention DP ``--dp-size D --enable-dp-attention`` (``D``
    divides ``W``); without a pipeline also ``D`` plain copies of ``--tp-size T`` (``--dp-size
    D``, ``T x D = gpus``)."""
    head, out = f"python3 -m sglang.launch_server --model-path {model}", []
    for pp in divisors(gpus):
        w, stage = gpus // pp, f" --pp-size {pp}" if pp > 1 else ""
        for ep in divisors(w):
            for dp in divisors(w):
                cmd = head + f" --tp-size {w}" + (f" --ep-size {ep}" if ep > 1 else "")
                out.append(
                    cmd + (f" --dp-size {dp} --enable-dp-attention" if dp > 1 else "") + stage
                )
    for dp in divisors(gpus)[1:]:  # plain copies: dp servers of tp GPUs each
        tp = gpus // dp
        for ep in divisors(tp):
            out.append(head + f" --tp-size {tp}" + (f" --ep-size {ep}" if ep > 1 else "")
                       + f" --dp-size {dp}")  # fmt: skip
    return out


SGLANG_ARGS = EngineArgs(
    engine="sglang",
    programs=(
        ("python3", "-m", "sglang.launch_server"),
        ("python", "-m", "sglang.launch_server"),
        ("sglang", "serve"),
    ),
    positional_model=False,
    degrees=_degrees,
    space=_space,
    instance_step_tokens=lambda v, dp: v,
    instance_max_running=lambda v, dp: v,
    mtp_flags=frozenset(SPEC),
    mtp_steps=_mtp_steps,
    flags=(
        setting(("--model-path", "--model"), "model", lambda f, t: t, "the checkpoint served"),
        setting(("--tp-size", "--tp"), "tp", positive_int, "ServerArgs.tp_size"),
        setting(("--dp-size", "--dp"), "dp", positive_int, "ServerArgs.dp_size"),
        setting(("--ep-size", "--ep"), "ep", positive_int, "ServerArgs.ep_size"),
        setting(("--pp-size",), "pp", positive_int, "ServerArgs.pp_size"),
        setting(("--enable-dp-attention",), "dp_attention", None, "ServerArgs"),
        setting(("--mem-fraction-static",), "mem_fraction", fraction, "ServerArgs"),
        setting(("--chunked-prefill-size",), "step_tokens", positive_int, "ServerArgs"),
        setting(("--max-running-requests",), "max_running", positive_int, "ServerArgs"),
        setting(("--kv-cache-dtype",), "kv_dtype", choice(SGLANG_KV_DTYPES), "ServerArgs"),
        setting(("--context-length",), "max_model_len", positive_int, "ServerArgs"),
        setting(("--quantization",), "quantization", lambda f, t: t, "ServerArgs"),
        setting(("--moe-a2a-backend",), "a2a", choice(A2A), "ServerArgs"),
        setting(("--moe-runner-backend",), "moe_runner", choice(MOE_RUNNERS), "ServerArgs"),
        setting(("--enable-two-batch-overlap",), "tbo", None, "ServerArgs"),
        setting(("--disable-overlap-schedule",), "overlap_off", None, "ServerArgs"),
        unpriced(
            ("--deepep-mode",),
            "moeplan prices DeepEP's normal dispatch in prefill and its low-latency one in "
            "decode (``auto``); a pinned mode changes prefill's (arg_groups/fields/exec_.py:898 "
            "deepep_mode, 0.5.23)",
        ),
        group(("--speculative-algorithm",), lambda f, t: t, "ServerArgs"),
        group(("--speculative-num-steps",), positive_int, "ServerArgs"),
        group(("--speculative-eagle-topk",), positive_int, "ServerArgs"),
        group(("--speculative-num-draft-tokens",), positive_int, "ServerArgs"),
        unpriced(
            ("--attention-backend",),
            "moeplan prices attention from the kernel tables, measured with the engine's "
            "default backend for the GPU",
        ),
        unpriced(
            ("--cuda-graph-max-bs",),
            "decode batches above it run without CUDA graphs; the kernel tables were "
            "measured with graphs",
        ),
        unpriced(("--disable-cuda-graph",), "no CUDA graphs", takes_value=False),
        no_effect(("--host",), NO_EFFECT_SERVER),
        no_effect(("--port",), NO_EFFECT_SERVER),
        no_effect(("--served-model-name",), NO_EFFECT_SERVER),
        no_effect(("--api-key",), NO_EFFECT_SERVER),
        no_effect(("--tool-call-parser",), "parses tool calls in the API server's output"),
        no_effect(("--reasoning-parser",), "parses reasoning in the API server's output"),
        no_effect(("--trust-remote-code",), "lets the config load", takes_value=False),
        no_effect(("--log-requests",), "logging", takes_value=False),
        no_effect(("--enable-metrics",), "metrics export", takes_value=False),
        no_effect(("--random-seed",), "sampling seed"),
        no_effect(("--tokenizer-path",), "the tokenizer of the API server"),
    ),
)
"""SGLang's launch grammar."""
