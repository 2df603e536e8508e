"""vLLM V1 (OpenAI server): the mixed prefill/decode scheduler, its defaults and launch facts.

Scheduler (vllm/engine/arg_utils.py ``_set_default_args``; v1/core/sched/scheduler.py):

- ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 on GPUs with >= 70 GiB except
  A100 (``if device_memory >= 70 * GiB_bytes and "a100" not in device_name:``, the name
  from ``current_platform.get_device_name().lower()``), else 2048 and
  256 — per DP engine rank: every DP rank is a separate core engine with its own scheduler
  config (docs/serving/data_parallel_deployment.md), so an instance of ``attn_dp`` ranks runs
  ``attn_dp`` times both;
- mixed prefill/decode batches; KV allocated on demand (nothing reserved at admission).

The A100 test reads the GPU record: the A100 is the one GPU of compute capability 8.0 with
>= 70 GiB among the shipped records (:func:`is_a100`).

KV pool (``--gpu-memory-utilization``, :class:`moeplan.cost.memory.KVPool` rule ``total``), as
its start-up profile sizes it (v1/worker/gpu_worker.py ``determine_available_memory``): the
fraction of the GPU less the weights as loaded (MXFP4 experts padded for the MoE kernel the
GPU gets, :meth:`VLLMBackend.expert_alignment`), the larger of a step's activations and the
dummy sampler run (:meth:`VLLMBackend.profile_bytes`), and the non-torch memory the profile
sees (:data:`VLLM_NON_TORCH_BYTES`; the CUDA context and the CUDA graphs live outside the
fraction). Full and sliding-window layers share one block pool (the hybrid KV cache
manager), a window layer holding only the blocks over its window
(:data:`VLLM_BLOCK_TOKENS`). Checked against vLLM's own logs of GPT-OSS-120B on one GPU
(``tests/test_vllm_memory_profile.py``): the Marlin path's 65.97 GiB of loaded weights
(issue #23278, 0.10.1) is modelled within 0.5 %; that run's "Available KV cache memory:
-2.14 GiB" (default flags, H100) is modelled at +0.6 GiB on an 80 GiB record, 2.7 GiB
optimistic (the CUDA-visible 79.2 GiB of an H100 accounts for 0.7 of it). Not modelled:
the Triton path's loading peak on SM90 (64.38 GiB logged by 0.14.1, issue #33155, against
60.7 GiB of stored weights; no log of the 0.10 / 0.11 releases).

Launch facts of the pinned 0.11.0 release: the model classes it lacks, the layer-partition
variable of a pipeline; attention DP (``--data-parallel-size``) replicates the attention of
any model (vllm/v1/engine/core.py ``DPEngineCoreProc``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from moeplan.backends.base import (
    GIB,
    NVFP4,
    EngineBackend,
    EpCollective,
    FusedEpComm,
    Knobs,
    MemoryContext,
)
from moeplan.backends.versions import version_key
from moeplan.backends.vllm_caps import VLLM_CAPS
from moeplan.specs import GPUSpec, ModelSpec
from moeplan.specs.cluster import FP4_TENSOR_CORE_SM
from moeplan.specs.quant import WeightFormat

VERSION = "0.11.0"
#: the non-torch memory vLLM's profile charges inside ``--gpu-memory-utilization`` (the
#: ``pool_reserve`` of :data:`VLLM`, its sources beside it)
VLLM_NON_TORCH_BYTES = 0.2 * 1024**3
#: bytes per logit the dummy sampler run of vLLM's profile holds at its peak, read from the
#: V1 sampler (v1/sample/sampler.py, ops/topk_topp_sampler.py ``forward_native`` and
#: ``apply_top_k_top_p``; FlashInfer's sampler is opt-in, ``VLLM_USE_FLASHINFER_SAMPLER``) with
#: the dummy metadata's top-k and top-p set: the model's bf16 logits (2), their float32 copy
#: (4), the sorted values (4) and int64 indices (8), the top-p softmax (4), the top-k and top-p
#: masks (1 + 1) and the re-scattered logits (4) live together: 28
SAMPLER_BYTES_PER_LOGIT = 28
#: vLLM's KV block on CUDA, in tokens (vllm/config/cache.py ``block_size``: 16 unless set)
VLLM_BLOCK_TOKENS = 16
#: MXFP4 expert padding per MoE backend (model_executor/layers/quantization/mxfp4.py,
#: ``Mxfp4MoEMethod.create_weights``): Marlin (below SM90) pads the intermediate per rank to
#: 128 and the hidden size to 256, FlashInfer's SM100 backends both to 256, Triton the
#: intermediate to 64 (:meth:`VLLMBackend.expert_alignment`)
MARLIN_INTER_ALIGN, MARLIN_HIDDEN_ALIGN = 128, 256
FI_MXFP4_ALIGN = 256
TRITON_MXFP4_INTER_ALIGN = 64
#: the compute capability vLLM's ``is_device_capability(100)`` check admits (an exact match in
#: the stored 0.11 copy: B200 and GB200; B300 / GB300, 10.3, take the Triton path there)
FI_MXFP4_SM = 100
#: KV cache dtype spellings (``--kv-cache-dtype``; ``auto``: no flag, the engine's default)
KV_CACHE_DTYPE_FLAG = {"fp8": "fp8", "bf16": "bfloat16"}
#: the deployment kinds vLLM 0.11.0 launches: replicas of one server, and prefill/decode
#: instances joined by a KV connector (``--kv-transfer-config`` with ``kv_role``
#: ``kv_producer`` / ``kv_consumer``: docs/features/disagg_prefill.md, vllm/config/kv_transfer.py)
DEPLOYMENTS = frozenset({"colocated", "pd"})
#: the kinds it does not launch, with the rule (attention-FFN disaggregation, an ``afd_ffn_server``
#: / ``vllm fserver``, exists only in forks of vllm-project/vllm, not in 0.11.0)
VLLM_NO_DEPLOYMENT = {
    "afd": "vllm/entrypoints has no attention-FFN server in 0.11.0 (--kv-transfer-config "
    "moves prefill KV only); no server runs attention and FFN on separate GPUs (a research "
    "deployment, moeplan run)",
    "stages": "one server runs whole layers per pipeline stage (--pipeline-parallel-size), "
    "not per-module stages",
    "dep": "no server runs FinDEP's DEP groups (a research deployment, moeplan run)",
}
#: the largest default CUDA-graph batch (vllm/config/scheduler.py, 0.11.0)
GRAPH_MAX = 512
A100_SM = 80  # compute capability 8.0: the A100 (vLLM tests its device name for "a100")


def is_a100(gpu: GPUSpec) -> bool:
    """Whether vLLM's device-name test (``"a100" in device_name``) holds for ``gpu``, read
    from its record's compute capability (module docstring)."""
    return gpu.sm_version == A100_SM


