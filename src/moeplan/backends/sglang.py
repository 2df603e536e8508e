"""SGLang: the prefill-first scheduler, its defaults and launch facts (sources per field).

Scheduler (python/sglang/srt/server_args.py and managers/scheduler.py):

- ``chunked_prefill_size`` by GPU memory: 2048 below 35 GiB, 8192 below 160 GiB, else 16384
  (server_args.py); the prefill-first scheduler;
- ``max_running_requests = max_total_num_tokens // 2`` per DP rank, capped by its request
  pool (4096 here) and, for models with recurrent state (linear / state-space layers), by
  the states its ``mamba_full_memory_ratio`` share of the cache memory holds;
- ``new_token_ratio`` 0.7 of the running requests' outstanding output reserved when a
  prefill batch is formed (its initial value; SGLang decays it towards 0.1 while nothing is
  retracted — kept constant, a conservative departure), while a request admitted into the
  batch being formed reserves its whole outstanding output (``PrefillAdder``:
  ``_get_running_request_total_token_offset`` charges a running request
  ``min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS) * new_token_ratio``,
  ``add_one_req`` checks and ``_update_prefill_budget`` charges a new one its prompt plus
  ``min(max_new_tokens, CLIP_MAX_NEW_TOKENS)`` unscaled; managers/schedule_policy.py, read at
  the stored ``00550cd1``; the 4,096-token clip is above every output moeplan is asked for
  but is not applied).

Launch facts of the pinned 0.5.23 release: attention DP per architecture
(:data:`ATTN_DP`), the KV page size some architectures force (:data:`PAGE_SIZE`), the
layer-partition variable of a pipeline, the model classes it lacks.
"""

from __future__ import annotations

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
from moeplan.backends.sglang_caps import SGLANG_CAPS
from moeplan.specs import GPUSpec
from moeplan.specs.cluster import FP4_TENSOR_CORE_SM

VERSION = "0.5.23"
RUNNING_CAP = 4096
NEW_TOKEN_RATIO = 0.7
#: server_args ``mamba_full_memory_ratio`` (0.9): models with recurrent state give
#: ratio / (1 + ratio) of the cache memory to the states (model_runner's mamba budget)
STATE_RATIO = 0.9

#: architectures whose SGLang 0.5.23 attention splits heads by the attention-TP size
#: (sglang python/sglang/srt/models/<file>.py: the attention class divides its heads by
#: ``get_parallel().attn_tp_size``)
ATTN_DP: frozenset[str] = frozenset(
    {
        "DeepseekV2ForCausalLM",  # deepseek_v2.py (attn_tp_size)
        "DeepseekV3ForCausalLM",  # deepseek_v2.py (same classes)
        "DeepseekV32ForCausalLM",  # deepseek_v2.py (same classes)
        "DeepseekV4ForCausalLM",  # deepseek_v4.py
        "KimiK25ForConditionalGeneration",  # kimi_k25.py: the DeepseekV3ForCausalLM text model
        "Qwen2MoeForCausalLM",  # qwen2_moe.py Qwen2MoeAttention
        "Qwen3MoeForCausalLM",  # qwen3_moe.py Qwen3MoeAttention
        "Qwen3VLMoeForConditionalGeneration",  # qwen3_vl_moe.py: qwen3_moe's decoder layer
        "MiMoV2FlashForCausalLM",  # mimo_v2.py:688 attn_tp_size
        "Step3p7FlashForCausalLM",  # step3p7.py: step3p5.py:295 attn_tp_size
        "MiniMaxM2ForCausalLM",  # minimax_m2.py:643 MiniMaxM2Attention attn_tp_size
        "Qwen3_5MoeForConditionalGeneration",  # qwen3_5.py
        "GptOssForCausalLM",  # gpt_oss.py GptOssAttention
        "GlmMoeDsaForCausalLM",  # glm4_moe.py
        # glm4_moe.py Glm4MoeAttention.__init__: num_heads = total_num_heads // attn_tp_size
        # (read at sgl-project/sglang 005ffc65)
        "Glm4MoeForCausalLM",
        "Llama4ForConditionalGeneration",  # mllama4.py: the llama4.py Llama4Attention
        "NemotronHForCausalLM",  # nemotron_h.py NemotronHAttention
        "MiniMaxM3ForCausalLM",  # minimax_m3.py
    }
)
#: architectures whose SGLang 0.5.23 attention splits heads by the whole ``tp_size``
#: (``get_parallel().tp_size``): the class that does it, for the message
NO_ATTN_DP = {
    "MixtralForCausalLM": "python/sglang/srt/models/mixtral.py MixtralAttention",
    "Gemma4ForConditionalGeneration": "python/sglang/srt/models/gemma4_causal.py Gemma4Attention",
}
#: SGLang 0.5.23 KV page size forced per architecture
#: (python/sglang/srt/arg_groups/model_overrides/deepseek_v4.py: ``page_size = 256``). With
#: attention DP each rank's chunk is ``--chunked-prefill-size // attn_dp``
#: (arg_groups/parallel_hook.py) and must be a multiple of the page size
#: (arg_groups/validation_hook.py): the memory default (4096 below 60 GiB per GPU,
#: arg_groups/memory_hook.py) over attention DP 32 is 128, so the export sets the chunk.
PAGE_SIZE = {"DeepseekV4ForCausalLM": 256}
LAUNCH_DEFAULT_CHUNK = 4096  # memory_hook.py: chunked_prefill_size for 40-60 GiB GPUs
#: the deployment kinds SGLang 0.5.23 launches: replicas of one server, and prefill/decode
#: pools (python/sglang/srt/server_args.py ``--disaggregation-mode``, choices ``null``,
#: ``prefill``, ``decode``; KV moved by ``--disaggregation-transfer-backend``)
DEPLOYMENTS = frozenset({"colocated", "pd"})
#: the kinds it does not launch, with the rule (attention-FFN disaggregation exists only in
#: forks' ``--afd-perspective attn|ffn``, not in sgl-project/sglang's server_args.py)
SGLANG_NO_DEPLOYMENT = {
    "afd": "server_args.py --disaggregation-mode takes null, prefill or decode only; no "
    "server runs attention and FFN on separate GPUs (a research deployment, moeplan run)",
    "stages": "one server runs whole layers per pipeline stage (--pp-size), not per-module stages",
    "dep": "no server runs FinDEP's DEP groups (a research deployment, moeplan run)",
}
#: KV cache dtype spellings (``--kv-cache-dtype``; ``auto``: no flag, the engine's default)
KV_CACHE_DTYPE_FLAG = {"fp8": "fp8_e4m3", "bf16": "bf16"}


