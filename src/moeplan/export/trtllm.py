"""TensorRT-LLM launch arguments: ``trtllm-serve`` and its YAML of LLM API options (pure:
strategy in, argument list and file text out).

Command (``tensorrt_llm/commands/serve.py`` of the 1.2 line, ``serve``; ``trtllm-serve MODEL``
runs it, ``DefaultGroup`` resolving an unknown first argument to ``serve``)::

    trtllm-serve MODEL --backend pytorch --host 0.0.0.0 --port P --tp_size T --pp_size PP
        --ep_size E --max_batch_size B --max_num_tokens N
        --kv_cache_free_gpu_memory_fraction F --extra_llm_api_options "${HERE}/<server>.yaml"

Layout mapping (``llm_args.py`` ``_ParallelConfig.to_mapping``): ``--tp_size`` is the GPU count
of one pipeline stage; ``enable_attention_dp`` makes every one of them an attention-DP rank
(attention TP 1), so a layout with attention TP and DP both above 1 cannot be expressed;
``--ep_size`` and ``moe_tensor_parallel_size`` split the MoE group of ``tp_size`` GPUs
(``moe_tp x moe_ep = tp_size``). The YAML (``--extra_llm_api_options``, read by
``update_llm_args_with_extra_dict`` into ``TorchLlmArgs``, a ``StrictBaseModel`` with
``extra="forbid"``: an unknown key is refused) holds what has no flag: ``enable_attention_dp``,
``moe_tensor_parallel_size``, ``enable_chunked_prefill: true`` (the simulator chunks prompts:
:mod:`moeplan.backends.trtllm`), ``moe_config`` (``WIDEEP`` with ``load_balancer.num_slots``
when the layout replicates experts), ``speculative_config`` (MTP), ``kv_cache_config.dtype``.
The flags repeat TensorRT-LLM's defaults where the plan priced them, so the file says what was
simulated.

Not written: servers spanning several nodes (``trtllm-serve`` runs them under ``mpirun`` /
``srun`` with ``trtllm-llmapi-launch``, not one command per node) and P/D pools
(``trtllm-serve disaggregated`` with a ``cache_transceiver_config`` per worker): both are said
in ``warnings`` and the plan exports the best option it can run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from moeplan.backends.trtllm import MAX_BATCH_SIZE, MAX_NUM_TOKENS
from moeplan.backends.trtllm import TRTLLM as BACKEND
from moeplan.export.constraints import Target
from moeplan.export.deployment import Slot
from moeplan.export.sglang import ExportResult
from moeplan.planners.layout import Layout

SERVE_COMMAND = "trtllm-serve"
#: GPUs of compute capability below this have no DeepseekV4 class
#: (supported-models.md footnote 11: "only supported on Blackwell GPUs (SM100+)")
SM100 = 100
NEEDS_SM100 = frozenset({"DeepseekV4ForCausalLM"})
PD_PROXY_NOTE: str | None = (
    "TensorRT-LLM P/D runs behind `trtllm-serve disaggregated`, which moeplan does not write"
)
PD_NOTE = (
    "a TensorRT-LLM P/D pool needs `trtllm-serve disaggregated` and a cache_transceiver_config "
    "per worker, which moeplan does not write"
)
#: the YAML keys moeplan writes, each a TorchLlmArgs field (llm_args.py, 1.2 line);
#: bench/check_exports.py checks them against the installed release's own classes
YAML_KEYS = frozenset(
    {
        "enable_attention_dp",
        "moe_tensor_parallel_size",
        "enable_chunked_prefill",
        "moe_config",
        "speculative_config",
        "kv_cache_config",
        "pp_partition",
    }
)


def unexpressible(s: Layout, nodes: int = 1) -> str | None:
    """Why ``trtllm-serve`` (as moeplan writes it) cannot run ``s`` (None when it can)."""
    if s.attn_dp > 1 and s.attn_tp > 1:
        return (
            f"TensorRT-LLM cannot express attention TP{s.attn_tp} x DP{s.attn_dp}: "
            "enable_attention_dp makes every GPU of tp_size an attention-DP rank"
        )
    if nodes > 1:
        return (
            f"a TensorRT-LLM server over {nodes} nodes runs under mpirun/srun with "
            "trtllm-llmapi-launch, which moeplan does not write"
        )
    return None


def llm_api_options(
    s: Layout, knobs: Any, redundant: int, num_experts: int, pp_partition: Any = None
) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` YAML of ``s`` (module docstring)."""
    out: dict[str, Any] = {
        "enable_attention_dp": s.attn_dp > 1,
        "enable_chunked_prefill": True,
    }
    if s.moe_tp > 1 and s.moe_ep > 1:
        out["moe_tensor_parallel_size"] = s.moe_tp
    if redundant > 0 and s.moe_ep > 1:
        out["moe_config"] = {
            "backend": "WIDEEP",
            "load_balancer": {"num_slots": num_experts + redundant},
        }
    if s.pp > 1 and pp_partition is not None and len(pp_partition) == s.pp:
        out["pp_partition"] = [int(x) for x in pp_partition]
    for key, value in BACKEND.llm_api_options(knobs).items():
        out[key] = value
    return out


def render_yaml(options: Mapping[str, Any], indent: str = "") -> str:
    """Block YAML of ``options`` (mappings, lists of numbers, and scalars: booleans,
    numbers, plain identifiers)."""
    lines: list[str] = []
    for key, value in options.items():
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            lines.append(render_yaml(value, indent + "  ").rstrip("\n"))
        elif isinstance(value, list):
            lines.append(f"{indent}{key}: [{', '.join(str(v) for v in value)}]")
        elif isinstance(value, bool):
            lines.append(f"{indent}{key}: {'true' if value else 'false'}")
        else:
            lines.append(f"{indent}{key}: {value}")
    return "\n".join(lines) + "\n"