def _large_defaults(gpu: GPUSpec) -> bool:
    return gpu.mem_bytes >= 70 * GIB and not is_a100(gpu)


@dataclass(frozen=True, kw_only=True)
class VLLMBackend(EngineBackend):
    """vLLM V1 (module docstring)."""

    def default_chunk(self, gpu: GPUSpec) -> int:
        return 8192 if _large_defaults(gpu) else 2048

    def default_running(self, gpu: GPUSpec) -> int:
        return 1024 if _large_defaults(gpu) else 256

    def chunk_args(self, chunk_tokens: int | None, attn_dp: int) -> list[str]:
        """One scheduler per DP rank, each with its own ``--max-num-batched-tokens``: the
        instance total over ``attn_dp``."""
        if not chunk_tokens:
            return []
        return ["--max-num-batched-tokens", str(max(1, chunk_tokens // max(1, attn_dp)))]

    def overlap_blocker(self, pp: int, mtp: int, version: str | None = None) -> str | None:
        """vLLM 0.11's ``--async-scheduling`` with pipeline parallelism or speculative decoding
        is refused (vllm/engine/arg_utils.py ``create_engine_config``: "Async scheduling is not
        supported with pipeline-parallel-size > 1", "speculative decoding is not supported
        with async scheduling"); the rule is applied to the 0.11 line whose source was read
        (the lab's vLLM 0.10.2 ran it with ``-pp 2``)."""
        release = version or self.version
        if release is None or version_key(release)[0][:2] != (0, 11):
            return None
        if pp > 1:
            return (
                f"vLLM {release} refuses --async-scheduling with pipeline parallelism "
                f"({pp} stages; vllm/engine/arg_utils.py create_engine_config)"
            )
        if mtp:
            return (
                f"vLLM {release} refuses --async-scheduling with speculative decoding "
                "(vllm/engine/arg_utils.py create_engine_config)"
            )
        return None

    def graph_max_bs(self, ctx: MemoryContext, max_running: int | None) -> int | None:
        """vLLM 0.11.0's default ``cuda_graph_sizes``: ``min(max_num_seqs * 2, 512)`` of one DP
        engine rank (vllm/config/scheduler.py ``SchedulerConfig.__post_init__``), with
        ``max_num_seqs`` the rank's share of ``max_running`` (else its default)."""
        seqs = (
            -(-max_running // max(1, ctx.attn_dp)) if max_running else self.default_running(ctx.gpu)
        )
        return min(seqs * 2, GRAPH_MAX)

    def graph_args(self, ctx: MemoryContext, max_running: int | None) -> list[str]:
        """``--cuda-graph-sizes N``: capture ``[1, 2, 4] + range(8, N + 1, 8)``
        (vllm/config/scheduler.py ``cuda_graph_sizes``, 0.11.0)."""
        return ["--cuda-graph-sizes", str(self.graph_max_bs(ctx, max_running))]

    def fused_ep_comm(
        self, attn_dp: int, moe_ep: int, prefill: bool, hidden_bytes: float, router_bytes: float
    ) -> FusedEpComm | None:
        """``--enable-expert-parallel`` with the default all2all backend,
        ``allgather_reducescatter`` (vllm/envs.py ``VLLM_ALL2ALL_BACKEND``, its default in the
        stored 0.11-line ``envs.py``; later releases move it to ``--all2all-backend``,
        vllm/config/parallel.py ``ParallelConfig.all2all_backend``, same default).

        - No DP (``data_parallel_size == 1``): no all2all manager runs (``use_all2all`` needs
          ``dp_size > 1``); the tokens are on every TP rank, each runs its local experts and
          ``FusedMoE`` sums the outputs with ``tensor_model_parallel_all_reduce``
          (``reduce_results``; model_executor/layers/fused_moe/layer.py).
        - DP: ``AgRsAll2AllManager.dispatch`` all-gathers (``all_gatherv``) the hidden states
          and the router logits over the DP group, ``combine`` reduce-scatters
          (``reduce_scatterv``) the outputs over it (distributed/device_communicators/
          all2all.py); with TP inside each DP rank the outputs are then all-reduced over
          that TP group. The same in prefill and decode."""
        del moe_ep, prefill
        if attn_dp <= 1:
            return FusedEpComm((), (EpCollective("all_reduce", "moe", hidden_bytes),))
        combine = (
            EpCollective("reduce_scatter", "dp", hidden_bytes),
            EpCollective("all_reduce", "tp", hidden_bytes),
        )
        return FusedEpComm(
            (EpCollective("all_gather", "dp", hidden_bytes + router_bytes),), combine
        )

    def knob_args(self, knobs: Knobs, role: str = "colocated") -> list[str]:
        """``--enable-dbo``; MTP as ``--speculative-config '{"method": "deepseek_mtp",
        "num_speculative_tokens": N}'``; ``--kv-cache-dtype``; the weight offload's flags;
        ``--async-scheduling`` where the knobs turn the host overlap on (:meth:`overlap_args`);
        ``--gpu-memory-utilization``."""
        del role
        out: list[str] = []
        if knobs.tbo:
            out.append("--enable-dbo")
        if knobs.mtp:
            cfg = {"method": "deepseek_mtp", "num_speculative_tokens": knobs.mtp}
            out += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        if knobs.kv_dtype in KV_CACHE_DTYPE_FLAG:
            out += ["--kv-cache-dtype", KV_CACHE_DTYPE_FLAG[knobs.kv_dtype]]
        out += self.offload_args(knobs.offload)
        out += self.overlap_args(knobs.overlap)
        return out + self.mem_fraction_args(knobs.mem_fraction)

    def profile_bytes(
        self, model: ModelSpec, gpu: GPUSpec, rank_seqs: int | None, rank_tokens: int | None
    ) -> float:
        """The dummy sampler run of vLLM's start-up profile (v1/worker/gpu_model_runner.py
        ``profile_run`` -> ``_dummy_sampler_run`` on ``min(max_num_seqs,
        max_num_batched_tokens)`` rows of a rank, every TP rank sampling over the whole
        vocabulary): :data:`SAMPLER_BYTES_PER_LOGIT` bytes per row and vocabulary entry."""
        seqs = self.default_running(gpu) if rank_seqs is None else rank_seqs
        tokens = self.default_chunk(gpu) if rank_tokens is None else rank_tokens
        return float(SAMPLER_BYTES_PER_LOGIT * max(0, min(seqs, tokens)) * model.vocab_size)

    def expert_alignment(self, fmt: WeightFormat, gpu: GPUSpec) -> tuple[int, int]:
        """MXFP4 experts (GPT-OSS) are padded as the MoE backend vLLM picks on the GPU needs
        them (model_executor/layers/quantization/mxfp4.py, ``get_mxfp4_backend`` and
        ``Mxfp4MoEMethod.create_weights``, read at the stored copy of the 0.11 line; every
        release is taken to pad alike): below SM90 the Marlin backend (its kernel needs
        ``n % 256 == 0`` and ``k % 128 == 0``): intermediate per rank to 128, hidden to 256;
        on SM100 with FlashInfer (a dependency of the CUDA wheels) the TRT-LLM-gen BF16
        backend: both to 256; elsewhere (SM90, SM103, SM120) the Triton backend: the intermediate
        to 64. GPT-OSS (hidden and intermediate 2,880) on an A100 at one rank thus holds
        experts of 3,072 x 2,944: +9.0 % of their bytes."""
        if fmt.name != "mxfp4":
            return (1, 1)
        sm = gpu.sm_version
        if sm is None:
            return (1, 1)
        if sm < 90:
            return (MARLIN_INTER_ALIGN, MARLIN_HIDDEN_ALIGN)
        if sm == FI_MXFP4_SM:
            return (FI_MXFP4_ALIGN, FI_MXFP4_ALIGN)
        return (TRITON_MXFP4_INTER_ALIGN, 1)

    def moe_runner_env(
        self, moe_dtype: str, gpu_sm: int | None, version: str | None = None
    ) -> list[tuple[str, str]]:
        """NVFP4 experts with FP4 tensor cores: the pinned 0.11.0 runs its own CUTLASS fp4 MoE
        unless ``VLLM_USE_FLASHINFER_MOE_FP4=1`` (envs.py:1179, read by
        quantization/utils/flashinfer_fp4_moe.py:28), and ``VLLM_FLASHINFER_MOE_BACKEND=latency``
        selects FlashInfer's TRT-LLM-gen kernels (quantization/utils/flashinfer_utils.py:242):
        the runner 0.24.0 picks first and its kernel tables measured (``Nvfp4Moe``); a release
        whose default already is that runner, or a GPU below SM100 (the priced Marlin fallback
        by default), needs nothing."""
        nv = self.nvfp4_moe(version)
        if moe_dtype != NVFP4 or gpu_sm is None or gpu_sm < FP4_TENSOR_CORE_SM:
            return []
        if nv is None or nv.runner != "cutlass":
            return []
        return [("VLLM_USE_FLASHINFER_MOE_FP4", "1"), ("VLLM_FLASHINFER_MOE_BACKEND", "latency")]

    def dynamo_args(self, argv: list[str], role: str) -> list[str]:
        """``vllm serve MODEL ARGS`` as ``--model MODEL ARGS`` (Dynamo's vLLM worker parses
        AsyncEngineArgs); the prefill / decode role is the service's ``subComponentType``,
        from which Dynamo writes the worker's role flag (its operator drops the older
        ``--is-prefill-worker`` and sets ``--disaggregation-mode``)."""
        del role
        return ["--model", argv[2], *argv[3:]]

    def knob_env(self, knobs: Knobs | None, role: str = "colocated") -> list[tuple[str, str]]:
        """DeepEP's kernels by role: ``deepep_high_throughput`` (prefill-heavy instances) or
        ``deepep_low_latency`` (decode instances), chosen in vLLM 0.11.0 by the environment
        variable ``VLLM_ALL2ALL_BACKEND`` (vllm/envs.py; 0.11.0's ``vllm serve`` has no
        ``--all2all-backend`` flag: its parser refuses it, ``bench/check_exports.py``)."""
        if knobs is None or knobs.a2a != "deepep":
            return []
        mode = "deepep_low_latency" if role == "decode" else "deepep_high_throughput"
        return [("VLLM_ALL2ALL_BACKEND", mode)]


VLLM = VLLMBackend(
    name="vllm",
    label="vLLM",
    kernel_table="vllm",
    version=VERSION,
    flag_line="0.11+",  # --eplb-config JSON (EPLBConfig in vllm/config/parallel.py since 0.10.2)
    scheduler="mixed",
    # --async-scheduling (vllm-project/vllm PR #19970; SchedulerConfig.async_scheduling False
    # in 0.11.0); on by default after PR #27614 (the last item of the plan in vllm-project/vllm
    # issue #27679, merged after PRs #31332 / #31373 of December 2025): moeplan takes 0.14.0,
    # the first release of 2026, as the first with it, not read from a stored release
    overlap_since="0.14.0",
    overlap_on_flag="--async-scheduling",
    overlap_off_flag="--no-async-scheduling",
    budgets_per_dp_rank=True,
    # vllm config: max_num_batched_tokens must cover max_num_seqs
    chunk_above_running=True,
    # --all2all-backend deepep_* under --enable-expert-parallel
    # (docs/serving/expert_parallel_deployment.md)
    deepep=True,
    caps=VLLM_CAPS,
    # DeepGEMM grouped GEMMs (vllm/model_executor/layers/fused_moe/deep_gemm_moe.py)
    shares_wideep_tables=True,
    # vllm/model_executor/models/registry.py of 0.11.0
    missing_model_classes=frozenset(
        {
            "DeepseekV4ForCausalLM",
            "Qwen3_5MoeForConditionalGeneration",
            "KimiK25ForConditionalGeneration",
            "GlmMoeDsaForCausalLM",
            "Gemma4ForConditionalGeneration",
            "MiniMaxM3ForCausalLM",
        }
    ),
    model_registry="model_executor/models/registry.py",
    pp_partition_env="VLLM_PP_LAYER_PARTITION",  # vllm/distributed/utils.py get_pp_indices
    # vllm/config/offload.py PrefetchOffloadConfig (offload_group_size, offload_num_in_group,
    # offload_prefetch_step; the prefetch backend is chosen when the group size is set) and
    # vllm/engine/arg_utils.py's offload argument group (vllm-project/vllm PR #29941, 0.13+)
    offload_flags=("--offload-group-size", "--offload-num-in-group", "--offload-prefetch-step"),
    # vllm/env_override.py (0.9 / 0.10 line, stored copy): "NCCL requires NCCL_CUMEM_ENABLE to
    # work with multi-node NVLink, typically on GB200-NVL72 systems"; vLLM forces it to 0
    # unless /dev/nvidia-caps-imex-channels exists, and keeps an explicitly set value
    # ("NCCL_CUMEM_ENABLE is set to %s, skipping override"); NCCL_MNNVL_ENABLE=1 is NCCL's own
    # switch for the multi-node NVLink transport (NCCL environment variables)
    mnnvl_env=(("NCCL_MNNVL_ENABLE", "1"), ("NCCL_CUMEM_ENABLE", "1")),
    deployments=DEPLOYMENTS,
    no_deployment=VLLM_NO_DEPLOYMENT,
    # vllm/v1/worker/gpu_worker.py determine_available_memory (0.11.0): the KV pool is
    # total memory x gpu_memory_utilization less weights, profiled peak activations and
    # non-torch memory
    mem_fraction_rule="total",
    # the non-torch memory that profile charges is its increase over the snapshot taken
    # before the model loads, not the CUDA context: "non_torch_memory takes 0.16GiB" (H100,
    # one GPU; vllm-project/vllm PR #12126's log, 2025-01-16) and 0.20GiB (several workers
    # of 24 GiB; PR #14447's log, 2025-04-12): the larger, 0.2 GiB
    pool_reserve=VLLM_NON_TORCH_BYTES,
    # the hybrid KV cache manager (on unless --disable-hybrid-kv-cache-manager; 0.10 and
    # later) keeps one block pool for full and sliding-window layers, and a sliding-window
    # layer frees the blocks wholly before its window (v1/core/single_type_kv_cache_manager.py
    # SlidingWindowManager.remove_skipped_blocks); blocks of 16 tokens (CacheConfig
    # block_size on CUDA)
    window_block=VLLM_BLOCK_TOKENS,
    # vllm/config/cache.py CacheConfig ``gpu_memory_utilization: float = Field(default=0.9,
    # gt=0, le=1)`` (0.11.0)
    default_mem_fraction=0.9,
    # CacheConfig refuses a utilisation above 1; CUDA graphs are captured after the KV pool
    # is allocated and not profiled in 0.11.0, so the rest of the GPU must hold them: the
    # search stops at 0.95
    max_mem_fraction=0.95,
    mem_fraction_flag="--gpu-memory-utilization",
    launch_module="moeplan.export.vllm",
    # vllm/config/scheduler.py SchedulerConfig.max_num_seqs: one DP engine rank's cap
    running_flag="--max-num-seqs",
    image=f"vllm/vllm-openai:v{VERSION}",  # docker/Dockerfile vllm-openai target, per release
    # ai-dynamo/dynamo components/src/dynamo/vllm: vLLM's AsyncEngineArgs, the model as --model
    dynamo_worker=("vllm", "dynamo.vllm"),
)
