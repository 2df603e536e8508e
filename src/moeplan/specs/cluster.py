"""ClusterSpec: nodes x GPUs, each GPU's compute and memory, and the two link levels.

Bandwidths are bytes/s per GPU per direction; latencies are seconds. ``intra`` is the
link inside a node (NVSwitch, NVLink pairs, PCIe, HCCS), ``inter`` the network between nodes
(InfiniBand/RoCE bandwidth per GPU). ``profile`` names a shipped :class:`HardwareProfile`
(fitted α-β coefficients) used by default for this cluster's GPUs, when one exists.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moeplan.errors import require


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One accelerator: dense bf16 FLOP/s, memory bytes and memory bandwidth (bytes/s)."""

    name: str
    flops_bf16: float
    mem_bytes: float
    mem_bw: float

    def __post_init__(self) -> None:
        for f in ("flops_bf16", "mem_bytes", "mem_bw"):
            v = getattr(self, f)
            require(v > 0, f"gpu[{self.name}].{f} ({v}) must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSpec:
    """One link level: kind, bandwidth per GPU per direction (bytes/s), latency (s)."""

    kind: str
    bw: float
    latency: float

    def __post_init__(self) -> None:
        require(self.bw > 0, f"link[{self.kind}].bw ({self.bw}) must be positive")
        require(self.latency >= 0, f"link[{self.kind}].latency ({self.latency}) must be >= 0")

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
        for f in ("num_nodes", "gpus_per_node"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1,
                    f"cluster[{self.name}].{f} ({v!r}) must be a positive integer")

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """The same machines, ``nodes`` of them."""
        require(isinstance(nodes, int) and nodes >= 1, f"nodes ({nodes!r}) must be >= 1")
        name = self.name if nodes == self.num_nodes else f"{self.name}x{nodes}n"
        return replace(self, num_nodes=nodes, name=name)

    def nodes_spanned(self, group_size: int, contiguous: bool = True) -> int:
        """Nodes a group of ``group_size`` consecutive ranks spans (at least 1)."""
        del contiguous
        return max(1, -(-group_size // self.gpus_per_node))