MIB = 1024**2
#: the decode CUDA-graph batch flag of 0.5.23 (arg_groups/fields/exec_.py)
GRAPH_FLAG = "--cuda-graph-max-bs-decode"


def decode_graph_max_bs(gpu_mib: float, tp: int) -> int:
    """SGLang's default largest decode CUDA-graph batch by GPU memory (MiB) and ``tp_size``
    (python/sglang/srt/arg_groups/memory_hook.py ``handle_gpu_memory_settings``)."""
    if gpu_mib < 20 * 1024:
        return 8
    if gpu_mib < 35 * 1024:
        return 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def graph_reserve_mib(ctx: MemoryContext, padding: bool = True) -> float:
    """What SGLang reserves outside its static pool besides activations (MiB): 512 of
    metadata, ``tp_size x pp_size / 8`` GiB, the decode CUDA graphs (2 x max_bs), the
    prefill graphs (1.5 GiB with MLA), 2 GiB of DeepEP buffers on a decoding instance and,
    with ``padding``, DP attention's padding (3 x max_bs x dp, 1.5 x more above max_bs
    300: "DP attention needs more padding ... likely due to some inefficiencies in torch
    allocator") (python/sglang/srt/arg_groups/memory_hook.py ``handle_gpu_memory_settings``,
    ``reserve_for_graph_mb``, ``reserve_for_deepep_a2a_mb``, read at commit 031ed82 of the
    0.5.2x line). Departures: a non-MLA prefill graph's 8 MiB per captured batch size and
    the breakable-graph DeepEP GiB are left out."""
    max_bs = decode_graph_max_bs(ctx.gpu.mem_bytes / MIB, ctx.tp)
    decodes = ctx.role != "prefill"
    out = 512 + ctx.tp * ctx.pp / 8 * 1024
    if decodes:
        out += max_bs * 2
        if ctx.attn_dp > 1 and padding:
            out += max_bs * ctx.attn_dp * 3
            if max_bs > 300:
                out += max_bs * ctx.attn_dp * 1.5
    if ctx.role != "decode" and ctx.mla:
        out += 1.5 * 1024
    if decodes and ctx.deepep:
        out += 2 * 1024
    return out


