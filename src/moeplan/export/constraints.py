"""What SGLang and vLLM accept, per pinned version, as data; and checks of an argument list.

Every rule below names its source (read for facts; nothing is copied). The exports in
:mod:`moeplan.export.sglang` and :mod:`moeplan.export.vllm` consult these tables before they
emit a flag, and the tests run :func:`check_sglang` / :func:`check_vllm` on every argument list
the exports produce: an argument list that breaks a rule is a bug, and a strategy the engine
cannot express is said in plain words instead.

Pinned versions (each engine backend's ``flag_line``, :mod:`moeplan.backends`):

- **SGLang 0.5.2x** (the line the exports target): ``--attn-dp-size N`` sets attention DP; the older
  ``--dp-size N --enable-dp-attention`` spelling is deprecated and resolves to it (sgl-project/
  sglang PR #41818 "Add --attn-dp-size and deprecate --enable-dp-attention", and its test
  ``--dp-size N --enable-dp-attention`` -> ``--attn-dp-size N``). ``SGLANG_LEGACY`` is the same
  rule set for releases before that PR, which know only the old spelling.
- **vLLM 0.11+** (``--eplb-config`` JSON; ``EPLBConfig`` in vllm/config/parallel.py since 0.10.2).

Facts encoded (sources):

- SGLang ``--moe-a2a-backend deepep`` needs ``ep_size == tp_size``; hybrid MoE TP x EP runs
  only on the ``none`` backend (sglang docs/advanced_features/expert_parallelism.md).
  ``tp_size % ep_size == 0`` (same page). DeepEP itself needs SM90 GPUs, NVLink with full P2P
  between every pair of GPUs in a node, and RDMA between nodes (deepseek-ai/DeepEP README,
  "Requirements"); which model families and expert dtypes have SGLang's DeepEP MoE path is the
  backend's capability table (:meth:`moeplan.backends.EngineBackend.deepep_blocker`).
- SGLang ``--init-expert-location FILE``: ``.json`` read with ``json.loads`` and a
  ``physical_to_logical_map`` [layers, physical experts] (srt/eplb/expert_location.py,
  ``compute_initial_expert_location_metadata``); physical experts = experts +
  ``--ep-num-redundant-experts``, an equal number per EP rank; redundant experts need EP > 1.
- SGLang multi-node: ``--nnodes --node-rank --dist-init-addr`` on every node; ``tp*pp`` GPUs.
- vLLM: ``--enable-expert-parallel`` makes the MoE group all EP with EP = TP x DP
  (docs/serving/expert_parallel_deployment.md); ``--enable-eplb`` needs
  ``--enable-expert-parallel``, TP x DP > 1 and a CUDA/ROCm device, and
  ``num_redundant_experts`` > 0 needs EPLB (ParallelConfig validation); EPLB runs only on models
  implementing vLLM's ``MixtureOfExperts`` interface (DeepSeek V2/V3, Qwen3-MoE; not
  ``GptOssForCausalLM``, whose class lacks it). Multi-node DP: ``--data-parallel-size-local``,
  ``--data-parallel-address``, ``--data-parallel-rpc-port``, and on other nodes
  ``--data-parallel-start-rank`` (= cumulative local DP) with ``--headless``.

The GPU facts (compute capability, NCCL, DeepEP support) are the cluster preset's GPU record
(:mod:`moeplan.specs.gpu`, each with its source); a GPU whose record does not state DeepEP
support (``gpu-96g``: its source does not name the GPU) is treated as unsupported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from moeplan.backends.sglang import SGLANG as SGLANG_BACKEND
from moeplan.backends.versions import version_key
from moeplan.backends.vllm import VLLM as VLLM_BACKEND
from moeplan.cost.a2a import (  # noqa: E402,F401
    DEEPEP_MIN_SM,
    FULL_P2P_INTRA,
    RDMA_INTER,
    GpuFacts,
    deepep_hardware_blockers,
)
from moeplan.export.launch_facts import sglang_ep_blocker
from moeplan.specs import ClusterSpec, ModelSpec

VLLM_EPLB_ARCHITECTURES = frozenset(
    {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM"}
)


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineVersion:
    """One pinned engine release: its name, version text and the flag spellings it accepts."""

    engine: str
    version: str
    attn_dp_flag: str  # "--attn-dp-size" or the legacy "--dp-size" + "--enable-dp-attention"
    known_flags: frozenset[str]
    source: str


_SGLANG_COMMON = frozenset(
    {
        "--model-path",
        "--tp-size",
        "--ep-size",
        "--pp-size",
        "--moe-a2a-backend",
        "--init-expert-location",
        "--ep-num-redundant-experts",
        "--enable-eplb",
        "--enable-two-batch-overlap",
        "--disable-overlap-schedule",  # server_args.py ServerArgs.disable_overlap_schedule
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--kv-cache-dtype",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--trust-remote-code",
        "--host",
        "--port",
        "--base-gpu-id",
        "--disaggregation-mode",
        "--disaggregation-transfer-backend",
        "--disaggregation-bootstrap-port",
        "--chunked-prefill-size",
        "--mem-fraction-static",  # server_args.py ServerArgs.mem_fraction_static
        "--max-running-requests",  # arg_groups/fields/schedule.py (0.5.23)
        "--disaggregation-ib-device",  # arg_groups/fields/disagg.py (0.5.23)
        # server_args.py --deepep-mode (0.5.3: :2193); arg_groups/fields/exec_.py:898 (0.5.23)
        "--deepep-mode",
    }
)
SGLANG_PINNED = EngineVersion(
    engine=SGLANG_BACKEND.name,
    version=str(SGLANG_BACKEND.flag_line),
    attn_dp_flag="--attn-dp-size",
    # --moe-runner-backend: server_args.py ServerArgs.moe_runner_backend (0.5.14, 0.5.23)
    known_flags=_SGLANG_COMMON
    | {"--attn-dp-size", "--moe-runner-backend", "--cuda-graph-max-bs-decode"},
    source="sgl-project/sglang PR #41818 (--attn-dp-size)",
)
SGLANG_LEGACY = EngineVersion(
    engine="sglang",
    version="0.5.x before PR #41818",
    attn_dp_flag="--enable-dp-attention",
    # server_args.py ServerArgs.cuda_graph_max_bs (one size for every phase before the
    # per-phase cuda_graph_config of the 0.5.2x line)
    known_flags=_SGLANG_COMMON | {"--dp-size", "--enable-dp-attention", "--cuda-graph-max-bs"},
    source="sglang server_args.py (enable_dp_attention, dp_size)",
)
#: the first release of the pinned flag line (SGLang ``flag_line`` 0.5.2x, whose flags were read
#: from 0.5.23); a release asked below it gets :data:`SGLANG_LEGACY`'s spelling, which 0.5.23
#: still accepts (server_args.py ``DeprecatedStoreTrueAction`` for --enable-dp-attention).
#: The release that introduced --attn-dp-size (PR #41818) was not pinned down more closely
SGLANG_LINE_START = "0.5.20"
#: the pinned line's spelling -> the legacy spelling of the same setting
SGLANG_LEGACY_RENAMES = {"--cuda-graph-max-bs-decode": "--cuda-graph-max-bs"}


def sglang_version(requested: str | None) -> EngineVersion:
    """The SGLang flag spelling of the release ``requested`` (``--engine-version``; None:
    the pinned line)."""
    if requested is None or version_key(requested) >= version_key(SGLANG_LINE_START):
        return SGLANG_PINNED
    return SGLANG_LEGACY


VLLM_PINNED = EngineVersion(
    engine=VLLM_BACKEND.name,
    version=str(VLLM_BACKEND.flag_line),
    attn_dp_flag="--data-parallel-size",
    known_flags=frozenset(
        {
            "--tensor-parallel-size",
            "--data-parallel-size",
            "--pipeline-parallel-size",
            "--enable-expert-parallel",
            "--enable-eplb",
            "--eplb-config",
            "--data-parallel-size-local",
            "--data-parallel-address",
            "--data-parallel-rpc-port",
            "--data-parallel-start-rank",
            "--headless",
            "--distributed-executor-backend",
            "--trust-remote-code",
            "--enable-dbo",
            "--async-scheduling",  # vllm/config/scheduler.py SchedulerConfig.async_scheduling
            "--speculative-config",
            "--kv-cache-dtype",
            "--host",
            "--port",
            "--kv-transfer-config",
            "--max-num-batched-tokens",
            "--gpu-memory-utilization",  # vllm/config/cache.py CacheConfig
            "--max-num-seqs",  # vllm/config/scheduler.py SchedulerConfig (0.11.0)
            "--cuda-graph-sizes",  # vllm/config/scheduler.py SchedulerConfig (0.11.0)
        }
    ),
    source="vllm docs/serving/expert_parallel_deployment.md, config/parallel.py",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """What the constraints depend on: the model's architecture and the machines."""

    architecture: str
    num_experts: int
    gpu: str
    gpu_sm: int | None  # compute capability major*10 + minor (None: not a CUDA device)
    gpu_nccl: bool  # a CUDA GPU whose engines run NCCL
    gpu_deepep: bool  # DeepEP runs on it (the GPU record's ``deepep``)
    intra: str
    inter: str
    num_nodes: int
    gpus_per_node: int
    #: the routed experts' kernel dtype (the kernel tables' ``moe_dtype``; DeepEP's rule)
    moe_dtype: str = "fp8_block"
    #: GPUs of one NVLink domain when it spans several nodes (an NVL72 rack; ``None``: the
    #: node), :attr:`moeplan.specs.ClusterSpec.nvlink_domain`
    nvlink_domain: int | None = None

    @classmethod
    def of(cls, model: ModelSpec, cluster: ClusterSpec) -> Target:
        return cls(
            architecture=model.architecture,
            num_experts=model.num_experts,
            gpu=cluster.gpu.name,
            gpu_sm=cluster.gpu.sm_version,
            gpu_nccl=cluster.gpu.nccl,
            gpu_deepep=cluster.gpu.deepep,
            intra=cluster.intra.kind,
            inter=cluster.inter.kind,
            num_nodes=cluster.num_nodes,
            gpus_per_node=cluster.gpus_per_node,
            moe_dtype=model.quant.experts.format.kernel_dtype,
            nvlink_domain=cluster.domain_gpus,
        )

    @property
    def domain_gpus(self) -> int:
        """GPUs that reach each other over NVLink: the node, or the rack (NVL72)."""
        return self.nvlink_domain or self.gpus_per_node

    @property
    def mnnvl(self) -> bool:
        """Multi-node NVLink: one NVLink domain spans several nodes (trays of an NVL72)."""
        return self.domain_gpus > self.gpus_per_node

    @property
    def cuda(self) -> bool:
        return self.gpu_nccl

    @property
    def gpu_facts(self) -> GpuFacts:
        return GpuFacts(self.gpu, self.gpu_sm, self.gpu_nccl, self.gpu_deepep)


