"""TensorRT-LLM (PyTorch backend, ``trtllm-serve``): in-flight batching, its KV manager, its
capabilities and launch facts (sources per fact).

Sources. The launch flags target the newest wheel on the package index, 1.2.1 (``flag_line``);
the kernel tables are 1.3.0rc20 (H100) and 1.0.0 (A100). The wheel itself is a stub that
fetches from NVIDIA's index, so the facts below were read from the TensorRT-LLM sources stored
for ``search`` (a 1.2-line ``tensorrt_llm/llmapi/llm_args.py``: its ``MTPDecodingConfig``
warns that a flag "will do nothing in release 1.3"; ``tensorrt_llm/commands/serve.py`` of the
same line) and checked against aiconfigurator's per-version ``trtllm-serve`` YAML templates
(``extra_engine_args.<version>.yaml.j2``, 1.2.0rc6.post2 and 1.3.0rc23).

Scheduler (``tensorrt_llm/_torch/pyexecutor/scheduler.py``: ``BindCapacityScheduler`` then
``BindMicroBatchScheduler``, whose ``schedule`` returns context *and* generation requests of
one iteration) — in-flight batching mixes prefill and decode in one forward step, which is
moeplan's ``mixed`` scheduler model with TensorRT-LLM's own parameters:

- ``max_batch_size`` 2048 and ``max_num_tokens`` 8192 on every GPU (llm_args.py
  ``BaseLlmArgs`` fields; serve.py ``--max_batch_size`` / ``--max_num_tokens`` default to
  ``BuildConfig.model_fields[...]``, the same numbers); per attention-DP rank: each rank's
  executor runs its own scheduler over the requests dispatched to it
  (``tensorrt_llm/_torch/pyexecutor/py_executor.py`` ``_fetch_new_requests``: under attention
  DP ``total_max_num_active_requests = self.dist.tp_size * self.max_num_active_requests``);
- ``BaseLlmArgs.validate_runtime_args`` warns when ``max_batch_size > max_num_tokens``: the
  budget is meant to cover one token of every running request (the ``mixed`` model's rule);
- ``enable_chunked_prefill`` False by default (``BaseLlmArgs``; serve.py
  ``--enable_chunked_prefill`` flag): a prompt then enters one iteration whole or waits, and
  one longer than ``max_num_tokens`` is not scheduled. moeplan's mixed model chunks prompts,
  so every exported YAML sets ``enable_chunked_prefill: true`` — the launched server runs what
  was priced;
- ``scheduler_config.capacity_scheduler_policy`` ``GUARANTEED_NO_EVICT`` (``SchedulerConfig``
  default; serve.py's ``get_llm_args`` sets it too): a request is admitted only when the KV
  blocks of its whole output fit beside those of every running request, so nothing is ever
  evicted — ``new_token_ratio`` 1.0 (the whole outstanding output reserved at admission).
  ``MAX_UTILIZATION`` (admit on current use, evict under pressure) is the other policy; it is
  not the default and is not modelled;
- the overlap scheduler is on (``TorchLlmArgs.disable_overlap_scheduler`` False).

KV manager (``KvCacheConfig``): ``free_gpu_memory_fraction`` 0.9 of the memory left free after
the weights and a profiling forward pass of ``max_num_tokens`` tokens (serve.py
``--kv_cache_free_gpu_memory_fraction`` default 0.9, help "Free GPU memory fraction reserved
for KV Cache, after allocating model weights and buffers"), so the pool is 0.9 of moeplan's
free-memory capacity (the ``free`` rule of :class:`moeplan.cost.memory.KVPool`) — unlike
SGLang's static fraction and vLLM's utilisation, which are shares of the whole GPU. ``tokens_per_block`` 32,
``enable_block_reuse`` True, ``dtype`` ``auto``.

Capabilities (the model/feature matrix of ``docs/source/models/supported-models.md`` in the
stored source, which is later than both pinned versions; no per-version copy of it could be
read):

- attention DP (``enable_attention_dp``) where the matrix says "Yes" (:data:`ADP_ARCHITECTURES`);
- MoE backends (``MoeConfig.backend``): ``AUTO`` (default), ``CUTLASS``, ``CUTEDSL``,
  ``WIDEEP``, ``TRTLLM``, ``DEEPGEMM``, ``VANILLA``, ``TRITON``; redundant experts need
  ``WIDEEP`` with ``load_balancer: {num_slots}`` (``MoeLoadBalancerConfig``: ``num_slots``
  divisible by the EP size). moeplan prices no DeepEP path for TensorRT-LLM (its wide-EP
  all-to-all is its own), prices its wide-EP MoE from its own table (``trtllm_wideep_moe``);
- MTP: ``speculative_config: {decoding_type: MTP, num_nextn_predict_layers: N}``
  (``MTPDecodingConfig``, PyTorch backend only);
- model classes: :data:`MISSING_MODEL_CLASSES` (the preset architectures the PyTorch backend
  has no class for).

1.2.1 against 1.3.0rc20 (what moeplan writes): the same YAML keys (``enable_attention_dp``,
``enable_chunked_prefill``, ``max_batch_size``, ``max_num_tokens``, ``kv_cache_config``
``free_gpu_memory_fraction`` / ``dtype``, ``moe_config.backend`` / ``load_balancer``,
``speculative_config`` ``MTP``), as aiconfigurator's 1.2.0rc6.post2 and 1.3.0rc23 templates
write them; the 1.3 template adds ``sparse_attention_config.implementation`` (MiniMax-M3's
block-sparse attention), which moeplan does not write, and ``MTPDecodingConfig``'s
``mtp_eagle_one_model`` flag is announced to do nothing from 1.3. A later stored
``llm_args.py`` (of the 1.3 line or after: it has a ``deepseek_v4`` tokenizer alias; no copy
tagged 1.3.0rc20 could be read) keeps every default above (``max_batch_size`` 2048,
``max_num_tokens`` 8192, ``enable_chunked_prefill`` and ``enable_attention_dp`` False,
``free_gpu_memory_fraction`` 0.9 within [0, 1]), adds the MoE backends ``DENSEGEMM``,
``MARLIN`` and ``MEGAMOE_DEEPGEMM`` and KV-cache-aware routing in ``attention_dp_config``,
validates ``kv_cache_config.dtype`` (``auto``, ``fp8``, ``nvfp4`` or a torch dtype name) and
deprecates ``moe_cluster_parallel_size``; none of it changes a key moeplan writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from moeplan.backends.base import EngineBackend, EpCollective, FusedEpComm, Knobs
from moeplan.backends.capabilities import Nvfp4Moe
from moeplan.errors import MoeplanError
from moeplan.specs import GPUSpec

VERSION = "1.2.1"
#: the release of the H100 kernel tables (moe/attention/mla/comm/trtllm/1.3.0rc20)
TABLE_VERSION = "1.3.0rc20"
MAX_BATCH_SIZE = 2048  # llm_args.py BaseLlmArgs.max_batch_size (= BuildConfig's default)
MAX_NUM_TOKENS = 8192  # llm_args.py BaseLlmArgs.max_num_tokens (= BuildConfig's default)
#: KvCacheConfig.free_gpu_memory_fraction; serve.py --kv_cache_free_gpu_memory_fraction
FREE_GPU_MEMORY_FRACTION = 0.9
#: GUARANTEED_NO_EVICT (SchedulerConfig.capacity_scheduler_policy): the whole output reserved
NO_EVICT_RESERVE = 1.0
#: ``kv_cache_config.dtype`` per moeplan KV dtype (``auto``: the key is not written). Only
#: ``fp8`` is a value the PyTorch backend names besides ``auto`` (KvCacheConfig.dtype's
#: "auto" default is the checkpoint's dtype): a bf16 request on a checkpoint with an fp8 KV
#: cache cannot be written and stays ``auto``.
KV_CACHE_DTYPE = {"fp8": "fp8"}

#: architectures with attention DP "Yes" in docs/source/models/supported-models.md's
#: model/feature matrix (the preset names; KimiK25 runs the DeepseekV3 text model, Qwen3.5's
#: matrix row is its Qwen3_5MoeForCausalLM text model)
ADP_ARCHITECTURES: frozenset[str] = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV4ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "Glm4MoeForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "GptOssForCausalLM",
        "NemotronHForCausalLM",
    }
)
_MATRIX = "docs/source/models/supported-models.md feature matrix"
#: preset architectures the matrix does not mark "Yes" for attention DP, and why
NO_ADP = {
    "Gemma4ForConditionalGeneration": f"'Untested' in the {_MATRIX}",
    "MixtralForCausalLM": f"not in the {_MATRIX}",
    "Qwen2MoeForCausalLM": f"not in the {_MATRIX}",
    "GlmMoeDsaForCausalLM": f"not in the {_MATRIX}",
}
#: preset architectures without a PyTorch-backend class (supported-models.md): DeepSeek-V2
#: runs on the AutoDeploy backend only (its footnote 5); MiniMax-M3 has the
#: MiniMaxM3SparseForConditionalGeneration class only
MISSING_MODEL_CLASSES = frozenset({"DeepseekV2ForCausalLM", "MiniMaxM3ForCausalLM"})


#: Dynamo's TensorRT-LLM worker, read at ai-dynamo/dynamo @ f57c4fe5 (DYNAMO_SOURCE)
DYNAMO_SOURCE = (
    "ai-dynamo/dynamo @ f57c4fe5360d6a63e3d9b9365325933305beec2c: "
    "components/src/dynamo/trtllm/utils/trtllm_utils.py cmd_line_args (its flags) and "
    "components/src/dynamo/trtllm/main.py init (the LLM API arguments they set)"
)
#: ``trtllm-serve`` flag -> the Dynamo worker's flag setting the same LLM API argument
#: (serve.py ``get_llm_args`` / Dynamo main.py ``arg_map``; the YAML is merged over both by
#: ``update_llm_args_with_extra_options``). What neither takes a flag for agrees: both set
#: ``scheduler_config`` to ``GUARANTEED_NO_EVICT`` with batch-size tuning
#: (``DynamicBatchConfig``; serve.py @ 00209af1 and main.py @ f57c4fe5) and ``gpus_per_node``
#: to the GPUs the process sees
DYNAMO_FLAGS = {
    "--tp_size": "--tensor-parallel-size",  # tensor_parallel_size
    "--pp_size": "--pipeline-parallel-size",  # pipeline_parallel_size
    "--ep_size": "--expert-parallel-size",  # moe_expert_parallel_size
    "--max_batch_size": "--max-batch-size",  # max_batch_size
    "--max_num_tokens": "--max-num-tokens",  # max_num_tokens
    "--max_seq_len": "--max-seq-len",  # max_seq_len
    # KvCacheConfig(free_gpu_memory_fraction=...) in both
    "--kv_cache_free_gpu_memory_fraction": "--free-gpu-memory-fraction",
    "--extra_llm_api_options": "--extra-engine-args",  # the LLM API YAML
}
#: the worker's ``--override-engine-args`` (a JSON object deep-merged into its LLM API
#: arguments after the YAML): how a ``trtllm-serve`` switch without a worker flag is passed
DYNAMO_OVERRIDE = "--override-engine-args"
#: ``trtllm-serve`` switches -> the LLM API argument they set (serve.py)
DYNAMO_SWITCHES = {"--trust_remote_code": "trust_remote_code"}
#: ``trtllm-serve`` settings the worker sets itself, with the one value it sets: main.py's
#: ``arg_map`` runs the PyTorch backend (``"backend": Backend.PYTORCH``), and the worker has
#: no ``--backend`` flag
DYNAMO_FIXED = {"--backend": "pytorch"}
#: a TensorRT-LLM server over several nodes in Dynamo: why none is written
DYNAMO_MULTINODE = (
    "Dynamo's operator runs a multi-node TensorRT-LLM worker as an mpirun job of its own "
    "(deploy/cloud/operator/internal/dynamo/backend_trtllm.go @ 396bbf11: "
    "'mpirun -n <GPUs> -H <leader>,<workers>' without slot counts over an SSH key Secret, the "
    "worker's command joined unquoted into a 'bash -c' string), not moeplan's MPI job "
    "('-H <node>:<GPUs per node>', arguments passed as they are), so the ranks' placement "
    "and the model path could differ from launch.sh's"
)


@dataclass(frozen=True, kw_only=True)
class TRTLLMBackend(EngineBackend):
    """TensorRT-LLM (module docstring)."""

    def default_chunk(self, gpu: GPUSpec) -> int:
        """``max_num_tokens`` 8192 on every GPU (per attention-DP rank)."""
        del gpu
        return MAX_NUM_TOKENS

    def default_running(self, gpu: GPUSpec) -> int:
        """``max_batch_size`` 2048 on every GPU (per attention-DP rank)."""
        del gpu
        return MAX_BATCH_SIZE

    def fused_ep_comm(
        self, attn_dp: int, moe_ep: int, prefill: bool, hidden_bytes: float, router_bytes: float
    ) -> FusedEpComm | None:
        """Without attention DP the fused MoE's outputs are summed by one all-reduce over the
        MoE group and no token is dispatched (``_torch/modules/fused_moe/interface.py``
        ``MoE.reducescatter_or_allreduce``: all-reduce without attention DP; the inputs are on
        every rank). Under attention DP the MoE chooses an all-to-all where it can
        (``fused_moe_cutlass.py`` / ``fused_moe_trtllm_gen.py`` ``alltoall_method_type``:
        the MNNVL / NVLink one-sided all-to-all where ``MnnvlMemory.supports_mnnvl()``),
        else all-gather + reduce-scatter: kept as the all-to-all here (None). Read from the
        stored main branch, after 1.2.1."""
        del moe_ep, prefill, router_bytes
        if attn_dp > 1:
            return None
        return FusedEpComm((), (EpCollective("all_reduce", "moe", hidden_bytes),))

    def attn_dp_blocker(self, architecture: str) -> str | None:
        """Why ``enable_attention_dp`` is not written for ``architecture`` (None: it is)."""
        if architecture in ADP_ARCHITECTURES:
            return None
        where = NO_ADP.get(architecture, f"not in the {_MATRIX}")
        return (
            f"{self.label} {self.version} has no attention DP (enable_attention_dp) for "
            f"{architecture}: {where}"
        )

    def layout_blocker(self, attn_tp: int, attn_dp: int, moe_tp: int, moe_ep: int) -> str | None:
        """Attention TP and DP both above 1: ``enable_attention_dp`` makes every GPU of
        ``tp_size`` an attention-DP rank (``tensorrt_llm/_torch/modules/attention.py``: ``if
        mapping.enable_attention_dp: dp_size = tp_size; tp_size = 1``)."""
        del moe_tp, moe_ep
        if attn_dp > 1 and attn_tp > 1:
            return (
                f"{self.label} cannot express attention TP{attn_tp} x DP{attn_dp}: "
                "enable_attention_dp makes every GPU of tp_size an attention-DP rank"
            )
        return None

    def chunk_args(self, chunk_tokens: int | None, attn_dp: int) -> list[str]:
        """``--max_num_tokens`` is each attention-DP rank's budget: the instance total over
        ``attn_dp``."""
        if not chunk_tokens:
            return []
        return ["--max_num_tokens", str(max(1, chunk_tokens // max(1, attn_dp)))]

    def knob_args(self, knobs: Knobs, role: str = "colocated") -> list[str]:
        """None: ``trtllm-serve`` takes the knobs in its YAML (:meth:`llm_api_options`)."""
        del knobs, role
        return []

    def nvfp4_moe(self, version: str | None = None) -> Nvfp4Moe | None:
        """NVFP4 routed experts (the tables' 1.3.0rc20 line): ``MoeConfig.backend`` picks the
        MoE class (tensorrt_llm/_torch/modules/fused_moe/create_moe.py ``get_moe_cls``, stored
        NVIDIA/TensorRT-LLM @ 01f8de52): CUTLASS (the default), TRTLLM (``TRTLLMGenFusedMoE``
        for nvfp4 / fp8 block / mxfp4), WIDEEP, CUTEDSL, DEEPGEMM; none has an NVFP4 path
        without FP4 tensor cores (a Marlin W4A16 class for SM89-SM99, fused_moe_marlin.py,
        exists only in later commits, 06d4e712): refused below SM100."""
        del version
        return TRTLLM_NVFP4

    def llm_api_options(self, knobs: Knobs | None) -> dict[str, Any]:
        """The ``--extra_llm_api_options`` entries of an instance's knobs: MTP as
        ``speculative_config`` and the KV dtype as ``kv_cache_config.dtype``."""
        out: dict[str, Any] = {}
        if knobs is None:
            return out
        if knobs.mtp:
            out["speculative_config"] = {
                "decoding_type": "MTP",
                "num_nextn_predict_layers": knobs.mtp,
            }
        if knobs.kv_dtype in KV_CACHE_DTYPE:
            out["kv_cache_config"] = {"dtype": KV_CACHE_DTYPE[knobs.kv_dtype]}
        return out

    def dynamo_args(self, argv: list[str], role: str) -> list[str]:
        """``trtllm-serve MODEL ARGS`` as Dynamo's worker takes them (``python3 -m
        dynamo.trtllm``, :data:`DYNAMO_SOURCE`): the model as ``--model-path``, each flag as
        the worker's flag of the same LLM API argument (:data:`DYNAMO_FLAGS`), the switches
        in one ``--override-engine-args`` object, and what the worker sets itself
        (:data:`DYNAMO_FIXED`) left out where it is the value the worker sets; anything
        else is refused (MoeplanError), never dropped."""
        if role != "colocated":
            raise MoeplanError(f"moeplan writes no {self.label} {role} server")
        if len(argv) < 2 or argv[0] != "trtllm-serve" or argv[1].startswith("--"):
            raise MoeplanError(f"not a trtllm-serve MODEL command: {argv[:2]}")
        out = ["--model-path", argv[1]]
        override: dict[str, Any] = {}
        i = 2
        while i < len(argv):
            flag = argv[i]
            if flag in DYNAMO_SWITCHES:
                override[DYNAMO_SWITCHES[flag]] = True
                i += 1
                continue
            if i + 1 >= len(argv):
                raise MoeplanError(f"trtllm-serve {flag} has no value")
            value = argv[i + 1]
            if flag in DYNAMO_FIXED:
                if value != DYNAMO_FIXED[flag]:
                    raise MoeplanError(
                        f"Dynamo's {self.label} worker runs {flag} {DYNAMO_FIXED[flag]}, "
                        f"not {value}"
                    )
            elif flag in DYNAMO_FLAGS:
                out += [DYNAMO_FLAGS[flag], value]
            else:
                raise MoeplanError(f"Dynamo's {self.label} worker has no flag for {flag}")
            i += 2
        if override:
            out += [DYNAMO_OVERRIDE, json.dumps(override, sort_keys=True)]
        return out


TRTLLM_NVFP4 = Nvfp4Moe(
    runner="CUTLASS",
    runner_source=(
        "tensorrt_llm/_torch/modules/fused_moe/create_moe.py get_moe_cls: MoeConfig.backend "
        "CUTLASS by default (@01f8de52)"
    ),
    fallback=None,
    fallback_source=(
        "tensorrt_llm/_torch/modules/fused_moe/create_moe.py get_moe_cls: no NVFP4 MoE class "
        "below SM100 (@01f8de52)"
    ),
    dispatch_phases=("context", "generation"),
    dispatch_source=(
        "tensorrt_llm/_torch/modules/fused_moe/fused_moe_wide_ep.py WideEPMoE.__init__: "
        "use_postquant_alltoall = TRTLLM_MOE_POST_QUANT_ALLTOALLV (default 1) and has_nvfp4(): "
        "the all-to-all carries the NVFP4-quantized activations (@01303b38)"
    ),
)

TRTLLM = TRTLLMBackend(
    name="trtllm",
    label="TensorRT-LLM",
    kernel_table="trtllm",
    version=VERSION,
    flag_line="1.2.x",  # trtllm-serve flags and LLM API keys of the 1.2 line (module docstring)
    scheduler="mixed",
    # the PyTorch backend's overlap scheduler is on (TorchLlmArgs.disable_overlap_scheduler
    # False; docs features/overlap-scheduler); turned off by an LLM API key, not a flag
    overlap_since="",
    budgets_per_dp_rank=True,
    chunk_above_running=True,  # BaseLlmArgs.validate_runtime_args
    new_token_ratio=NO_EVICT_RESERVE,
    default_mem_fraction=FREE_GPU_MEMORY_FRACTION,
    wideep_moe_op="trtllm_wideep_moe",
    attn_dp_architectures=ADP_ARCHITECTURES,
    no_attn_dp=NO_ADP,
    missing_model_classes=MISSING_MODEL_CLASSES,
    model_registry="docs/source/models/supported-models.md, PyTorch backend",
    launch_module="moeplan.export.trtllm",
    # tensorrt_llm/llmapi/llm_args.py KvCacheConfig ``free_gpu_memory_fraction`` (default
    # 0.9): the share of the memory free after weights and activations given to the KV cache
    mem_fraction_rule="free",
    mem_fraction_flag="--kv_cache_free_gpu_memory_fraction",  # serve.py
    # NGC's release container of the pinned version (docs/source/installation/containers.md)
    image=f"nvcr.io/nvidia/tensorrt-llm/release:{VERSION}",
    # ai-dynamo/dynamo components/src/dynamo/trtllm (DYNAMO_SOURCE): flags of its own, the
    # LLM API YAML as --extra-engine-args (dynamo_args)
    dynamo_worker=("trtllm", "dynamo.trtllm"),
    dynamo_multinode=DYNAMO_MULTINODE,
)