def default_mem_fraction_static(ctx: MemoryContext) -> float:
    """SGLang's ``mem_fraction_static`` when none is given (memory_hook.py
    ``handle_gpu_memory_settings``): ``round((gpu_mem - reserved_mem) / gpu_mem, 3)`` (MiB)
    with ``reserved_mem`` = 1.5 MiB per activation token (the instance's
    ``chunked_prefill_size``, or a decode server's running batch x draft tokens; at least
    2048) + :func:`graph_reserve_mib`, at least 10 GiB on GPUs above 60 GiB (the floor applies
    before the DeepEP term). No post-capture sizing, no VLM factor. It can be <= 0 (a large
    instance chunk, DP attention's padding on many ranks): SGLang then has no pool unless the
    launch gives the fraction, as moeplan's launch files do."""
    gpu_mib = ctx.gpu.mem_bytes / MIB
    max_bs = decode_graph_max_bs(gpu_mib, ctx.tp)
    act = max(max_bs * (ctx.mtp + 1), 2048) if ctx.role == "decode" else max(ctx.chunk, 2048)
    deepep = 2 * 1024 if ctx.role != "prefill" and ctx.deepep else 0
    reserved = act * 1.5 + graph_reserve_mib(ctx) - deepep
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved - deepep) / gpu_mib, 3)


