"""The :class:`Family` record: one operation family's columns, defaults and feature function
(the registry is :mod:`.families`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from moeplan.cost.kerneldb.base import Columns, Features
from moeplan.cost.kerneldb.moe_features import TACTIC_TOKEN_WEIGHT

#: variant columns that name the measured table's kernel and collector: a query may leave
#: them out (the variant chosen for the engine supplies them), never given by default
TABLE_COLS = ("kernel_source", "framework")


@dataclass(frozen=True, kw_only=True, slots=True)
class Family:
    """One operation family: its columns, defaults and feature function."""

    op: str
    variant_cols: tuple[str, ...]
    shape_cols: tuple[str, ...]
    x_cols: tuple[str, ...]
    defaults: Mapping[str, object]
    features: Callable[[Columns], Features]
    link: bool = False  # bytes move over the intra-node link, not HBM
    robust_field: bool = False  # weighted median of the neighbours (fit.ResidualField)
    #: kernel_source prefixes of autotuned kernels (a GEMM tactic picked per shape, so single
    #: shapes run 2-5x off their neighbours): robust field, token axis x TACTIC_TOKEN_WEIGHT
    tactic_kernels: tuple[str, ...] = ()
    #: the per-work cost is a block's latency paid per wave over the SMs (WaveFeatures) and
    #: moves to another GPU as a time (fit.Analytic.scaled): the wave count carries the SMs
    wave_latency_transfers: bool = False
    #: kernel_source values whose floor is host time the kernel's own time overlaps: the
    #: floor joins the p-norm (fit.Analytic.fit) instead of adding to it
    host_floor_kernels: tuple[str, ...] = ()
    #: coordinates (indices into ``Features.coords``) along which a query beyond the measured
    #: range takes the residual field at the nearest measured edge (fit.ResidualField), as a
    #: shape line's end residual carries past it: a shape axis with few measured values (the
    #: sparse modules' 4-8 head counts) whose end values would otherwise get no correction
    carry_axes: tuple[int, ...] = ()

    def field_options(self, kernel: str) -> tuple[tuple[float, ...], bool]:
        """(coordinate weights, robust) of the residual field of a variant of ``kernel``."""
        if self.tactic_kernels and kernel.startswith(self.tactic_kernels):
            return (TACTIC_TOKEN_WEIGHT,), True
        return (), self.robust_field

    @property
    def columns(self) -> tuple[str, ...]:
        return self.variant_cols + self.shape_cols + self.x_cols
