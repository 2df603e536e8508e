"""The GPU a prediction is for: datasheet peaks, and which measured GPU its kernels resemble.

A :class:`Device` carries what the transfer model scales by: dense bf16, fp8 and fp4 tensor
FLOP/s, HBM bandwidth and the intra-node link bandwidth (bytes/s per direction), the SM
count and maximum SM clock, the GPU's own NVIDIA kernel tables (``table``) and the table GPU
whose kernel efficiencies it borrows (``reference``). It is built from a
:class:`~moeplan.specs.ClusterSpec` (:func:`device_for`) whose GPU record
(:mod:`moeplan.specs.gpu`: ``fp8_ratio``, ``kernel_tables``, ``reference_tables``,
``sm_count``, ``sm_clock_mhz``, each with its source) states all of it.

A GPU built in code without a record (a card measured on the spot) runs fp8 at its bf16 rate,
borrows from the table GPU of its peak ratio (fp8 faster than bf16: Hopper's, else Ampere's)
and counts that table GPU's SMs (:data:`TABLE_SMS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeplan.cost.kerneldb.base import FP4_TIER
from moeplan.errors import require
from moeplan.specs import ClusterSpec

#: SMs of the kernel-table GPUs, for a GPU built without a record (the presets' h100-sxm /
#: a100-80g records: H100 SXM5 132, A100 108, NVIDIA architecture whitepapers; B200 148, NVIDIA
#: Blackwell architecture technical brief, and GB200's GPUs are that B200 die)
TABLE_SMS = {"h100_sxm": 132, "a100_sxm": 108, "b200_sxm": 148, "gb200": 148}
#: dense fp4 tensor peak over the fp8 peak of a GPU with FP4 tensor cores (compute capability
#: 10 and later): NVIDIA Blackwell datasheet, B200 9 / 4.5 PFLOP/s, GB200 10 / 5 (the
#: ``fp4_tc_flops`` / ``fp8_tc_flops`` of shared/data/measured/{b200_sxm,gb200}/system.yaml);
#: older GPUs have no FP4 tensor cores and run fp4 weights at their fp8 (or bf16) rate
FP4_RATIO = 2.0
FP4_MAJOR = 10  # first compute capability major with FP4 tensor cores (Blackwell SM100)


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """Datasheet peaks of one GPU (FLOP/s, bytes/s), its SMs and clock, its table and
    reference GPU (``table``: ``None`` when NVIDIA measured none on it; ``sm_clock_mhz``:
    ``None`` when no figure is published — the reference's floor is kept; ``flops_fp4``:
    ``None`` for a GPU without FP4 tensor cores, read as its fp8 peak)."""

    name: str
    flops_bf16: float
    flops_fp8: float
    mem_bw: float
    link_bw: float
    reference: str
    sm_count: int
    table: str | None = None
    sm_clock_mhz: float | None = None
    flops_fp4: float | None = None

    def __post_init__(self) -> None:
        if self.flops_fp4 is None:
            object.__setattr__(self, "flops_fp4", self.flops_fp8)
        for f in ("flops_bf16", "flops_fp8", "flops_fp4", "mem_bw", "link_bw", "sm_count"):
            v = getattr(self, f)
            require(v > 0, f"device[{self.name}].{f} ({v}) must be positive")
        require(self.reference in TABLE_SMS,
                f"device[{self.name}].reference ({self.reference!r}) must be one of "
                f"{', '.join(TABLE_SMS)}")  # fmt: skip

    def peak_flops(self, fp8: bool) -> float:
        return self.flops_fp8 if fp8 else self.flops_bf16

    def tensor_peak(self, tier: np.ndarray) -> np.ndarray:
        """The tensor peak of each row's rate tier (:attr:`~.base.Features.fp8`: 0 / False
        bf16, 1 / True fp8, :data:`~.base.FP4_TIER` fp4)."""
        t = np.asarray(tier, dtype=float)
        return np.where(
            t >= FP4_TIER, self.flops_fp4, np.where(t > 0, self.flops_fp8, self.flops_bf16)
        )


def device_for(cluster: ClusterSpec) -> Device:
    """The :class:`Device` of one GPU of ``cluster`` (from its GPU record)."""
    g = cluster.gpu
    ratio = g.fp8_ratio or 1.0  # no record: fp8 at the bf16 rate (module docstring)
    cc = g.compute_capability
    fp4 = cc is not None and int(cc.partition(".")[0]) >= FP4_MAJOR
    reference = g.reference_tables or ("h100_sxm" if ratio > 1.0 else "a100_sxm")
    return Device(
        name=g.name,
        flops_bf16=g.flops_bf16,
        flops_fp8=g.flops_bf16 * ratio,
        mem_bw=g.mem_bw,
        link_bw=cluster.intra.bw,
        reference=reference,
        sm_count=int(g.sm_count or TABLE_SMS[reference]),
        table=g.kernel_tables,
        sm_clock_mhz=g.sm_clock_mhz,
        flops_fp4=g.flops_bf16 * ratio * FP4_RATIO if fp4 else None,
    )
