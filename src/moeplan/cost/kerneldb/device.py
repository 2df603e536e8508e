"""The GPU a prediction is for: datasheet peaks, and which measured GPU its kernels resemble.

A :class:`Device` carries what the transfer model scales by: dense bf16 and fp8 tensor
FLOP/s, HBM bandwidth and the intra-node link bandwidth (bytes/s per direction). It is built
from a :class:`~moeplan.specs.ClusterSpec` (:func:`device_for`); GPUs with NVIDIA tables map to
them (``h100-sxm`` -> ``h100_sxm``, ``a100-80g`` -> ``a100_sxm``), every other GPU takes its
kernel efficiencies from the table GPU of the nearest architecture (:data:`REFERENCE`).

Departure: ``GPUSpec`` has no fp8 number, so the fp8/bf16 peak ratio comes from
:data:`FP8_RATIO` (datasheets: Hopper, Ada and Blackwell tensor cores double the bf16 rate in
fp8; Ampere and Ascend 910B have no fp8 tensor cores, so fp8 weights run at the bf16 rate).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import require
from moeplan.specs import ClusterSpec

#: preset GPU name -> table GPU name, for the GPUs NVIDIA measured.
TABLE_GPU = {"h100-sxm": "h100_sxm", "a100-80g": "a100_sxm"}

#: fp8 / bf16 dense tensor peak (NVIDIA Hopper/Ada/Blackwell datasheets: 2x; Ampere: none).
FP8_RATIO = {
    "h100-sxm": 2.0,
    "h200-sxm": 2.0,
    "h20": 2.0,
    "h800": 2.0,
    "gpu-96g": 2.0,
    "b200": 2.0,
    "l40s": 2.0,
    "a100-80g": 1.0,
    "a6000": 1.0,
    "a10": 1.0,
    "a40": 1.0,
    "ascend-910b": 1.0,
}

#: GPU without tables -> table GPU whose kernel efficiencies it borrows (same generation of
#: tensor cores and fused-MoE kernels: Hopper/Blackwell run the Hopper kernels' code paths,
#: Ampere/Ada and non-NVIDIA parts the Ampere ones).
REFERENCE = {
    "h200-sxm": "h100_sxm",
    "h20": "h100_sxm",
    "h800": "h100_sxm",
    "gpu-96g": "h100_sxm",
    "b200": "h100_sxm",
    "l40s": "a100_sxm",
    "a6000": "a100_sxm",
    "a10": "a100_sxm",
    "a40": "a100_sxm",
    "ascend-910b": "a100_sxm",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """Datasheet peaks of one GPU (FLOP/s, bytes/s) and its table / reference GPU."""

    name: str
    flops_bf16: float
    flops_fp8: float
    mem_bw: float
    link_bw: float

    def __post_init__(self) -> None:
        for f in ("flops_bf16", "flops_fp8", "mem_bw", "link_bw"):
            v = getattr(self, f)
            require(v > 0, f"device[{self.name}].{f} ({v}) must be positive")

    @property
    def table(self) -> str | None:
        """The table GPU measured by NVIDIA, or ``None``."""
        return TABLE_GPU.get(self.name)

    @property
    def reference(self) -> str:
        """The table GPU whose efficiencies this GPU uses (itself when it has tables)."""
        if self.table is not None:
            return self.table
        if self.name in REFERENCE:
            return REFERENCE[self.name]
        return "h100_sxm" if self.flops_fp8 > self.flops_bf16 else "a100_sxm"

    def peak_flops(self, fp8: bool) -> float:
        return self.flops_fp8 if fp8 else self.flops_bf16


def device_for(cluster: ClusterSpec) -> Device:
    """The :class:`Device` of one GPU of ``cluster``."""
    g = cluster.gpu
    return Device(
        name=g.name,
        flops_bf16=g.flops_bf16,
        flops_fp8=g.flops_bf16 * FP8_RATIO.get(g.name, 1.0),
        mem_bw=g.mem_bw,
        link_bw=cluster.intra.bw,
    )
