"""What a serving engine decides, as one frozen record per engine (:class:`EngineBackend`).

Everything in moeplan that differs between engines reads it from the engine's backend: the
simulator's scheduler model and its defaults (:mod:`moeplan.serve.knobs`), the memory model's
activation budget, the DeepEP gate of the cost model (:mod:`moeplan.cost.a2a`), the kernel
tables that price it, and the launch flags of the exports (:mod:`moeplan.export`). An engine
is one module of this package holding one instance (or subclass) of :class:`EngineBackend`.

Pure: no I/O, no torch; it reads GPU facts from the GPU record (:class:`moeplan.specs.GPUSpec`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from moeplan.backends.capabilities import CapabilityTable, Nvfp4Moe
from moeplan.backends.versions import sort_versions, version_key
from moeplan.errors import MoeplanError, require
from moeplan.specs import GPUSpec, ModelSpec
from moeplan.specs.quant import WeightFormat

NVFP4 = "nvfp4"  # the kernel tables' moe_dtype of NVFP4 (W4A4) experts
#: bytes per hidden element of DeepEP's fp8 dispatch: e4m3 + one fp32 scale per 128
#: (deepseek-ai/DeepEP README, low-latency and normal dispatch with fp8)
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
#: bytes per hidden element of an NVFP4 dispatch: e2m1 + one e4m3 scale per 16 (the NVFP4
#: activation quantization of the experts' input: ModelOpt NVFP4QTensor, block 16)
NVFP4_DISPATCH_BYTES = 0.5 + 1.0 / 16

GIB = 1024**3

if TYPE_CHECKING:
    from moeplan.cost.offload import WeightOffload


#: the groups a fused-MoE collective runs over (:class:`EpCollective`)
EP_GROUPS = ("moe", "dp", "tp")


@dataclass(frozen=True, slots=True)
class EpCollective:
    """One collective of an engine's fused-MoE expert parallelism (no DeepEP): ``op`` (the
    nccl-tests name: ``all_gather``, ``reduce_scatter``, ``all_reduce``) over ``group`` —
    ``moe``: every GPU of the MoE group (attention TP x DP), ``dp``: the attention-DP ranks
    (one per attention-TP group), ``tp``: one attention-TP group — moving ``bytes_per_token``
    bytes per token of its buffer. The buffer (nccl-tests convention,
    :mod:`moeplan.cost.collectives`) holds the tokens of every attention-DP rank for ``moe``
    and ``dp``, one DP rank's tokens for ``tp``."""

    op: str
    group: str
    bytes_per_token: float