def deepep_blockers(t: Target, nodes: int, phase: str | None = None) -> list[str]:
    """Why SGLang's DeepEP backend cannot run on ``t`` over ``nodes`` nodes in ``phase``
    (``decode``: a server on DeepEP's low-latency dispatch only; None: both), ``t``'s NVLink
    domains of them deciding what crosses the network (empty: it can);
    the facts are the backend's capability table and
    :func:`moeplan.cost.a2a.deepep_hardware_blockers` (the cost model's too), the GPU's from
    its record (:mod:`moeplan.specs.gpu`)."""
    why = SGLANG_BACKEND.deepep_blocker(t.architecture, t.moe_dtype, phase=phase)
    domains = -(-nodes * t.gpus_per_node // t.domain_gpus)
    hw = deepep_hardware_blockers(t.gpu_facts, t.intra, t.inter, t.domain_gpus, domains)
    return ([why] if why is not None else []) + hw


def vllm_eplb_blockers(t: Target) -> list[str]:
    """Why vLLM's EPLB cannot run on ``t`` (empty: it can)."""
    out = []
    if not t.cuda:
        out.append(f"vLLM's EPLB runs on CUDA/ROCm devices only, not {t.gpu}")
    if t.architecture not in VLLM_EPLB_ARCHITECTURES:
        out.append(f"vLLM's EPLB does not support {t.architecture} (no MixtureOfExperts)")
    return out


def flags(args: Sequence[str]) -> dict[str, str]:
    """``{--flag: value}``; a flag followed by another flag (or nothing) maps to ``""``."""
    out: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else ""
            out[a] = "" if nxt.startswith("--") else nxt
    return out


def _int(f: dict[str, str], key: str, default: int = 1) -> int:
    return int(f[key]) if key in f else default


def _unknown(f: dict[str, str], v: EngineVersion) -> list[str]:
    return [f"{k} is not a flag of {v.engine} {v.version}" for k in f if k not in v.known_flags]


def check_sglang(
    args: Sequence[str],
    t: Target,
    *,
    gpus_used: int,
    version: EngineVersion = SGLANG_PINNED,
    location_width: int | None = None,
) -> list[str]:
    """Every rule of the pinned SGLang ``version`` that ``args`` (one node's command) breaks.

    ``gpus_used``: GPUs the plan occupies; ``location_width``: physical experts per layer of the
    ``--init-expert-location`` file, when one is passed.
    """
    f = flags(args)
    bad = _unknown(f, version)
    tp, ep, pp = _int(f, "--tp-size"), _int(f, "--ep-size"), _int(f, "--pp-size")
    attn_dp = (
        _int(f, "--attn-dp-size")
        if "--attn-dp-size" in f
        else (_int(f, "--dp-size") if "--enable-dp-attention" in f else 1)
    )
    if "--dp-size" in f and "--enable-dp-attention" not in f:
        bad.append("--dp-size without --enable-dp-attention replicates the whole model")
    if tp % attn_dp:
        bad.append(f"tp_size ({tp}) must be divisible by the attention DP size ({attn_dp})")
    if (why := SGLANG_BACKEND.model_class_blocker(t.architecture)) is not None:
        bad.append(why)
    if attn_dp > 1 and (why := SGLANG_BACKEND.attn_dp_blocker(t.architecture)) is not None:
        bad.append(why)
    chunk = SGLANG_BACKEND.required_chunk(t.architecture, attn_dp)
    given = _int(f, "--chunked-prefill-size", 0)
    if chunk is not None and (given <= 0 or given % chunk):
        bad.append(f"{t.architecture} with attention DP {attn_dp} needs --chunked-prefill-size "
                   f"a multiple of {chunk} (KV page x attention DP)")  # fmt: skip
    if tp % ep:
        bad.append(f"tp_size ({tp}) must be divisible by ep_size ({ep})")
    backend = f.get("--moe-a2a-backend", "none")
    nodes = _int(f, "--nnodes")
    if (why := sglang_ep_blocker(t.architecture, tp, ep, t.gpu_sm, backend)) is not None:
        bad.append(why)
    if backend == "deepep":
        if ep != tp:
            bad.append(f"--moe-a2a-backend deepep needs ep_size == tp_size ({ep} != {tp})")
        # a server pinned to DeepEP's low-latency dispatch and the runner that takes it
        ll = SGLANG_BACKEND.deepep_ll_args(t.moe_dtype)
        on_ll = bool(ll) and all(f.get(k) == v for k, v in zip(ll[::2], ll[1::2], strict=True))
        bad += deepep_blockers(t, nodes, "decode" if on_ll else None)
    if "--enable-two-batch-overlap" in f and backend != "deepep":
        bad.append("--enable-two-batch-overlap needs --moe-a2a-backend deepep")
    redundant = _int(f, "--ep-num-redundant-experts", 0)
    if redundant and ep <= 1:
        bad.append("--ep-num-redundant-experts needs ep_size > 1")
    if "--init-expert-location" in f and location_width is not None:
        want = t.num_experts + redundant
        if location_width != want:
            bad.append(
                f"expert location has {location_width} physical experts per layer; "
                f"experts + redundant = {want}"
            )
    if (t.num_experts + redundant) % ep:
        bad.append(
            f"physical experts ({t.num_experts + redundant}) must split evenly over ep_size ({ep})"
        )
    if tp * pp != gpus_used:
        bad.append(f"tp_size x pp_size ({tp * pp}) must equal the plan's GPUs ({gpus_used})")
    if nodes > 1:
        rank = _int(f, "--node-rank", -1)
        if not 0 <= rank < nodes or "--dist-init-addr" not in f:
            bad.append("multi-node SGLang needs --node-rank in [0, nnodes) and --dist-init-addr")
        if gpus_used != nodes * t.gpus_per_node:
            bad.append(f"{nodes} nodes x {t.gpus_per_node} GPUs != the plan's {gpus_used} GPUs")
    elif gpus_used > t.gpus_per_node:
        bad.append(f"{gpus_used} GPUs span nodes but --nnodes is missing")
    return bad


def check_vllm(
    args: Sequence[str],
    t: Target,
    *,
    gpus_used: int,
    node_rank: int = 0,
    version: EngineVersion = VLLM_PINNED,
) -> list[str]:
    """Every rule of the pinned vLLM ``version`` that ``args`` (node ``node_rank``) breaks."""
    f = flags(args)
    bad = _unknown(f, version)
    tp, dp = _int(f, "--tensor-parallel-size"), _int(f, "--data-parallel-size")
    pp = _int(f, "--pipeline-parallel-size")
    if tp * dp * pp != gpus_used:
        bad.append(f"TP x DP x PP ({tp * dp * pp}) must equal the plan's GPUs ({gpus_used})")
    if "--async-scheduling" in f and (
        pp > 1 or "--speculative-config" in f or f.get("--distributed-executor-backend") == "ray"
    ):
        # vllm/engine/arg_utils.py create_engine_config: refused with PP > 1 and speculation;
        # tests/v1/engine/test_async_llm_dp.py: "Async scheduling is not supported with ray"
        bad.append(
            "--async-scheduling needs --pipeline-parallel-size 1, no speculative decoding and "
            "no Ray executor"
        )
    if "--enable-eplb" in f:
        if "--enable-expert-parallel" not in f:
            bad.append("--enable-eplb needs --enable-expert-parallel")
        if tp * dp <= 1:
            bad.append("--enable-eplb needs TP x DP > 1")
        bad += vllm_eplb_blockers(t)
    if "--eplb-config" in f:
        try:
            cfg = json.loads(f["--eplb-config"])
        except ValueError:
            cfg = None
        red = cfg.get("num_redundant_experts", 0) if isinstance(cfg, dict) else None
        if not isinstance(red, int) or red < 0:
            bad.append("--eplb-config must be a JSON object with num_redundant_experts >= 0")
        elif red and "--enable-eplb" not in f:
            bad.append("num_redundant_experts > 0 needs --enable-eplb")
    gpus_node = t.gpus_per_node
    if gpus_used > gpus_node:
        bad += _vllm_multinode(f, tp, dp, pp, gpus_used // gpus_node, node_rank)
    return bad


def _vllm_multinode(
    f: dict[str, str], tp: int, dp: int, pp: int, nodes: int, rank: int
) -> list[str]:
    if f.get("--distributed-executor-backend") == "ray":
        return [] if rank == 0 else ["a Ray deployment runs its command on the head node only"]
    local = _int(f, "--data-parallel-size-local", 0)
    bad = []
    if pp != 1 or local * nodes != dp or "--data-parallel-address" not in f:
        bad.append(
            "multi-node vLLM DP needs --data-parallel-size-local x nodes == DP, "
            "--data-parallel-address and no PP (else a Ray cluster)"
        )
    if rank > 0 and (
        _int(f, "--data-parallel-start-rank", -1) != rank * local or "--headless" not in f
    ):
        bad.append(f"node {rank} needs --data-parallel-start-rank {rank * local} --headless")
    if rank == 0 and ("--headless" in f or "--data-parallel-start-rank" in f):
        bad.append("node 0 serves the API: no --headless / --data-parallel-start-rank")
    return bad
