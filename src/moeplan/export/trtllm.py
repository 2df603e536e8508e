"""TensorRT-LLM launch arguments: ``trtllm-serve`` and its YAML of LLM API options (pure:
strategy in, argument list and file text out).

Command (``tensorrt_llm/commands/serve.py`` of the 1.2 line, ``serve``; ``trtllm-serve MODEL``
runs it, ``DefaultGroup`` resolving an unknown first argument to ``serve``)::

    trtllm-serve MODEL --backend pytorch --host 0.0.0.0 --port P --tp_size T --pp_size PP
        --ep_size E --max_batch_size B --max_num_tokens N
        --kv_cache_free_gpu_memory_fraction F --extra_llm_api_options "${HERE}/<server>.yaml"

Layout mapping (``llm_args.py`` ``_ParallelConfig.to_mapping``): ``--tp_size`` is the GPU count
of one pipeline stage; ``enable_attention_dp`` makes every one of them an attention-DP rank
(``tensorrt_llm/_torch/modules/attention.py``: ``if mapping.enable_attention_dp: dp_size =
tp_size; tp_size = 1``; the KV cache manager likewise), so a layout with attention TP and DP
both above 1 cannot be expressed; ``--ep_size`` and ``moe_tensor_parallel_size`` split the MoE
group of ``tp_size`` GPUs (``tensorrt_llm/mapping.py`` ``Mapping.__init__``: "tp_size must
equal to moe_tp_size * moe_ep_size * moe_cluster_size"). The YAML (``--extra_llm_api_options``, read by
``update_llm_args_with_extra_dict`` into ``TorchLlmArgs``, a ``StrictBaseModel`` with
``extra="forbid"``: an unknown key is refused) holds what has no flag: ``enable_attention_dp``,
``moe_tensor_parallel_size``, ``enable_chunked_prefill: true`` (the simulator chunks prompts:
:mod:`moeplan.backends.trtllm`), ``moe_config`` (``WIDEEP`` with ``load_balancer.num_slots``
when the layout replicates experts), ``speculative_config`` (MTP), ``kv_cache_config.dtype``
(with the flag's ``free_gpu_memory_fraction`` beside it: the YAML's ``kv_cache_config``
replaces the flag's whole, ``llm_args | llm_args_dict``). The flags repeat TensorRT-LLM's defaults where the plan priced them, so the file says what was
simulated.

A server over several nodes is one MPI job started from its first node, as TensorRT-LLM's
multi-node examples run it (docs/source/commands/trtllm-serve: ``srun ... trtllm-llmapi-launch
trtllm-serve``; its DeepSeek-R1 guide: ``mpirun -np 16 --hostfile ... --allow-run-as-root
trtllm-llmapi-launch trtllm-serve``): ``mpirun --allow-run-as-root -H
${NODE_0_ADDR}:8,${NODE_1_ADDR}:8 -np 16 trtllm-llmapi-launch trtllm-serve ...`` on that node,
nothing on the others (MPI reaches them over ssh), whole nodes only.

Not written: P/D pools (``trtllm-serve disaggregated`` with a ``cache_transceiver_config`` per
worker) and a multi-node server on part of its nodes' GPUs: said in ``warnings``, and the plan
exports the best option it can run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from moeplan.backends.trtllm import MAX_BATCH_SIZE, MAX_NUM_TOKENS
from moeplan.backends.trtllm import TRTLLM as BACKEND
from moeplan.export.constraints import Target
from moeplan.export.deployment import Slot, node_addr
from moeplan.export.sglang import ExportResult
from moeplan.planners.layout import Layout

SERVE_COMMAND = "trtllm-serve"
#: runs trtllm-serve on every MPI rank: rank 0 serves, the others run the model's workers
#: (tensorrt_llm/llmapi/trtllm-llmapi-launch)
MPI_LAUNCHER = "trtllm-llmapi-launch"
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


def unexpressible(s: Layout) -> str | None:
    """Why ``trtllm-serve`` cannot run ``s`` (None when it can):
    :meth:`moeplan.backends.trtllm.TRTLLMBackend.layout_blocker`."""
    return BACKEND.layout_blocker(s.attn_tp, s.attn_dp, s.moe_tp, s.moe_ep)


def mpi_launch(hosts: list[str], gpus_per_node: int) -> list[str]:
    """The MPI prefix of a server over ``hosts`` (one rank per GPU; module docstring)."""
    spec = ",".join(f"{h}:{gpus_per_node}" for h in hosts)
    n = str(len(hosts) * gpus_per_node)
    return ["mpirun", "--allow-run-as-root", "-H", spec, "-np", n, MPI_LAUNCHER]


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
    max_batch_size: int | None = None,
    max_num_tokens: int | None = None,
    mem_fraction: float | None = None,
) -> ExportResult:
    """``trtllm-serve`` arguments for ``strategy``; the YAML at ``config_path``; the KV pool's
    free-memory fraction ``mem_fraction`` (None: the engine's default, written explicitly)."""
    s = strategy
    why = unexpressible(s)
    if why is not None:
        return ExportResult(
            engine=BACKEND.name, args=(), expressible=False, warnings=(why + "; no arguments",)
        )
    args = [SERVE_COMMAND, model_path, "--backend", "pytorch"]
    args += ["--tp_size", str(s.attn_tp * s.attn_dp), "--pp_size", str(s.pp)]
    args += ["--ep_size", str(s.moe_ep)]
    args += ["--max_batch_size", str(max_batch_size or MAX_BATCH_SIZE)]
    args += ["--max_num_tokens", str(max_num_tokens or MAX_NUM_TOKENS)]
    args += BACKEND.mem_fraction_args(mem_fraction or BACKEND.default_mem_fraction)
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
    r = trtllm_args(strategy, model_path=model_path, config_path="config.yaml")
    if not r.expressible:
        return r
    if num_nodes > 1:
        hosts = [f"${{NODE_{n}_ADDR}}" for n in range(num_nodes)]
        r = replace(r, args=(*mpi_launch(hosts, target.gpus_per_node), *r.args))
    opts = json.dumps(llm_api_options(strategy, None, 0, target.num_experts))
    note = f"write config.yaml (--extra_llm_api_options) beside it: {opts}"
    return replace(r, warnings=(*r.warnings, note))


def server_nodes(slot: Slot, ctx: Any, notes: list[str]) -> list[list[list[str]]] | None:
    """:func:`trtllm_args` for a colocated slot, plus ``--host 0.0.0.0 --port P``, the
    prefill budget the plan priced and ``--trust_remote_code``; over several nodes the MPI
    job on the first and no command on the others; None for a slot the writer cannot
    express (module docstring)."""
    s, pool = slot.strategy, slot.pool
    if slot.role != "colocated":
        notes.append(PD_NOTE)
        return None
    per_node = ctx.target.gpus_per_node
    if len(slot.nodes) > 1 and len(slot.gpus) < per_node:
        notes.append(
            f"a TensorRT-LLM server over {len(slot.nodes)} nodes is written for whole nodes; "
            f"this one uses {len(slot.gpus)} of {per_node} GPUs on each"
        )
        return None
    chunk = BACKEND.chunk_args(pool.chunk, s.attn_dp) if pool.chunk else []
    r = trtllm_args(
        s,
        model_path=ctx.model_path,
        config_path="${HERE}/" + _config_name(slot),
        max_num_tokens=int(chunk[1]) if chunk else None,
        max_batch_size=-(-pool.max_running // s.attn_dp) if pool.max_running else None,
        mem_fraction=_mem_fraction(pool),
    )
    notes += r.warnings
    if not r.expressible:
        return None
    args = [*r.args, "--host", "0.0.0.0", "--port", str(slot.port)]
    if ctx.remote_code:
        args.append("--trust_remote_code")
    if len(slot.nodes) == 1:
        return [[args]]
    hosts = [node_addr(n) for n in slot.nodes]
    return [[[*mpi_launch(hosts, per_node), *args]], *([] for _ in slot.nodes[1:])]


def _mem_fraction(pool: Any) -> float | None:
    """The pool's KV free-memory fraction (its knobs' first; None: the engine's default)."""
    return getattr(pool.knobs, "mem_fraction", None) or pool.mem_fraction


def slot_files(slot: Slot, ctx: Any) -> dict[str, str]:
    """The slot's ``--extra_llm_api_options`` YAML. A ``kv_cache_config`` it writes replaces
    the one ``--kv_cache_free_gpu_memory_fraction`` built, whole (``llm_args.py``
    ``update_llm_args_with_extra_dict``: ``llm_args | llm_args_dict``), so it carries the
    same ``free_gpu_memory_fraction``."""
    pool = slot.pool
    opts = llm_api_options(
        slot.strategy,
        pool.knobs,
        max(ctx.redundant, pool.redundant),
        ctx.target.num_experts,
        pool.pp_partition,
    )
    if "kv_cache_config" in opts:
        frac = _mem_fraction(pool) or BACKEND.default_mem_fraction
        opts["kv_cache_config"] = {**opts["kv_cache_config"], "free_gpu_memory_fraction": frac}
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
