"""ClusterSpec: nodes x GPUs, each GPU's compute and memory, and the two link levels.

Bandwidths are bytes/s per GPU per direction; latencies are seconds. ``intra`` is the
link among the GPUs of one NVLink domain (NVSwitch, NVLink pairs, PCIe, HCCS), ``inter`` the
network between domains (InfiniBand/RoCE bandwidth per GPU). ``profile`` names a shipped
:class:`HardwareProfile` (fitted α-β coefficients) used by default for this cluster's GPUs,
when one exists.

Node and NVLink domain. A node (``gpus_per_node``) is one machine: what a launch file starts,
what a host name holds. The NVLink domain (:attr:`ClusterSpec.nvlink_domain`) is the set of
GPUs that reach each other over ``intra``: the node itself on an HGX / DGX server, a whole
rack on GB200 / GB300 NVL72 (18 compute trays of 4 GPUs behind the NVLink switches, each
tray a node). Every price that asks "NVLink or network" (collectives, DeepEP, KV transfer,
the planners' rank placement) asks it of the domain; a rack cluster
(:attr:`ClusterSpec.mnnvl`) spans several nodes with one domain. The domain is a whole number
of nodes and the cluster a whole number of domains (one-line errors otherwise).

Size limits: at most :data:`MAX_NODES` nodes of :data:`MAX_GPUS_PER_NODE` GPUs;
every rate and size must be a finite positive number.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moeplan.errors import MoeplanError, check_float, check_int

MAX_NODES = 4096  # 32768 GPUs at 8 per node: above the largest published MoE deployments
MAX_GPUS_PER_NODE = 64
MAX_DOMAIN = 576  # NVLink 5 switches join at most 576 GPUs in one domain (NVIDIA NVLink page)


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One accelerator: dense bf16 FLOP/s, memory bytes and memory bandwidth (bytes/s), and
    the record of :mod:`moeplan.specs.gpu` (compute capability, SMs, SM clock, fp8 / int8
    rate over bf16, its measured and reference tables, NCCL and DeepEP support, and the dense
    FP4 tensor rate over bf16 where the GPU has FP4 tensor cores, and the bandwidth to host
    memory per direction where the record states it).

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
    fp4_ratio: float | None = None
    host_link_bw: float | None = None

    def __post_init__(self) -> None:
        for f in ("flops_bf16", "mem_bytes", "mem_bw"):
            check_float(f"gpu[{self.name}].{f}", getattr(self, f), positive=True)
        for f in (
            "sm_count",
            "sm_clock_mhz",
            "fp8_ratio",
            "int8_ratio",
            "fp4_ratio",
            "host_link_bw",
        ):
            if getattr(self, f) is not None:
                check_float(f"gpu[{self.name}].{f}", getattr(self, f), positive=True)

    @property
    def sm_version(self) -> int | None:
        """Compute capability as ``major * 10 + minor`` (``9.0`` -> 90), or ``None``."""
        if self.compute_capability is None:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)

    @property
    def fp4_tensor_cores(self) -> bool:
        """Whether the GPU runs FP4 (NVFP4 / MXFP4) matrix products on its tensor cores
        (Blackwell, SM100 / SM103): its record states an ``fp4_ratio``."""
        return self.fp4_ratio is not None


#: the lowest compute capability (``major * 10 + minor``) with FP4 tensor cores: Blackwell
#: (SM100 B200 / GB200, SM103 B300 / GB300; NVIDIA Blackwell architecture technical brief:
#: fifth-generation Tensor Cores with FP4 / NVFP4). The engines pick their NVFP4 kernels by
#: this SM check; a GPU record says it by its ``fp4_ratio`` (:attr:`GPUSpec.fp4_tensor_cores`),
#: and the two agree on every shipped record (tests/test_specs_gpu.py)
FP4_TENSOR_CORE_SM = 100


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
    """``num_nodes`` nodes of ``gpus_per_node`` identical GPUs; ``domain_gpus`` GPUs share one
    NVLink domain (``None``: the node is the domain, module docstring)."""

    name: str
    num_nodes: int
    gpus_per_node: int
    gpu: GPUSpec
    intra: LinkSpec
    inter: LinkSpec
    profile: str | None = None
    source: str = ""
    domain_gpus: int | None = None

    def __post_init__(self) -> None:
        check_int(f"cluster[{self.name}].num_nodes", self.num_nodes, 1, MAX_NODES)
        check_int(f"cluster[{self.name}].gpus_per_node", self.gpus_per_node, 1, MAX_GPUS_PER_NODE)
        if self.domain_gpus is not None:
            d = check_int(f"cluster[{self.name}].nvlink_domain", self.domain_gpus, 1, MAX_DOMAIN)
            if d % self.gpus_per_node:
                raise MoeplanError(
                    f"cluster[{self.name}].nvlink_domain ({d}) must be a whole number of nodes "
                    f"of {self.gpus_per_node} GPUs"
                )
            if self.num_gpus % d:
                raise MoeplanError(
                    f"cluster[{self.name}] ({self.num_nodes} nodes x {self.gpus_per_node} = "
                    f"{self.num_gpus} GPUs) must be a whole number of NVLink domains of {d} "
                    f"GPUs (--racks N gives N x {d})"
                )

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs that reach each other over ``intra`` (NVLink): the node, or a rack."""
        return self.domain_gpus if self.domain_gpus is not None else self.gpus_per_node

    @property
    def mnnvl(self) -> bool:
        """Multi-node NVLink: one NVLink domain spans several nodes (GB200 / GB300 NVL72)."""
        return self.nvlink_domain > self.gpus_per_node

    @property
    def nodes_per_domain(self) -> int:
        return self.nvlink_domain // self.gpus_per_node

    @property
    def num_domains(self) -> int:
        """NVLink domains of the cluster (racks on NVL72, nodes elsewhere)."""
        return max(1, self.num_gpus // self.nvlink_domain)

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """The same machines, ``nodes`` of them."""
        check_int("nodes", nodes, 1, MAX_NODES)
        name = self.name if nodes == self.num_nodes else f"{self.name}x{nodes}n"
        return replace(self, num_nodes=nodes, name=name)

    def with_racks(self, racks: int) -> ClusterSpec:
        """The same rack cluster, ``racks`` NVLink domains of it (one-line error on a cluster
        whose NVLink domain is its node)."""
        if not self.mnnvl:
            raise MoeplanError(
                f"racks ({racks}) applies to rack clusters (an NVLink domain of several nodes); "
                f"{self.name} has one NVLink domain per node of {self.gpus_per_node}: use --nodes"
            )
        check_int("racks", racks, 1, MAX_NODES // self.nodes_per_domain)
        name = self.name if racks == self.num_domains else f"{self.name}x{racks}r"
        return replace(self, num_nodes=racks * self.nodes_per_domain, name=name)

    def domains_spanned(self, group_size: int) -> int:
        """NVLink domains a group of ``group_size`` consecutive ranks spans (at least 1): the
        ``nodes`` every collective and all-to-all price takes."""
        return max(1, -(-group_size // self.nvlink_domain))