@dataclass(frozen=True, slots=True)
class FusedEpComm:
    """The collectives an engine runs before (``dispatch``) and after (``combine``) its
    fused MoE under expert parallelism without DeepEP (:meth:`EngineBackend.fused_ep_comm`)."""

    dispatch: tuple[EpCollective, ...]
    combine: tuple[EpCollective, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryContext:
    """What an engine's default memory fraction reads of an instance: its GPU, its
    tensor-parallel size (SGLang's ``tp_size``: the instance's GPUs per pipeline stage),
    pipeline and attention-DP sizes, prefill chunk (the instance's), whether it runs
    DeepEP, has MLA attention, its P/D role and the MTP draft tokens."""

    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    attn_dp: int = 1
    chunk: int = 0
    deepep: bool = False
    mla: bool = False
    role: str = "colocated"
    mtp: int = 0


class Knobs(Protocol):
    """What the launch flags read of an instance's knobs
    (:class:`moeplan.serve.iteration.instance_knobs.InstanceKnobs`)."""

    a2a: str
    tbo: bool
    mtp: int
    kv_dtype: str
    mem_fraction: float | None
    offload: WeightOffload | None
    overlap: bool | None


@dataclass(frozen=True, kw_only=True)
class EngineBackend(ABC):
    """One serving engine: its names, pinned release, scheduler model and defaults, memory
    and capability facts, and the parts of its launch flags that differ from other engines.

    A field left at its default means the engine lacks that part: ``scheduler`` ``None`` is
    an engine moeplan does not simulate (its kernels may still price a cost model),
    ``launch_module`` ``None`` one it does not export."""

    #: the ``--engine`` spelling, also the engine folder of the kernel tables
    name: str
    #: how prose names it
    label: str
    #: the engine name of its measured kernel tables (``moeplan.kernel_tables``)
    kernel_table: str
    #: the release the launch facts were read from (None: none pinned); not the releases its
    #: kernel tables were measured at (:meth:`table_versions`, ``--engine-version``)
    version: str | None = None
    #: the flag line the exports target (``moeplan.export.constraints``), e.g. ``0.5.2x``
    flag_line: str | None = None

    # ---- scheduler model (moeplan.serve.knobs) --------------------------------------------
    #: the scheduler model the simulator runs (``prefill-first`` or ``mixed``; None: none)
    scheduler: str | None = None
    #: whether the step budgets (batched tokens, running sequences) are per attention-DP rank
    budgets_per_dp_rank: bool = False
    #: whether the batched-token budget must exceed the running cap (a chunk <= cap is skipped)
    chunk_above_running: bool = False
    #: the request pool capping the running requests per DP rank (None: no such cap)
    running_cap: int | None = None
    #: share of future output reserved at admission (0: KV allocated on demand)
    new_token_ratio: float = 0.0
    #: share of its future output a request reserves in the step that admits it (None: the
    #: :attr:`new_token_ratio` every running request reserves)
    admission_token_ratio: float | None = None
    #: share ratio of the cache memory given to recurrent states (None: none split off)
    state_ratio: float | None = None

    #: the first release whose scheduler overlaps its host work with the GPU step by default
    #: (:mod:`moeplan.cost.host`; ``""``: every release moeplan knows; None: none does)
    overlap_since: str | None = None
    #: the launch flags turning that overlap on and off (None: the engine has no such flag)
    overlap_on_flag: str | None = None
    overlap_off_flag: str | None = None

    # ---- capabilities ---------------------------------------------------------------------
    #: what each release runs per architecture family, GPU and checkpoint, read from the
    #: engine's source (:mod:`moeplan.backends.capabilities`; None: no table read)
    caps: CapabilityTable | None = None
    #: whether moeplan prices a DeepEP all-to-all path for it (moeplan.cost.a2a)
    deepep: bool = False
    #: whether the wide-EP DeepGEMM MoE tables (measured on SGLang) price its wide-EP MoE
    shares_wideep_tables: bool = False
    #: its own wide-EP MoE kernel op in the kernel tables (None: the shared wide-EP tables)
    wideep_moe_op: str | None = None
    #: architectures whose attention runs data-parallel (None: every architecture)
    attn_dp_architectures: frozenset[str] | None = None
    #: architectures refused attention DP: the engine class that refuses it, for the message
    no_attn_dp: Mapping[str, str] = field(default_factory=dict)
    #: preset architectures without a model class in the pinned release
    missing_model_classes: frozenset[str] = frozenset()
    #: where the pinned release lists its model classes (for the message)
    model_registry: str = ""
    #: the environment variable of a pipeline's layer partition (None: not settable)
    pp_partition_env: str | None = None
    #: the environment a server spanning several trays of one NVLink domain (GB200 / GB300
    #: NVL72, multi-node NVLink) needs so that NCCL reaches its peers over NVLink, not the
    #: network (empty: none); the launch files export it on such servers only
    mnnvl_env: tuple[tuple[str, str], ...] = ()
    #: the deployment kinds it launches (:func:`moeplan.serve.deployment.launch_kind`:
    #: ``colocated``, ``pd``, ``afd``, ``stages``, ``dep``); the search skips the others
    deployments: frozenset[str] = frozenset({"colocated"})
    #: why a kind it does not launch is refused: the rule and its source, by kind
    no_deployment: Mapping[str, str] = field(default_factory=dict)

    # ---- memory (moeplan.cost.memory.KVPool) --------------------------------------------
    #: what its memory fraction covers: ``static``, ``total`` or ``free`` (None: no knob)
    mem_fraction_rule: str | None = None
    #: its default memory fraction where it is one number (None: computed, or no knob)
    default_mem_fraction: float | None = None
    #: the largest fraction ``plan`` tries (the engine's safe maximum, with its source)
    max_mem_fraction: float = 0.95
    #: the launch flag carrying the fraction (None: not a flag of its server command)
    mem_fraction_flag: str | None = None
    #: bytes outside torch's allocator the fraction's own accounting charges (None: the
    #: memory model's whole reserve, :data:`moeplan.cost.memory.RESERVED_BYTES`)
    pool_reserve: float | None = None
    #: > 0: its KV blocks (of this many tokens) are shared between full and sliding-window
    #: layers, a window layer holding only the blocks over its window
    #: (:attr:`moeplan.cost.memory.KVPool.window_block`); 0: every layer costs per token
    window_block: int = 0

    # ---- launch (moeplan.export) ----------------------------------------------------------
    #: the export module writing its server commands (None: not exported)
    launch_module: str | None = None
    #: the launch flag of the running-request cap (None: not a flag of its server command)
    running_flag: str | None = None
    #: the container image of the pinned release the Kubernetes manifests run (None: none)
    image: str | None = None
    #: Dynamo's backend framework name and worker module (ai-dynamo/dynamo components/src/
    #: dynamo/<engine>; None: moeplan writes no DynamoGraphDeployment for it)
    dynamo_worker: tuple[str, str] | None = None
    #: why a server over several nodes gets no Dynamo service (None: one service of
    #: ``multinode.nodeCount`` pods runs it, as its LeaderWorkerSet does)
    dynamo_multinode: str | None = None

    # ---- weight offload (moeplan.cost.offload) ---------------------------------------------
    #: the flags of the grouped weight offloader: group size, layers offloaded per group,
    #: prefetch step, then any fixed flags it needs (None: the engine has no such offloader)
    offload_flags: tuple[str, ...] | None = None
    #: why the engine cannot offload weights (with its source), when it has no such flags
    no_offload: str = "no grouped weight-offload flags in its launch options"

    # ---- decisions ------------------------------------------------------------------------
    @abstractmethod
    def default_chunk(self, gpu: GPUSpec) -> int:
        """Prompt tokens of one forward step by default on ``gpu`` (the engine's chunked
        prefill; per DP rank where :attr:`budgets_per_dp_rank`)."""

    def table_versions(self, folders: Iterable[tuple[str, str]]) -> tuple[str, ...]:
        """The releases its kernel tables were measured at, oldest first, read from the
        ``(engine folder, version folder)`` pairs of the shipped tables
        (:func:`moeplan.kernel_tables.table_versions`): what ``--engine-version`` prices as
        ``measured`` on some GPU (:mod:`moeplan.backends.versions`). Not :attr:`version`."""
        return sort_versions(v for e, v in folders if e == self.kernel_table)

    def default_running(self, gpu: GPUSpec) -> int:
        """Running sequences by default on ``gpu`` (per DP rank); engines whose cap comes
        from the KV pool (:attr:`running_cap`) do not use it."""
        raise TypeError(f"{self.name} takes its running cap from the KV pool (running_cap)")

    def rank_running_limit(self, gpu: GPUSpec) -> int:
        """The most running sequences one attention-DP rank's scheduler admits when the launch
        sets no cap: the request pool (:attr:`running_cap`) or the default running cap."""
        return self.running_cap if self.running_cap is not None else self.default_running(gpu)

    def mem_fraction(self, ctx: MemoryContext) -> float:
        """The engine's own memory fraction for the instance ``ctx`` when none is given."""
        if self.default_mem_fraction is None:
            raise TypeError(f"{self.name} has no memory-fraction knob")
        del ctx
        return self.default_mem_fraction

    def mem_headroom(self, ctx: MemoryContext) -> float:
        """Bytes the engine needs outside its memory fraction besides a step's activations
        and buffers (CUDA graphs, metadata), which a static fraction must leave free; 0
        where the fraction's rule already counts them."""
        del ctx
        return 0.0

    def mem_fraction_args(self, fraction: float | None) -> list[str]:
        """The launch flag of a memory fraction (none when not given or not a flag)."""
        if fraction is None or self.mem_fraction_flag is None:
            return []
        return [self.mem_fraction_flag, f"{fraction:g}"]

    def running_args(self, max_running: int | None, attn_dp: int) -> list[str]:
        """The launch flag of an instance's running-request cap (``max_running``: the
        instance's total, as simulated): per attention-DP rank where
        :attr:`budgets_per_dp_rank` (rounded up), else the total; none when not given."""
        if not max_running or self.running_flag is None:
            return []
        per = -(-max_running // max(1, attn_dp)) if self.budgets_per_dp_rank else max_running
        return [self.running_flag, str(per)]

    def host_overlap(self, version: str | None = None) -> bool:
        """Whether release ``version`` (None: the pinned one) overlaps its scheduler's host work
        with the GPU step by default (:attr:`overlap_since`; :mod:`moeplan.cost.host`)."""
        if self.overlap_since is None:
            return False
        if not self.overlap_since:
            return True
        release = version or self.version
        return release is not None and version_key(release) >= version_key(self.overlap_since)

    def overlaps(self, overlap: bool | None, version: str | None = None) -> bool:
        """Whether an instance with the knob ``overlap`` (None: the release's default)
        overlaps its host work (:meth:`host_overlap`)."""
        return self.host_overlap(version) if overlap is None else overlap

    def overlap_args(self, overlap: bool | None, version: str | None = None) -> list[str]:
        """The flag setting the host overlap to ``overlap`` where it differs from release
        ``version``'s default (none for None: the default)."""
        if overlap is None or overlap == self.host_overlap(version):
            return []
        flag = self.overlap_on_flag if overlap else self.overlap_off_flag
        require(
            flag is not None,
            f"--{'' if overlap else 'no-'}overlap-schedule: {self.label} has no flag turning "
            f"its host overlap {'on' if overlap else 'off'}",
        )
        return [str(flag)]

    def overlap_blocker(self, pp: int, mtp: int, version: str | None = None) -> str | None:
        """Why release ``version`` cannot overlap its host work for an instance of ``pp``
        pipeline stages with ``mtp`` draft tokens (None: it can)."""
        del pp, mtp, version
        return None

    def graph_max_bs(self, ctx: MemoryContext, max_running: int | None) -> int | None:
        """The largest decode batch the engine captures a CUDA graph for, for the instance
        ``ctx`` with running cap ``max_running`` (None: it captures no decode graph, or moeplan
        does not state it for this engine)."""
        del ctx, max_running
        return None

    def graph_args(self, ctx: MemoryContext, max_running: int | None) -> list[str]:
        """The flags pinning :meth:`graph_max_bs` (none where the engine has no such flag)."""
        del ctx, max_running
        return []

    def dynamo_args(self, argv: list[str], role: str) -> list[str]:
        """A server command's arguments as Dynamo's worker takes them (default: the engine's
        own, after the program); a :class:`~moeplan.errors.MoeplanError` names a setting the
        worker cannot take (no graph is written then)."""
        del role
        return argv[3:] if argv[:2] == ["python", "-m"] else argv[1:]

    def model_class_blocker(self, architecture: str) -> str | None:
        """Why the pinned release cannot load ``architecture`` (None: it can)."""
        if architecture not in self.missing_model_classes:
            return None
        return (
            f"{self.name} {self.version} has no model class for {architecture} "
            f"({self.model_registry})"
        )

    def attn_dp_blocker(self, architecture: str) -> str | None:
        """Why the engine cannot run attention DP for ``architecture`` (None: it can)."""
        if self.attn_dp_architectures is None or architecture in self.attn_dp_architectures:
            return None
        where = self.no_attn_dp.get(architecture, "no attention-DP model class is known")
        return (
            f"{self.label} {self.version} has no attention DP (--attn-dp-size) for "
            f"{architecture}: its attention splits heads by the whole tp_size ({where})"
        )

    def deployment_blocker(self, kind: str) -> str | None:
        """Why the engine cannot launch a ``kind`` deployment, one line naming the rule
        (None: it can)."""
        if kind in self.deployments:
            return None
        why = self.no_deployment.get(kind, f"it launches {', '.join(sorted(self.deployments))}")
        return f"{self.label} {self.version} launches no {kind} deployment: {why}"

    # ---- capability queries (the capability table, :attr:`caps`) -------------------------
    # ``version`` None is the pinned release (:attr:`version`); a version the table does not
    # state takes the nearest stated one (CapabilityTable.release). Each blocker is one line
    # naming the rule and the engine source, None when the engine runs it.
    def _caps(self) -> CapabilityTable:
        if self.caps is None:
            raise MoeplanError(f"{self.label} has no capability table read from its source")
        return self.caps

    def capability_blocker(
        self, capability: str, architecture: str, version: str | None = None
    ) -> str | None:
        """Why the engine cannot run ``capability`` (``deepep``, ``attn_dp``, ``tbo``,
        ``mtp``) for ``architecture``."""
        if self.caps is None:
            return f"{self.label} has no capability table read from its source"
        return self.caps.blocker(capability, architecture, version or self.version)

    def deepep_blocker(
        self,
        architecture: str,
        moe_dtype: str,
        version: str | None = None,
        phase: str | None = None,
    ) -> str | None:
        """Why the engine has no DeepEP MoE path moeplan prices for ``architecture`` with
        routed experts of ``moe_dtype`` (the kernel tables' ``moe_dtype``) in ``phase``
        (``prefill``: DeepEP's normal dispatch, ``decode``: its low-latency dispatch, None: a
        server running both): the family's DeepEP branch, then the dtypes DeepEP's grouped
        GEMM runs (and the wide-EP tables price) and those it runs under the low-latency
        dispatch only (:attr:`~.capabilities.Release.deepep_ll_runners`)."""
        why = self.capability_blocker("deepep", architecture, version)
        if why is not None:
            return why
        v = version or self.version
        r, _ = self._caps().release(v)
        if moe_dtype in r.deepep_moe_dtypes:
            return None
        if moe_dtype in r.deepep_ll_runners:
            if phase == "decode":
                return None
            where = "prefill" if phase == "prefill" else "a server that prefills"
            return (
                f"{self._caps().named(r, v)} runs DeepEP's MoE with {moe_dtype} experts under "
                f"its low-latency dispatch only (decode), not in {where} "
                f"({r.deepep_ll_source})"
            )
        have = ", ".join(sorted(r.deepep_moe_dtypes)) or "none"
        return (
            f"{self._caps().named(r, v)} runs DeepEP's MoE with {have} experts only, not "
            f"{moe_dtype} ({r.deepep_moe_source})"
        )

    def deepep_ll_args(self, moe_dtype: str, version: str | None = None) -> list[str]:
        """The launch flags of a decode server running ``moe_dtype`` experts under DeepEP's
        low-latency dispatch only (:attr:`~.capabilities.Release.deepep_ll_runners`): the MoE
        runner that takes that dispatch and the low-latency mode (empty: the dtype runs
        under both dispatches, or the engine has no such path)."""
        if self.caps is None:
            return []
        r, _ = self.caps.release(version or self.version)
        runner = r.deepep_ll_runners.get(moe_dtype)
        if runner is None or moe_dtype in r.deepep_moe_dtypes:
            return []
        return self.deepep_ll_flags(runner)

    def deepep_ll_flags(self, runner: str) -> list[str]:
        """The engine's spelling of "this MoE runner, DeepEP low-latency dispatch only"
        (none: the engine has no such launch setting)."""
        del runner
        return []

    def tbo_blocker(self, architecture: str, version: str | None = None) -> str | None:
        """Why the engine has no two-batch overlap for ``architecture``."""
        return self.capability_blocker("tbo", architecture, version)

    def mtp_blocker(self, architecture: str, version: str | None = None) -> str | None:
        """Why the engine cannot draft with ``architecture``'s own MTP / NextN layers."""
        return self.capability_blocker("mtp", architecture, version)

    def mtp_running_cap(self, version: str | None = None) -> tuple[int, str] | None:
        """The instance's running-request cap under speculative decoding and its source
        (None: the engine sets none)."""
        if self.caps is None:
            return None
        r, _ = self.caps.release(version or self.version)
        if r.spec_running_cap is None:
            return None
        return r.spec_running_cap, r.spec_running_source

    def moe_kernel_blocker(
        self, moe_dtype: str, gpu: GPUSpec, version: str | None = None
    ) -> str | None:
        """Why the engine has no MoE kernel moeplan can price for ``moe_dtype`` experts on
        ``gpu`` (None: it has): NVFP4 on a GPU without FP4 tensor cores where the release has
        no weight-only fallback (:class:`~.capabilities.Nvfp4Moe`), or a dtype below the
        release's ``moe_kernel_floor``."""
        v = version or self.version
        nv = self.nvfp4_moe(v)
        no_fp4 = moe_dtype == NVFP4 and not gpu.fp4_tensor_cores
        if no_fp4 and nv is not None and nv.fallback is None:
            return (
                f"{self.label} {v} has no NVFP4 MoE kernel without FP4 tensor cores "
                f"({nv.fallback_source}); {gpu.name} is {self._sm(gpu)} (FP4 tensor cores "
                "need compute capability >= 10.0)"
            )
        if self.caps is None:
            return None
        r, _ = self.caps.release(v)
        floor = r.moe_kernel_floor.get(moe_dtype)
        sm = gpu.sm_version
        if floor is None or (sm is not None and sm >= floor[0]):
            return None
        return (
            f"{self.caps.named(r, v)} has no {moe_dtype} MoE kernel moeplan can price below "
            f"SM{floor[0]}; {gpu.name} is {self._sm(gpu)} ({floor[1]})"
        )

    @staticmethod
    def _sm(gpu: GPUSpec) -> str:
        sm = gpu.sm_version
        return f"SM{sm}" if sm is not None else "of unstated compute capability"

    def nvfp4_moe(self, version: str | None = None) -> Nvfp4Moe | None:
        """How release ``version`` runs NVFP4 routed experts (None: not read)."""
        if self.caps is None:
            return None
        return self.caps.release(version or self.version)[0].nvfp4_moe

    def dispatch_bytes(
        self, moe_dtype: str, phase: str, gpu: GPUSpec, version: str | None = None
    ) -> float:
        """Bytes per hidden element one dispatched token carries in ``phase`` (``context`` /
        ``generation``): :data:`NVFP4_DISPATCH_BYTES` where the release dispatches the NVFP4
        experts' quantized activations in that phase (:class:`~.capabilities.Nvfp4Moe`
        ``dispatch_phases``) on a GPU that runs NVFP4, else DeepEP's fp8
        (:data:`FP8_DISPATCH_BYTES`)."""
        if moe_dtype != NVFP4 or not gpu.fp4_tensor_cores:
            return FP8_DISPATCH_BYTES
        nv = self.nvfp4_moe(version)
        if nv is None or phase not in nv.dispatch_phases:
            return FP8_DISPATCH_BYTES
        return NVFP4_DISPATCH_BYTES

    def fused_ep_comm(
        self, attn_dp: int, moe_ep: int, prefill: bool, hidden_bytes: float, router_bytes: float
    ) -> FusedEpComm | None:
        """The collectives of the fused MoE under expert parallelism ``moe_ep`` without DeepEP,
        with ``attn_dp`` attention-DP ranks, in a prefill (``prefill``) or decode step;
        ``hidden_bytes``: one token's hidden state as the engine holds it (bf16),
        ``router_bytes``: one token's router logits. None: an all-to-all of the routed
        copies each way (an engine that states no path of its own keeps it).

        The engines' own paths (SGLang, vLLM, TensorRT-LLM under attention TP) send no token
        per routed copy: every rank holds all of its MoE group's tokens before the experts
        and runs its local experts on them, and the outputs are summed over the group."""
        del attn_dp, moe_ep, prefill, hidden_bytes, router_bytes
        return None

    def dispatch_env(
        self, moe_dtype: str, a2a: str | None, role: str, version: str | None = None
    ) -> list[tuple[str, str]]:
        """The environment of a ``role`` server (``prefill`` / ``decode`` / ``colocated``) on
        the ``a2a`` backend that makes its DeepEP dispatch carry the NVFP4 experts'
        activations where :meth:`dispatch_bytes` prices them so
        (:class:`~.capabilities.Nvfp4Moe` ``dispatch_env``; empty otherwise)."""
        nv = self.nvfp4_moe(version)
        phase = {"prefill": "context", "decode": "generation"}.get(role)
        if moe_dtype != NVFP4 or nv is None or a2a != "deepep" or phase is None:
            return []
        return list(nv.dispatch_env) if phase in nv.dispatch_phases else []

    def moe_runner_args(
        self, moe_dtype: str, gpu_sm: int | None, version: str | None = None
    ) -> list[str]:
        """Launch flags pinning the MoE runner moeplan priced for ``moe_dtype`` experts on a
        GPU of compute capability ``gpu_sm`` (empty: the engine's default is the priced one,
        or it has no such flag)."""
        del moe_dtype, gpu_sm, version
        return []

    def moe_runner_env(
        self, moe_dtype: str, gpu_sm: int | None, version: str | None = None
    ) -> list[tuple[str, str]]:
        """The environment selecting the MoE runner moeplan priced for ``moe_dtype`` experts
        on a GPU of compute capability ``gpu_sm`` where the engine has no flag for it (none by
        default)."""
        del moe_dtype, gpu_sm, version
        return []

    def moe_format(
        self, fmt: WeightFormat, gpu: GPUSpec, version: str | None = None
    ) -> WeightFormat:
        """The experts' format as the engine runs it on ``gpu``: NVFP4 experts on a GPU without
        FP4 tensor cores run the release's weight-only fallback (same bytes, bf16 compute,
        priced from the fallback's kernel tables); anything else as stored. A release with
        no fallback is refused before pricing (:meth:`moe_kernel_blocker`)."""
        if fmt.kernel_dtype != NVFP4 or gpu.fp4_tensor_cores:
            return fmt
        nv = self.nvfp4_moe(version)
        if nv is None or nv.fallback is None:
            return fmt
        return replace(fmt, compute="bf16", kernel_dtype=nv.fallback)

    def profile_bytes(
        self, model: ModelSpec, gpu: GPUSpec, rank_seqs: int | None, rank_tokens: int | None
    ) -> float:
        """Bytes the engine's start-up memory profile holds besides a forward step's
        activations when it sizes its KV pool (the larger of the two is charged; 0: none),
        for a rank's running cap ``rank_seqs`` and step budget ``rank_tokens`` (None: the
        engine's defaults on ``gpu``)."""
        del model, gpu, rank_seqs, rank_tokens
        return 0.0

    def expert_alignment(self, fmt: WeightFormat, gpu: GPUSpec) -> tuple[int, int]:
        """``(intermediate, hidden)``: the multiples the engine pads one routed expert's
        per-rank intermediate size and its hidden size to when it loads ``fmt`` experts on
        ``gpu`` (the padded weights are what it holds in memory); ``(1, 1)``: as stored."""
        del fmt, gpu
        return (1, 1)

    def default_kv_dtype(
        self, architecture: str, checkpoint_fp8: bool, gpu: GPUSpec, version: str | None = None
    ) -> str:
        """``bf16`` or ``fp8``: what ``--kv-cache-dtype auto`` stores for a checkpoint of
        ``architecture`` (``checkpoint_fp8``: its quantization config states an FP8 KV
        cache) on ``gpu``. Without a table: the model dtype."""
        if self.caps is None:
            return "bf16"
        kv = self.caps.release(version or self.version)[0].kv_default
        floor = kv.fp8_from_sm.get(architecture)
        if floor is not None and (gpu.sm_version or 0) >= floor:
            return "fp8"
        return "fp8" if checkpoint_fp8 and kv.checkpoint_fp8 else "bf16"

    def layout_blocker(self, attn_tp: int, attn_dp: int, moe_tp: int, moe_ep: int) -> str | None:
        """Why the engine's launch options cannot express an instance of these degrees, one
        line naming the rule (None: they can; a search may skip what this refuses)."""
        del attn_tp, attn_dp, moe_tp, moe_ep
        return None

    def required_chunk(self, architecture: str, attn_dp: int) -> int | None:
        """The prefill chunk the engine needs for ``architecture`` at attention DP
        ``attn_dp`` (None: its default works)."""
        del architecture, attn_dp
        return None

    @abstractmethod
    def chunk_args(self, chunk_tokens: int | None, attn_dp: int) -> list[str]:
        """The flag of an instance's prefill chunk (the instance's total prompt tokens per
        iteration, as priced); none when not given."""

    @abstractmethod
    def knob_args(self, knobs: Knobs, role: str = "colocated") -> list[str]:
        """The flags of an instance's knobs (two-batch overlap, MTP, KV dtype)."""

    def offload_blocker(self) -> str | None:
        """Why the engine cannot offload weights to host memory (None: it can)."""
        return None if self.offload_flags is not None else self.no_offload

    def offload_args(self, offload: WeightOffload | None) -> list[str]:
        """The offloader's flags for ``offload`` (none without one): group size, layers per
        group and prefetch step under the engine's own names (:attr:`offload_flags`)."""
        if offload is None or self.offload_flags is None:
            return []
        group, num, step, *fixed = self.offload_flags
        vals = (offload.group_size, offload.num_in_group, offload.prefetch_step)
        return [
            *(x for f, v in zip((group, num, step), vals, strict=True) for x in (f, str(v))),
            *fixed,
        ]

    def knob_env(self, knobs: Knobs | None, role: str = "colocated") -> list[tuple[str, str]]:
        """The environment of an instance's knobs (none by default)."""
        del knobs, role
        return []
