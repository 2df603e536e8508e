"""The analytic per-family model and the residual field that corrects it between measurements.

Model (seconds, one GPU): ``t = floor + ||(per_work work, flops / (e_f F), bytes / (e_b B))||_p``
— the three costs overlap as a p-norm (``p = 1``: they add up; ``p -> inf``: only the largest
counts; kernels that pipeline loads with math sit in between, so ``p`` is fitted) — with ``F`` the datasheet tensor peak (fp8 rows: the fp8 peak, fp4 rows the fp4 peak) and ``B`` the HBM bandwidth
(the intra-node link bandwidth for communication families). ``e_f`` and ``e_b`` are the
kernel family's compute and memory efficiencies — what transfers to another GPU; the floor
(launch and synchronisation) and the per-work cost (routing, permutation, per-sequence setup)
transfer as times, scaled by the SM clock and the bandwidth ratio (:meth:`Analytic.scaled`). Fitted by least squares on log time (relative error), all four positive.
A family whose per-work cost runs serially inside each thread block (``ctas`` blocks of ``work``
each, :class:`~.families.WaveFeatures`) pays it once per *wave*: ``ceil(ctas / SMs)`` waves
over the GPU's streaming multiprocessors (its GPU record's ``sm_count``, a datasheet number,
so the wave count transfers to another GPU). Two family options (:class:`~.families.Family`) depart from
this: a kernel whose floor is host time (``host_floor_kernels``) has the floor join the
p-norm — the kernel's own time runs under it, ``max`` rather than sum — and a family whose
per-wave cost is a block's latency (``wave_latency_transfers``) keeps that cost unscaled on
another GPU (:meth:`Analytic.scaled`).

Residual field: the log ratio measured / model of every measured row, kept in the family's
smooth coordinates (log2 of shape and token axes). A query's correction is the inverse-
distance-weighted mean of its :data:`NEIGHBOURS` nearest rows — along its own shape's token
axis when the shape was measured, across neighbouring shapes otherwise. Outside the measured
coordinate box the field is not used (no silent extrapolation). A family may weight its
coordinates in the neighbour search (``Family.field_options``: a token axis weighted up makes
the neighbours *other shapes at the same token count* rather than one shape's other token
counts) and take the weighted *median* of the neighbours instead of the mean
(``Family.robust_field``): in tables where single shapes run 2-5x off their neighbours (a
kernel tactic picked per shape, e.g. TRT-LLM's CUTLASS fused MoE), one such shape then cannot
drag a held-out neighbour with it. Along a family's ``carry_axes`` (a shape axis measured at
few values) a query past the measured range is moved to the nearest measured value first, so
the residual there carries on (as a shape line's end residual does along its token axis).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields, replace

import numpy as np

from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import Features
from moeplan.cost.kerneldb.price_memo import run_state

NEIGHBOURS = 8
SOFTEN = 0.3  # log2 units added to neighbour distances (weights 1 / (d + SOFTEN)^2)
NEAR = 2.5  # a query farther than this (log2 units) from every row is outside the table
# floor s, per-work s, compute eff., memory eff., overlap p - 1; efficiencies stay <= 1
GUESS = (2e-5, 1e-9, 0.4, 0.7, 3.0)
LOWER = (1e-8, 1e-14, 1e-3, 1e-3, 1e-2)
UPPER = (1e-2, 1e-4, 1.0, 1.0, 50.0)
FIT_ROWS = 6000  # rows used by the least-squares fit (an even stride through the table)
MIN_FIT_ROWS = 10  # fewer physically possible rows than this: fit them all
#: exponent of the link-bandwidth ratio that moves a communication kernel's floor to another
#: link (:meth:`Analytic.scaled`). No source: no table measures one kernel on two links
#: (0 keeps the floor, 1 scales it like the bytes, 0.5 between); bench/bench_published.py
#: prints every published row at 0, 0.5 and 1 (the lmsys decode row: 0.957 / 0.915 / 0.805)
LINK_FLOOR_EXPONENT = 0.5


def sm_count(device: Device) -> int:
    """Streaming multiprocessors of ``device`` (its GPU record, :mod:`moeplan.specs.gpu`)."""
    return device.sm_count


def clock_ratio(src: Device, dst: Device) -> float:
    """SM clock of ``src`` over ``dst`` (GPU records); 1 where either has no published
    figure: the floor of the table GPU it borrows from is kept."""
    if src.sm_clock_mhz is None or dst.sm_clock_mhz is None:
        return 1.0
    return src.sm_clock_mhz / dst.sm_clock_mhz


@dataclass(frozen=True, kw_only=True, slots=True)
class Analytic:
    """Fitted floor, per-work cost and efficiencies of one kernel family on one GPU."""

    floor: float
    per_work: float
    flops_eff: float
    bw_eff: float
    overlap: float = 4.0
    scale_work: bool = True  # False: the per-work cost moves to another GPU unscaled (scaled)
    floor_in_norm: bool = False  # the floor overlaps the other terms (host time, see fit)

    def predict(self, f: Features, device: Device, link: bool) -> np.ndarray:
        peak = device.tensor_peak(f.fp8)
        bw = device.link_bw if link else device.mem_bw
        compute = f.flops / (self.flops_eff * peak)
        memory = f.nbytes / (self.bw_eff * bw)
        work = self.per_work * f.work
        ctas = getattr(f, "ctas", None)
        if ctas is not None:  # serial per-block work, once per wave of blocks over the SMs
            work = work * np.ceil(ctas / sm_count(device))
        floor = np.full(np.shape(work), self.floor if self.floor_in_norm else 0.0)
        top = np.maximum(np.maximum(np.maximum(compute, memory), work), floor)
        p = self.overlap
        safe = np.where(top > 0, top, 1.0)
        terms = (work / safe) ** p + (compute / safe) ** p + (memory / safe) ** p
        norm = safe * (terms + (floor / safe) ** p) ** (1 / p)
        return np.where(top > 0, norm, 0.0) + (0.0 if self.floor_in_norm else self.floor)

    @classmethod
    def fit(
        cls, f: Features, y: np.ndarray, device: Device, link: bool, floor_in_norm: bool = False
    ) -> Analytic:
        """Least squares on log time; ``floor_in_norm``: the floor joins the p-norm instead
        of adding to it (a host-side floor the kernel's own time overlaps)."""
        from scipy.optimize import least_squares

        # rows faster than the datasheet allows (collector artefacts, e.g. A100 TRT-LLM decode
        # rows above the HBM bandwidth) say nothing about the kernel's efficiency: not fitted
        ok = y >= _datasheet_time(f, device, link)
        if MIN_FIT_ROWS <= ok.sum() < len(y):
            f = replace(f, **{x.name: getattr(f, x.name)[ok] for x in fields(f)})
            y = y[ok]
        step = max(1, len(y) // FIT_ROWS)
        f = replace(f, **{x.name: getattr(f, x.name)[::step] for x in fields(f)})
        logy = np.log(y[::step])

        def resid(th: np.ndarray) -> np.ndarray:
            a, b, ef, eb, p = np.exp(th)
            return (
                np.log(
                    cls(
                        floor=a,
                        per_work=b,
                        flops_eff=ef,
                        bw_eff=eb,
                        overlap=1 + p,
                        floor_in_norm=floor_in_norm,
                    ).predict(f, device, link)
                )
                - logy
            )

        r = least_squares(
            resid, x0=np.log(np.asarray(GUESS)), method="trf", bounds=(np.log(LOWER), np.log(UPPER))
        )
        a, b, ef, eb, p = np.exp(r.x)
        return cls(
            floor=float(a),
            per_work=float(b),
            flops_eff=float(ef),
            bw_eff=float(eb),
            overlap=float(1 + p),
            floor_in_norm=floor_in_norm,
        )

    def scaled(self, src: Device, dst: Device, link: bool) -> Analytic:
        """This model moved from GPU ``src`` to ``dst``: efficiencies stay (they multiply the
        datasheet peaks), the per-work cost scales with the bandwidth ratio (routing,
        permutation and per-sequence setup are memory-latency-bound work) and the floor with
        the SM clock ratio (launch, block scheduling and synchronisation are counted in GPU
        cycles); a communication kernel's floor (``link``: synchronisation across the link)
        with the link bandwidth ratio to :data:`LINK_FLOOR_EXPONENT` (slower links, slower
        handshakes; unsourced, its sensitivity is printed beside the published rows).
        Evidence for kernels: NVIDIA's H100 and H200 GEMM tables (same TRT-LLM build, same SMs
        and clock, 1.43x the HBM bandwidth) — kernels of a few microseconds run 0.99x on the
        H200 (a bandwidth-scaled floor says 0.84x), weight-read-bound ones 0.72x (1 / 1.43 =
        0.70); on A100 <-> H100 the clock rule lowers the leave-one-GPU-out median of the
        kernel cells (docs/benchmarks/kerneldb.md). A model with ``scale_work`` off (a family's
        per-wave block latency, ``Family.wave_latency_transfers``) keeps its per-work cost: the
        wave count carries the GPU's SMs."""
        if src == dst:
            return self
        r = (src.link_bw / dst.link_bw) if link else (src.mem_bw / dst.mem_bw)
        return replace(
            self,
            floor=self.floor * (r**LINK_FLOOR_EXPONENT if link else clock_ratio(src, dst)),
            per_work=self.per_work * (r if self.scale_work else 1.0),
        )

    def to_dict(self) -> dict[str, float]:
        return {
            "floor_s": self.floor,
            "per_work_s": self.per_work,
            "flops_eff": self.flops_eff,
            "bw_eff": self.bw_eff,
            "overlap": self.overlap,
        }


class ResidualField:
    """Log residuals of measured rows, queried by nearest neighbours in smooth coordinates.

    The k-d tree is built on the first query, not stored with the variant: a process whose
    every row a variant kept (:mod:`.price_memo`) never asks the field, so never imports
    SciPy's spatial module nor builds the tree."""

    def __init__(
        self,
        coords: np.ndarray,
        residual: np.ndarray,
        weights: tuple[float, ...] = (),
        robust: bool = False,
        carry: tuple[int, ...] = (),
    ) -> None:
        self.coords, self.carry = coords, tuple(a for a in carry if a < coords.shape[1])
        self.residual = residual
        self.lo = coords.min(axis=0) - 1e-9
        self.hi = coords.max(axis=0) + 1e-9
        w = np.ones(coords.shape[1])
        w[: len(weights)] = weights[: coords.shape[1]]
        self.weights, self.robust = w, robust

    def beyond(self, coords: np.ndarray) -> np.ndarray:
        """Rows outside the measured range on a ``carry`` axis (their residual is carried)."""
        out = np.zeros(len(coords), bool)
        for a in self.carry:
            out |= (coords[:, a] < self.lo[a]) | (coords[:, a] > self.hi[a])
        return out

    def query(self, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log correction, distance to the nearest row, inside the measured box); on the
        ``carry`` axes a query beyond the box is moved to its nearest edge first."""
        if self.carry:
            coords = np.array(coords, dtype=float)
            for a in self.carry:
                coords[:, a] = np.clip(coords[:, a], self.lo[a] + 2e-9, self.hi[a] - 2e-9)
        k = min(NEIGHBOURS, len(self.residual))
        d, j = run_state(_TREES, self, _tree).query(coords * self.weights, k=k)
        d, j = d.reshape(len(coords), k), j.reshape(len(coords), k)
        w = 1.0 / (d + SOFTEN) ** 2
        r = self.residual[j]
        corr = _weighted_median(r, w) if self.robust else (r * w).sum(axis=1) / w.sum(axis=1)
        # nearness in unweighted log2 units (the weights only rank the neighbours)
        near = np.sqrt(((self.coords[j] - coords[:, None, :]) ** 2).sum(axis=2)).min(axis=1)
        inside = np.all((coords >= self.lo) & (coords <= self.hi), axis=1) & (near <= NEAR)
        return corr, near, inside


def _tree(field: ResidualField):  # noqa: ANN202 (SciPy imported here, on first use)
    from scipy.spatial import cKDTree

    return cKDTree(field.coords * field.weights)


#: each residual field's k-d tree, built on its first query (:class:`ResidualField`)
_TREES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _datasheet_time(f: Features, device: Device, link: bool) -> np.ndarray:
    """FLOPs at the tensor peak or bytes at full bandwidth, whichever is longer (as
    ``db.peak_time``, which this module cannot import: db imports it)."""
    flops = f.flops / device.tensor_peak(f.fp8)
    return np.maximum(flops, f.nbytes / (device.link_bw if link else device.mem_bw))


def _weighted_median(r: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Row-wise weighted median of ``r`` (rows of neighbours) with weights ``w``."""
    order = np.argsort(r, axis=1)
    rs, ws = np.take_along_axis(r, order, 1), np.take_along_axis(w, order, 1)
    cum = np.cumsum(ws, axis=1) / ws.sum(axis=1, keepdims=True)
    idx = np.minimum((cum < 0.5).sum(axis=1), r.shape[1] - 1)
    return rs[np.arange(len(r)), idx]
