"""Which MoE path an engine runs for an EP layout: DeepEP + grouped GEMM, or its fused MoE.

:func:`moe_backend` is the one decision used by the cost model (what is priced) and by the
exports (which flags are written), so the two always agree. Facts (sources):

- DeepEP needs SM90+ GPUs, NVLink with full P2P between every pair of GPUs in a node and RDMA
  between nodes (deepseek-ai/DeepEP README, "Requirements").
- SGLang runs DeepEP (``--moe-a2a-backend deepep``) only with ``ep_size == tp_size`` (no MoE
  TP: sglang docs/advanced_features/expert_parallelism.md).
- Which model families have a DeepEP MoE path, and with which expert dtypes, is the engine's
  capability table read from its source (:meth:`moeplan.backends.EngineBackend.deepep_blocker`,
  :mod:`moeplan.backends.capabilities`): e.g. SGLang's DeepEP MoE runs fp8 block-scaled
  experts (DeepGEMM), so a BF16 checkpoint keeps the fused MoE under ``auto``; NVFP4 experts
  run under DeepEP's low-latency dispatch only, so a decode server (``phase`` ``decode``) takes
  DeepEP with them and a prefill or colocated one does not.
- vLLM's DeepEP all2all backends (``--all2all-backend deepep_high_throughput`` /
  ``deepep_low_latency``) run under ``--enable-expert-parallel`` (EP = TP x DP, no MoE TP:
  vllm docs/serving/expert_parallel_deployment.md). TRT-LLM's wide EP is not exported here.
- ``auto`` picks DeepEP wherever the engine can run it for the layout (what the exports
  emit), the fused MoE otherwise; ``nccl`` keeps the engine's default fused MoE (SGLang
  ``--moe-a2a-backend none``, vLLM's default all2all backend), whose collectives the engine
  backend states (:meth:`moeplan.backends.base.EngineBackend.fused_ep_comm`: the MoE group's
  tokens gathered and the outputs reduced, no all-to-all of routed copies).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.backends import BACKENDS, backend_or_none
from moeplan.errors import MoeplanError
from moeplan.specs import ClusterSpec, GPUSpec, ModelSpec
from moeplan.specs.cluster import FP4_TENSOR_CORE_SM

A2A_CHOICES = ("auto", "deepep", "nccl")
DEEPEP_MIN_SM = 90  # DeepEP README: "Hopper (SM90) GPUs"
FULL_P2P_INTRA = frozenset({"nvswitch"})  # every GPU pair peer-connected (not nvlink-pairs/pcie)
RDMA_INTER = frozenset({"ib", "roce"})


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What DeepEP's rules read of a GPU: its record's compute capability (``sm``: major*10 +
    minor, ``None`` unstated), NCCL (a CUDA GPU) and DeepEP support (:mod:`moeplan.specs.gpu`)."""

    name: str
    sm: int | None
    nccl: bool
    deepep: bool

    @classmethod
    def of(cls, gpu: GPUSpec) -> GpuFacts:
        return cls(gpu.name, gpu.sm_version, gpu.nccl, gpu.deepep)


def deepep_hardware_blockers(
    gpu: GpuFacts, intra: str, inter: str, domain_gpus: int, nodes: int
) -> list[str]:
    """Why DeepEP cannot run on this hardware over ``nodes`` NVLink domains of
    ``domain_gpus`` GPUs each (empty: it can)."""
    out = []
    if not gpu.deepep:
        if not gpu.nccl:
            have = "not a CUDA GPU"
        elif gpu.sm is None:
            have = "of unstated compute capability"
        else:
            tail = " (no DeepEP support in its GPU record)" if gpu.sm >= DEEPEP_MIN_SM else ""
            have = f"SM{gpu.sm}{tail}"
        out.append(f"DeepEP needs SM{DEEPEP_MIN_SM}+ GPUs; {gpu.name} is {have}")
    if domain_gpus > 1 and intra not in FULL_P2P_INTRA:
        out.append(f"DeepEP needs NVLink P2P between every GPU pair of a node; {intra} is not")
    if nodes > 1 and inter not in RDMA_INTER:
        out.append(f"DeepEP needs RDMA between nodes; {inter} is not")
    return out