def trtllm_args(
    strategy: Layout,
    *,
    model_path: str,
    config_path: str,
    num_nodes: int = 1,
    max_batch_size: int | None = None,
    max_num_tokens: int | None = None,
) -> ExportResult:
    """``trtllm-serve`` arguments for ``strategy`` (one node); the YAML at ``config_path``."""
    s = strategy
    why = unexpressible(s, num_nodes)
    if why is not None:
        return ExportResult(
            engine=BACKEND.name, args=(), expressible=False, warnings=(why + "; no arguments",)
        )
    args = [SERVE_COMMAND, model_path, "--backend", "pytorch"]
    args += ["--tp_size", str(s.attn_tp * s.attn_dp), "--pp_size", str(s.pp)]
    args += ["--ep_size", str(s.moe_ep)]
    args += ["--max_batch_size", str(max_batch_size or MAX_BATCH_SIZE)]
    args += ["--max_num_tokens", str(max_num_tokens or MAX_NUM_TOKENS)]
    args += ["--kv_cache_free_gpu_memory_fraction", str(BACKEND.default_mem_fraction)]
    args += ["--extra_llm_api_options", config_path]
    warnings = []
    if s.fused:
        warnings.append("TensorRT-LLM has no fused RS-Combine / AG-Dispatch")
    return ExportResult(
        engine=BACKEND.name, args=tuple(args), warnings=tuple(warnings), expressible=True
    )


# ---- the launch writer (moeplan.export.writers.LaunchWriter) ---------------------------------
def _config_name(slot: Slot) -> str:
    return f"{slot.name}.yaml"


def engine_args(
    strategy: Layout, *, model_path: str, target: Target, num_nodes: int
) -> ExportResult:
    """:func:`trtllm_args` of one server; a warning holds its YAML (``config.yaml`` beside
    it, written as JSON, which YAML reads)."""
    r = trtllm_args(strategy, model_path=model_path, config_path="config.yaml", num_nodes=num_nodes)
    if not r.expressible:
        return r
    opts = json.dumps(llm_api_options(strategy, None, 0, target.num_experts))
    note = f"write config.yaml (--extra_llm_api_options) beside it: {opts}"
    return replace(r, warnings=(*r.warnings, note))


def server_nodes(slot: Slot, ctx: Any, notes: list[str]) -> list[list[list[str]]] | None:
    """:func:`trtllm_args` for a colocated slot on one node, plus ``--host 0.0.0.0 --port
    P``, the prefill budget the plan priced and ``--trust_remote_code``; None for a slot
    the writer cannot express (module docstring)."""
    s, pool = slot.strategy, slot.pool
    if slot.role != "colocated":
        notes.append(PD_NOTE)
        return None
    chunk = BACKEND.chunk_args(pool.chunk, s.attn_dp) if pool.chunk else []
    r = trtllm_args(
        s,
        model_path=ctx.model_path,
        config_path="${HERE}/" + _config_name(slot),
        num_nodes=len(slot.nodes),
        max_num_tokens=int(chunk[1]) if chunk else None,
    )
    notes += r.warnings
    if not r.expressible:
        return None
    args = [*r.args, "--host", "0.0.0.0", "--port", str(slot.port)]
    if ctx.remote_code:
        args.append("--trust_remote_code")
    return [[args]]


def slot_files(slot: Slot, ctx: Any) -> dict[str, str]:
    """The slot's ``--extra_llm_api_options`` YAML."""
    pool = slot.pool
    opts = llm_api_options(
        slot.strategy,
        pool.knobs,
        max(ctx.redundant, pool.redundant),
        ctx.target.num_experts,
        pool.pp_partition,
    )
    head = f"# {BACKEND.label} {BACKEND.flag_line} LLM API options of {slot.name} (moeplan)\n"
    return {_config_name(slot): head + render_yaml(opts)}


def server_env(slot: Slot, gpus_per_node: int) -> list[tuple[str, str]]:
    """``CUDA_VISIBLE_DEVICES`` selects a slot smaller than a node (no base-GPU flag)."""
    if len(slot.gpus) < gpus_per_node:
        return [("CUDA_VISIBLE_DEVICES", ",".join(map(str, slot.gpus)))]
    return []


def check_server(args: list[str], slot: Slot, ctx: Any, rank: int) -> list[str]:
    """The rules of the pinned release the slot breaks: a model class it lacks, attention
    DP for an architecture without it, a class that needs SM100, and WIDEEP slots not
    divisible by the EP size (``MoeLoadBalancerConfig.setup``)."""
    del args, rank
    t, s = ctx.target, slot.strategy
    bad = []
    if (why := BACKEND.model_class_blocker(t.architecture)) is not None:
        bad.append(why)
    if s.attn_dp > 1 and (why := BACKEND.attn_dp_blocker(t.architecture)) is not None:
        bad.append(why)
    if t.architecture in NEEDS_SM100 and (t.gpu_sm or 0) < SM100:
        bad.append(
            f"{BACKEND.label} runs {t.architecture} on SM100+ only "
            f"(supported-models.md footnote 11); {t.gpu} is SM{t.gpu_sm}"
        )
    redundant = max(ctx.redundant, slot.pool.redundant)
    if redundant > 0 and s.moe_ep > 1 and (t.num_experts + redundant) % s.moe_ep:
        bad.append(
            f"moe_config.load_balancer.num_slots ({t.num_experts + redundant}) must be "
            f"divisible by the EP size ({s.moe_ep}) (MoeLoadBalancerConfig.setup)"
        )
    return bad
