"""TensorRT-LLM's ``trtllm-serve MODEL …`` flags as moeplan reads them
(:mod:`moeplan.backends.launch_reader`).

Read from TensorRT-LLM 1.0–1.2 (``tensorrt_llm/commands/serve.py``, the click options of
``serve``). The parallel arithmetic (``tensorrt_llm/mapping.py`` ``Mapping``): ``--tp_size``
GPUs per pipeline stage; the MoE layers split ``--ep_size`` ways by expert and
``tp / ep`` by tensor (``moe_tp_size``); attention data parallelism is an LLM API option
(``enable_attention_dp``) set only in the ``--extra_llm_api_options`` YAML, which moeplan
does not read (refused: the file's options would change the instance unseen).

``--max_num_tokens`` and ``--max_batch_size`` are the instance's step budgets (one executor
per instance; ``tensorrt_llm/_torch/pyexecutor``).
"""

from __future__ import annotations

from moeplan.backends.launch_reader import (
    Degrees,
    EngineArgs,
    LaunchSettings,
    choice,
    divisors,
    fraction,
    no_effect,
    positive_int,
    setting,
)
from moeplan.errors import MoeplanError

NO_EFFECT_SERVER = "an API-server setting: no effect on any performance figure"
#: ``--backend`` (serve.py): moeplan models the PyTorch backend, the default since 1.0
SERVE_BACKENDS = {"pytorch": "pytorch"}


def _degrees(s: LaunchSettings) -> Degrees:
    tp, pp = s.tp or 1, s.pp or 1
    ep = s.ep or 1
    if tp % ep:
        raise MoeplanError(f"launch command --ep_size ({ep}) must divide --tp_size ({tp})")
    return Degrees(attn_tp=tp, attn_dp=1, moe_tp=tp // ep, moe_ep=ep, pp=pp)


def _refuse_yaml(flag: str, text: str) -> str:
    raise MoeplanError(
        f"launch command {flag} ({text}) is not read: give its options as moeplan flags "
        "(attention DP as --attn-dp, MTP as --mtp, the KV dtype as --kv-dtype)"
    )


def _space(model: str, gpus: int) -> list[str]:
    """``P`` pipeline stages (``--pp_size``) of ``W`` GPUs: ``--tp_size W --ep_size E``
    (``E`` divides ``W``); no attention DP (a launch flag of the options file, not read)."""
    out = []
    for pp in divisors(gpus):
        w, stage = gpus // pp, f" --pp_size {pp}" if pp > 1 else ""
        for ep in divisors(w):
            out.append(
                f"trtllm-serve {model} --tp_size {w}"
                + (f" --ep_size {ep}" if ep > 1 else "")
                + stage
            )
    return out


TRTLLM_ARGS = EngineArgs(
    engine="trtllm",
    programs=(("trtllm-serve",), ("trtllm-serve", "serve")),
    positional_model=True,
    degrees=_degrees,
    space=_space,
    instance_step_tokens=lambda v, dp: v,
    instance_max_running=lambda v, dp: v,
    flags=(
        setting(("--tp_size",), "tp", positive_int, "serve.py"),
        setting(("--pp_size",), "pp", positive_int, "serve.py"),
        setting(("--ep_size",), "ep", positive_int, "serve.py"),
        setting(("--kv_cache_free_gpu_memory_fraction",), "mem_fraction", fraction, "serve.py"),
        setting(("--max_num_tokens",), "step_tokens", positive_int, "serve.py"),
        setting(("--max_batch_size",), "max_running", positive_int, "serve.py"),
        setting(("--max_seq_len",), "max_model_len", positive_int, "serve.py"),
        no_effect(
            ("--backend",), "moeplan models the PyTorch backend", value=choice(SERVE_BACKENDS)
        ),
        no_effect(("--extra_llm_api_options",), "refused (not read)", value=_refuse_yaml),
        no_effect(("--host",), NO_EFFECT_SERVER),
        no_effect(("--port",), NO_EFFECT_SERVER),
        no_effect(("--log_level",), "logging"),
        no_effect(("--reasoning_parser",), "parses reasoning in the API server's output"),
        no_effect(("--tokenizer",), "the tokenizer of the API server"),
        no_effect(("--trust_remote_code",), "lets the config load", takes_value=False),
    ),
)
"""TensorRT-LLM's launch grammar."""