@dataclass(frozen=True, kw_only=True)
class SGLangBackend(EngineBackend):
    """SGLang (module docstring)."""

    def mem_fraction(self, ctx: MemoryContext) -> float:
        """:func:`default_mem_fraction_static`."""
        return default_mem_fraction_static(ctx)

    def mem_headroom(self, ctx: MemoryContext) -> float:
        """What any fraction must leave beside a step (bytes): :func:`graph_reserve_mib`
        without DP attention's padding, which SGLang's own comment puts down to allocator
        inefficiency (on 32 DP ranks it alone is 72 GiB, more than an H100 holds)."""
        return graph_reserve_mib(ctx, padding=False) * MIB

    def default_chunk(self, gpu: GPUSpec) -> int:
        """server_args.py by GPU memory (MiB): ``if gpu_mem < 35 * 1024:
        chunked_prefill_size = 2048`` / ``elif gpu_mem < 160 * 1024: 8192`` / ``else: 16384``."""
        mem = gpu.mem_bytes
        return 2048 if mem < 35 * GIB else 8192 if mem < 160 * GIB else 16384

    def required_chunk(self, architecture: str, attn_dp: int) -> int | None:
        """``--chunked-prefill-size`` SGLang needs for ``architecture`` at attention DP
        ``attn_dp`` (None: its default works): the smallest multiple of ``page x attn_dp``
        at or above the memory default."""
        page = PAGE_SIZE.get(architecture)
        if page is None or attn_dp <= 1:
            return None
        unit = page * attn_dp
        return -(-LAUNCH_DEFAULT_CHUNK // unit) * unit

    def chunk_args(self, chunk_tokens: int | None, attn_dp: int) -> list[str]:
        """``--chunked-prefill-size`` takes the instance total and divides it by the DP size
        under DP attention (server_args.py)."""
        del attn_dp
        return ["--chunked-prefill-size", str(chunk_tokens)] if chunk_tokens else []

    def fused_ep_comm(
        self, attn_dp: int, moe_ep: int, prefill: bool, hidden_bytes: float, router_bytes: float
    ) -> FusedEpComm | None:
        """``--moe-a2a-backend none`` (SGLang's default) with ``--ep-size``: the MoE layer's
        tokens are gathered whole on every rank of the TP group (= the MoE group), each rank
        runs its local experts (``token_dispatcher/standard.py`` ``StandardDispatcher``:
        other ranks' experts map to -1), and the outputs are summed over the group.

        - Attention TP: ``communicator.py`` ``_gather_hidden_states_and_residual`` with
          ``attn_dp_size == 1`` is the attention output's ``tensor_model_parallel_all_reduce``
          (the tokens are then on every rank: no dispatch); the MoE block's
          ``tensor_model_parallel_all_reduce`` of its output is the combine (models/
          deepseek_v2.py ``DeepseekV2MoE.forward_normal``).
        - Attention DP (``ScatterMode.FULL`` for a sparse MLP without an a2a backend,
          ``communicator.py`` ``LayerScatterModes._compute_mlp_mode``): ``dp_gather_partial``
          into the global buffer, by ``DpPaddingMode.get_dp_padding_mode``
          (``dp_attention.py``): a prefill batch (``is_extend_in_batch`` and ``dp_size > 1``)
          is ``SUM_LEN``, gathered by ``_dp_gather_via_all_reduce`` (an all-reduce of the
          zero-padded buffer of every rank's tokens); a decode batch of even ranks
          (``sum_len * 2 >= max_len * dp_size``) is ``MAX_LEN``, gathered by
          ``_dp_gather_via_all_gather``. The combine is a reduce-scatter of the outputs
          (``moe/utils.py`` ``should_use_dp_reduce_scatterv``, when ``moe_ep_size ==
          attn_dp_size``; ``communicator.py`` ``_scatter_hidden_states``'s
          ``dp_reduce_scatter_tensor`` under ``MAX_LEN``), else the MoE's all-reduce then a
          local ``dp_scatter``.

        Read from the stored main branch (``communicator.py``, ``dp_attention.py``,
        ``moe/utils.py``); a stored 0.5-line ``communicator.py`` (the one with
        ``get_global_server_args``) has the same gather, and under ``SUM_LEN`` the MoE's
        all-reduce then ``dp_scatter`` as the combine. The hidden states travel in bf16: the
        FP4 all-gather (``should_use_flashinfer_cutlass_moe_fp4_allgather``) runs only under
        ``--moe-runner-backend flashinfer_cutlass``, and the NVFP4 runner moeplan prices
        and exports is ``flashinfer_trtllm`` (:meth:`moe_runner_args`)."""
        del router_bytes
        if attn_dp <= 1:
            return FusedEpComm((), (EpCollective("all_reduce", "moe", hidden_bytes),))
        gather = "all_reduce" if prefill else "all_gather"
        combine = "reduce_scatter" if moe_ep == attn_dp or not prefill else "all_reduce"
        return FusedEpComm(
            (EpCollective(gather, "moe", hidden_bytes),),
            (EpCollective(combine, "moe", hidden_bytes),),
        )

    def moe_runner_args(
        self, moe_dtype: str, gpu_sm: int | None, version: str | None = None
    ) -> list[str]:
        """NVFP4 experts: ``--moe-runner-backend`` pinned to what
        :class:`~moeplan.backends.capabilities.Nvfp4Moe` says ``auto`` resolves to and the
        tables price: ``flashinfer_trtllm`` with FP4 tensor cores (SM >= 100), ``marlin``
        (the W4A16 fallback) below."""
        nv = self.nvfp4_moe(version)
        if moe_dtype != NVFP4 or nv is None or gpu_sm is None:
            return []
        runner = nv.runner if gpu_sm >= FP4_TENSOR_CORE_SM else "marlin"
        return ["--moe-runner-backend", runner]

    def deepep_ll_flags(self, runner: str) -> list[str]:
        """``--moe-runner-backend RUNNER --deepep-mode low_latency``
        (arg_groups/fields/exec_.py:884 ``moe_runner_backend``, :898 ``deepep_mode``, 0.5.23;
        server_args.py ``--deepep-mode`` from 0.5.3)."""
        return ["--moe-runner-backend", runner, "--deepep-mode", "low_latency"]

    def graph_max_bs(self, ctx: MemoryContext, max_running: int | None) -> int | None:
        """The decode CUDA-graph batch the memory model reserves for
        (:func:`decode_graph_max_bs`); None on a prefill server, whose decode graphs SGLang
        disables (arg_groups/cuda_graph_hook.py ``apply_cuda_graph_disaggregation_roles``,
        0.5.23)."""
        del max_running
        if ctx.role == "prefill":
            return None
        return decode_graph_max_bs(ctx.gpu.mem_bytes / MIB, ctx.tp)

    def graph_args(self, ctx: MemoryContext, max_running: int | None) -> list[str]:
        """``--cuda-graph-max-bs-decode`` (arg_groups/fields/exec_.py
        ``cuda_graph_max_bs_decode``, 0.5.23)."""
        n = self.graph_max_bs(ctx, max_running)
        return [] if n is None else [GRAPH_FLAG, str(n)]

    def knob_args(self, knobs: Knobs, role: str = "colocated") -> list[str]:
        """``--enable-two-batch-overlap``; MTP as ``--speculative-algorithm EAGLE
        --speculative-num-steps N --speculative-eagle-topk 1 --speculative-num-draft-tokens
        N+1`` (DeepSeek's NextN module is loaded as the EAGLE draft); ``--kv-cache-dtype``; the
        weight offload's flags; ``--mem-fraction-static``."""
        del role
        out: list[str] = []
        if knobs.tbo:
            out.append("--enable-two-batch-overlap")
        if knobs.mtp:
            n = str(knobs.mtp)
            out += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", n]
            out += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens"]
            out.append(str(knobs.mtp + 1))
        if knobs.kv_dtype in KV_CACHE_DTYPE_FLAG:
            out += ["--kv-cache-dtype", KV_CACHE_DTYPE_FLAG[knobs.kv_dtype]]
        out += self.offload_args(knobs.offload)
        out += self.overlap_args(knobs.overlap)
        return out + self.mem_fraction_args(knobs.mem_fraction)


SGLANG = SGLangBackend(
    name="sglang",
    label="SGLang",
    kernel_table="sglang",
    version=VERSION,
    flag_line="0.5.2x",  # sgl-project/sglang PR #41818 (--attn-dp-size)
    scheduler="prefill-first",
    # the overlap scheduler, on since v0.4 (lmsys.org/blog/2024-12-04-sglang-v0-4, "zero-overhead
    # batch scheduler"); server_args.py --disable-overlap-schedule turns it off
    overlap_since="",
    overlap_off_flag="--disable-overlap-schedule",
    running_cap=RUNNING_CAP,
    new_token_ratio=NEW_TOKEN_RATIO,
    admission_token_ratio=1.0,  # schedule_policy.py PrefillAdder.add_one_req (docstring)
    state_ratio=STATE_RATIO,
    deepep=True,  # --moe-a2a-backend deepep (docs/advanced_features/expert_parallelism.md)
    caps=SGLANG_CAPS,
    shares_wideep_tables=True,  # the wide-EP MoE tables were measured on SGLang
    attn_dp_architectures=ATTN_DP,
    no_attn_dp=NO_ATTN_DP,
    # python/sglang/srt/models/*.py EntryClass: 0.5.23 has MiniMaxM3SparseForCausalLM only
    missing_model_classes=frozenset({"MiniMaxM3ForCausalLM"}),
    model_registry="python/sglang/srt/models",
    # python/sglang/srt/distributed/utils.py get_pp_indices
    pp_partition_env="SGLANG_PP_LAYER_PARTITION",
    # python/sglang/srt/server_args.py --offload-group-size / --offload-num-in-group /
    # --offload-prefetch-step / --offload-mode (read by utils/offloader.py create_offloader:
    # OffloaderV2 when the group size is > 0); mode cpu: weights in pinned host memory, as the
    # GB200 NVFP4 prefill of sgl-project/sglang issue #10903 runs it
    offload_flags=(
        "--offload-group-size",
        "--offload-num-in-group",
        "--offload-prefetch-step",
        "--offload-mode",
        "cpu",
    ),  # fmt: skip
    # sgl-project/sglang @ 001067ff python/sglang/srt/entrypoints/engine.py
    # _set_envs_and_config: on a GB200/GB300 (is_mnnvl_fabric_device) with nnodes > 1 it
    # setdefaults NCCL_CUMEM_ENABLE=1 and NCCL_MNNVL_ENABLE=1 ("cross-node NVLink needs NCCL's
    # cuMem-based buffers and MNNVL transport"; user-set values win), and otherwise forces
    # NCCL_CUMEM_ENABLE to int(--enable-symm-mem) = 0 when unset: exported, the launch does
    # not depend on the device-name check of the release it meets
    mnnvl_env=(("NCCL_MNNVL_ENABLE", "1"), ("NCCL_CUMEM_ENABLE", "1")),
    deployments=DEPLOYMENTS,
    no_deployment=SGLANG_NO_DEPLOYMENT,
    # model_runner_kv_cache_mixin.py profile_max_num_token (cost.memory.KVPool)
    mem_fraction_rule="static",
    # memory_hook.py: the fraction SGLang takes when it cannot read the GPU's memory
    max_mem_fraction=0.95,
    mem_fraction_flag="--mem-fraction-static",
    launch_module="moeplan.export.sglang",
    # arg_groups/fields/schedule.py max_running_requests: the instance's total, which each
    # attention-DP rank divides (model_executor/pool_configurator.py
    # ``max_running_requests // attn_dp_size``, 0.5.23)
    running_flag="--max-running-requests",
    image=f"lmsysorg/sglang:v{VERSION}",  # docker/Dockerfile, published per release tag
    # ai-dynamo/dynamo components/src/dynamo/sglang: SGLang's ServerArgs after the module
    dynamo_worker=("sglang", "dynamo.sglang"),
)
