"""ClusterSpec: nodes x GPUs, each GPU's compute and memory, and the two link levels.

Bandwidths are bytes/s per GPU per direction; latencies are seconds. ``intra`` is the
link inside a node (NVSwitch, NVLink pairs, PCIe, HCCS), ``inter`` the network between nodes
(InfiniBand/RoCE bandwidth per GPU). ``profile`` names a shipped :class:`HardwareProfile`
(fitted α-β coefficients) used by default for this cluster's GPUs, when one exists.

Size limits: at most :data:`MAX_NODES` nodes of :data:`MAX_GPUS_PER_NODE` GPUs;
every rate and size must be a finite positive number.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moeplan.errors import check_float, check_int

MAX_NODES = 4096  # 32768 GPUs at 8 per node: above the largest published MoE deployments
MAX_GPUS_PER_NODE = 64


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One accelerator: dense bf16 FLOP/s, memory bytes and memory bandwidth (bytes/s), and
    the record of :mod:`moeplan.specs.gpu` (compute capability, SMs, SM clock, fp8 / int8
    rate over bf16, its measured and reference tables, NCCL and DeepEP support).

    The preset loader requires every record field; a GPUSpec built in code (a card measured
    on the spot, a test) leaves the ones it does not know at ``None`` / ``False``, and every
    reader says what it does then: no compute capability and no ``nccl`` is not a CUDA GPU
    for the exports, no ``sm_count`` or ``sm_clock_mhz`` takes the reference table GPU's, no
    ``fp8_ratio`` / ``int8_ratio`` runs those dtypes at the bf16 rate, no
    ``reference_tables`` borrows from the table GPU of the nearest peak ratio
    (:func:`moeplan.cost.kerneldb.device_for`).
    """

    name: str
    flops_bf16: float
    mem_bytes: float
    mem_bw: float
    compute_capability: str | None = None
    sm_count: int | None = None
    sm_clock_mhz: float | None = None
    fp8_ratio: float | None = None
    int8_ratio: float | None = None
    measured: str | None = None
    kernel_tables: str | None = None
    reference_tables: str | None = None
    nccl: bool = False
    deepep: bool = False

    def __post_init__(self) -> None:
        for f in ("flops_bf16", "mem_bytes", "mem_bw"):
            check_float(f"gpu[{self.name}].{f}", getattr(self, f), positive=True)
        for f in ("sm_count", "sm_clock_mhz", "fp8_ratio", "int8_ratio"):
            if getattr(self, f) is not None:
                check_float(f"gpu[{self.name}].{f}", getattr(self, f), positive=True)

    @property
    def sm_version(self) -> int | None:
        """Compute capability as ``major * 10 + minor`` (``9.0`` -> 90), or ``None``."""
        if self.compute_capability is None:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)


#: the lowest compute capability (``major * 10 + minor``) with FP4 tensor cores: Blackwell
#: (SM100 B200 / GB200, SM103 B300 / GB300; NVIDIA Blackwell architecture technical brief:
#: fifth-generation Tensor Cores with FP4 / NVFP4)
FP4_TENSOR_CORE_SM = 100


def has_fp4_tensor_cores(gpu: GPUSpec) -> bool:
    """Whether ``gpu`` runs NVFP4 GEMMs on FP4 tensor cores (compute capability >= 10.0).
    The one place that reads it: a GPU record's own field can replace this rule."""
    sm = gpu.sm_version
    return sm is not None and sm >= FP4_TENSOR_CORE_SM


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSpec:
    """One link level: kind, bandwidth per GPU per direction (bytes/s), latency (s)."""

    kind: str
    bw: float
    latency: float

    def __post_init__(self) -> None:
        check_float(f"link[{self.kind}].bw", self.bw, positive=True)
        check_float(f"link[{self.kind}].latency", self.latency, 0.0)

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link: latency + bytes / bandwidth."""
        return self.latency + nbytes / self.bw


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """``num_nodes`` nodes of ``gpus_per_node`` identical GPUs."""

    name: str
    num_nodes: int
    gpus_per_node: int
    gpu: GPUSpec
    intra: LinkSpec
    inter: LinkSpec
    profile: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        check_int(f"cluster[{self.name}].num_nodes", self.num_nodes, 1, MAX_NODES)
        check_int(f"cluster[{self.name}].gpus_per_node", self.gpus_per_node, 1, MAX_GPUS_PER_NODE)

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """The same machines, ``nodes`` of them."""
        check_int("nodes", nodes, 1, MAX_NODES)
        name = self.name if nodes == self.num_nodes else f"{self.name}x{nodes}n"
        return replace(self, num_nodes=nodes, name=name)

    def nodes_spanned(self, group_size: int, contiguous: bool = True) -> int:
        """Nodes a group of ``group_size`` consecutive ranks spans (at least 1)."""
        del contiguous
        return max(1, -(-group_size // self.gpus_per_node))