def deepep_blockers(
    engine: str | None,
    model: ModelSpec,
    cluster: ClusterSpec,
    moe_tp: int,
    moe_ep: int,
    version: str | None = None,
    phase: str | None = None,
) -> list[str]:
    """Why ``engine`` (release ``version``; None: its pinned one) cannot run DeepEP for MoE TP
    ``moe_tp`` x EP ``moe_ep`` in ``phase`` (``prefill`` / ``decode``; None: a server running
    both) (empty: it can)."""
    hw = HardwareFacts.of(model, cluster)
    return layout_blockers(engine, hw, moe_tp, moe_ep, version, phase)


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    """What DeepEP's rules read of a model and a cluster (the exports build it from their
    target, the cost model from the specs)."""

    architecture: str
    gpu: GpuFacts
    intra: str
    inter: str
    #: GPUs of one NVLink domain (the node, or an NVL72 rack)
    domain_gpus: int
    #: the routed experts' kernel dtype (the kernel tables' ``moe_dtype``)
    moe_dtype: str

    @classmethod
    def of(cls, model: ModelSpec, cluster: ClusterSpec) -> HardwareFacts:
        return cls(
            model.architecture,
            GpuFacts.of(cluster.gpu),
            cluster.intra.kind,
            cluster.inter.kind,
            cluster.nvlink_domain,
            model.quant.experts.format.kernel_dtype,
        )


def layout_blockers(
    engine: str | None,
    hw: HardwareFacts,
    moe_tp: int,
    moe_ep: int,
    version: str | None = None,
    phase: str | None = None,
) -> list[str]:
    """:func:`deepep_blockers` on :class:`HardwareFacts`."""
    out = []
    b = backend_or_none(engine)
    if b is None or not b.deepep:
        have = ", ".join(n for n, x in BACKENDS.items() if x.deepep)
        out.append(f"engine {engine} has no DeepEP path moeplan prices ({have})")
    elif (why := b.deepep_blocker(hw.architecture, hw.moe_dtype, version, phase)) is not None:
        out.append(why)
    elif b.deepep_ll_args(hw.moe_dtype, version) and (hw.gpu.sm or 0) < FP4_TENSOR_CORE_SM:
        out.append(
            f"{b.label} runs {hw.moe_dtype} experts under DeepEP with FP4 tensor-core kernels "
            f"(SM{FP4_TENSOR_CORE_SM}+); {hw.gpu.name} runs them as the weight-only fallback, "
            "which DeepEP does not take"
        )
    if moe_ep <= 1:
        out.append(f"DeepEP needs moe_ep > 1 (got {moe_ep})")
    if moe_tp != 1:
        out.append(f"DeepEP runs without MoE TP (moe_tp {moe_tp} != 1)")
    nodes = -(-moe_ep * moe_tp // hw.domain_gpus)
    out += deepep_hardware_blockers(hw.gpu, hw.intra, hw.inter, hw.domain_gpus, nodes)
    return out


def a2a_backends(
    engine: str | None, model: ModelSpec, cluster: ClusterSpec, moe_tp: int, moe_ep: int
) -> tuple[str, ...]:
    """The MoE backends ``engine`` runs for this model on this cluster at MoE TP ``moe_tp`` x
    EP ``moe_ep``: ``("nccl",)`` (its fused MoE) plus ``"deepep"`` where nothing blocks it
    (:func:`deepep_blockers`: the engine's capability table, the expert dtype, the hardware)."""
    ok = not deepep_blockers(engine, model, cluster, moe_tp, moe_ep)
    return ("nccl", "deepep") if ok else ("nccl",)


def moe_backend(
    a2a: str,
    engine: str | None,
    model: ModelSpec | HardwareFacts,
    cluster: ClusterSpec | None,
    moe_tp: int,
    moe_ep: int,
    version: str | None = None,
    phase: str | None = None,
) -> str:
    """``"deepep"`` or ``"nccl"`` (the engine's fused MoE with its own collectives,
    :meth:`moeplan.backends.base.EngineBackend.fused_ep_comm`) for ``a2a`` in
    :data:`A2A_CHOICES` (module docstring) in ``phase`` (``prefill`` / ``decode``; None: a
    server running both); ``deepep`` where it cannot run raises one line.
    ``model`` may be the :class:`HardwareFacts` directly (``cluster`` then ``None``)."""
    if a2a not in A2A_CHOICES:
        raise MoeplanError(f"--a2a ({a2a!r}) must be one of {', '.join(A2A_CHOICES)}")
    if a2a == "nccl":
        return "nccl"
    if isinstance(model, HardwareFacts):
        hw = model
    else:
        assert cluster is not None
        hw = HardwareFacts.of(model, cluster)
    blockers = layout_blockers(engine, hw, moe_tp, moe_ep, version, phase)
    if a2a == "deepep":
        if blockers:
            raise MoeplanError(f"--a2a (deepep) cannot run here: {blockers[0]}")
        return "deepep"
    return "nccl" if blockers else "deepep"
