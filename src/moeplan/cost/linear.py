"""α-β models and their least-squares fits.

``AlphaBeta``: ``t(x) = alpha + beta * x`` — the latency/bandwidth model every paper uses
(FinDEP Eqs. 1-4, MixServe Eqs. 1-5). ``Piecewise``: up to three α-β segments split at
message-size breakpoints, for collectives whose latency-bound and bandwidth-bound regimes
one line cannot fit (NCCL switches algorithms and protocols with size). ``Roofline``:
``t = alpha + max(flops / F, bytes / B)`` with the m dimension rounded up to the 64-row
tile, for GEMMs (compute-bound vs memory-bound regimes).

Fits minimise *relative* error (rows weighted by 1/y), because latencies span five orders of
magnitude and a plain least-squares fit would ignore every small message. Every fit reports
R² (on the fitted rows, in the original units) and, when held-out rows are given, the median
and 90th-percentile absolute percentage error (as fractions) on those rows.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True, kw_only=True, slots=True)
class AlphaBeta:
    """``t = alpha + beta * x`` (seconds; ``x`` in bytes, FLOPs or elements)."""

    alpha: float
    beta: float

    def __call__(self, x: float) -> float:
        return self.alpha + self.beta * x

    def predict(self, x: ArrayLike) -> np.ndarray:
        return self.alpha + self.beta * np.asarray(x, dtype=float)

    @classmethod
    def fit(cls, x: ArrayLike, y: ArrayLike) -> AlphaBeta:
        """Relative-error least squares, alpha and beta constrained non-negative."""
        xa, ya = np.asarray(x, float), np.asarray(y, float)
        a = np.stack([1.0 / ya, xa / ya], axis=1)
        from scipy.optimize import nnls

        coef, _ = nnls(a, np.ones_like(ya))
        return cls(alpha=float(coef[0]), beta=float(coef[1]))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "alpha_beta", "alpha": self.alpha, "beta": self.beta}


@dataclass(frozen=True, kw_only=True, slots=True)
class Piecewise:
    """α-β segments: segment ``i`` covers ``breaks[i-1] <= x < breaks[i]``."""

    segments: tuple[AlphaBeta, ...]
    breaks: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.breaks) != len(self.segments) - 1:
            raise ValueError("piecewise model needs len(segments) - 1 breakpoints")

    def __call__(self, x: float) -> float:
        return self.segments[bisect.bisect_right(self.breaks, x)](x)

    def predict(self, x: ArrayLike) -> np.ndarray:
        xa = np.asarray(x, dtype=float)
        idx = np.searchsorted(np.asarray(self.breaks), xa, side="right")
        alpha = np.array([s.alpha for s in self.segments])[idx]
        beta = np.array([s.beta for s in self.segments])[idx]
        return alpha + beta * xa

    @property
    def bandwidth_segment(self) -> AlphaBeta:
        """The large-message segment (what a bandwidth figure refers to)."""
        return self.segments[-1]

    @classmethod
    def fit(
        cls, x: ArrayLike, y: ArrayLike, max_segments: int = 3, min_points: int = 4
    ) -> Piecewise:
        """Choose breakpoints among the sample sizes to minimise summed squared relative error."""
        xa, ya = np.asarray(x, float), np.asarray(y, float)
        order = np.argsort(xa)
        xa, ya = xa[order], ya[order]
        cands = np.unique(xa)[1:]
        best = _fit_segments(xa, ya, ())
        for nseg in range(2, max_segments + 1):
            for brk in _break_sets(cands, nseg - 1):
                if not _enough_points(xa, brk, min_points):
                    continue
                trial = _fit_segments(xa, ya, brk)
                if trial[0] < best[0] * 0.98:  # a new segment must earn its keep
                    best = trial
        return cls(segments=best[1], breaks=tuple(float(b) for b in best[2]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "piecewise",
            "breaks": list(self.breaks),
            "segments": [[s.alpha, s.beta] for s in self.segments],
        }


def _break_sets(cands: np.ndarray, nbreaks: int) -> list[tuple[float, ...]]:
    if nbreaks == 1:
        return [(float(c),) for c in cands]
    return [(float(a), float(b)) for i, a in enumerate(cands) for b in cands[i + 1 :]]


def _enough_points(x: np.ndarray, breaks: tuple[float, ...], min_points: int) -> bool:
    idx = np.searchsorted(np.asarray(breaks), x, side="right")
    counts = np.bincount(idx, minlength=len(breaks) + 1)
    return bool(counts.min() >= min_points)


def _fit_segments(x: np.ndarray, y: np.ndarray, breaks: tuple[float, ...]):
    idx = np.searchsorted(np.asarray(breaks), x, side="right") if breaks else np.zeros(len(x), int)
    segs, err = [], 0.0
    for i in range(len(breaks) + 1):
        sel = idx == i
        s = AlphaBeta.fit(x[sel], y[sel])
        err += float(np.sum((s.predict(x[sel]) / y[sel] - 1.0) ** 2))
        segs.append(s)
    return err, tuple(segs), breaks


@dataclass(frozen=True, kw_only=True, slots=True)
class Roofline:
    """GEMM time ``alpha + max(2*ceil(m/64)*64*n*k / flops, 2*(mk+kn+mn) / bw)``."""

    alpha: float
    flops: float
    bw: float
    tile_m: int = 64

    def __call__(self, m: float, n: float, k: float) -> float:
        padded = math.ceil(m / self.tile_m) * self.tile_m
        compute = 2.0 * padded * n * k / self.flops
        memory = 2.0 * (m * k + k * n + m * n) / self.bw
        return self.alpha + (compute if compute > memory else memory)

    def predict(self, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
        ma, na, ka = (np.asarray(v, float) for v in (m, n, k))
        padded = np.ceil(ma / self.tile_m) * self.tile_m
        compute = 2.0 * padded * na * ka / self.flops
        memory = 2.0 * (ma * ka + ka * na + ma * na) / self.bw
        return self.alpha + np.maximum(compute, memory)

    @classmethod
    def fit(
        cls,
        m: ArrayLike,
        n: ArrayLike,
        k: ArrayLike,
        y: ArrayLike,
        guess: tuple[float, float, float] = (5e-6, 5e14, 2e12),
    ) -> Roofline:
        """Least squares on log time (relative error), all three parameters positive."""
        from scipy.optimize import least_squares

        ma, na, ka, ya = (np.asarray(v, float) for v in (m, n, k, y))

        def resid(th: np.ndarray) -> np.ndarray:
            a, f, b = np.exp(th)
            return np.log(cls(alpha=a, flops=f, bw=b).predict(ma, na, ka)) - np.log(ya)

        r = least_squares(resid, x0=np.log(np.asarray(guess)))
        a, f, b = np.exp(r.x)
        return cls(alpha=float(a), flops=float(f), bw=float(b))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "roofline",
            "alpha": self.alpha,
            "flops": self.flops,
            "bw": self.bw,
            "tile_m": self.tile_m,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class FitQuality:
    """How well a fitted model matches measurements: R² and held-out APE (fractions)."""

    r2: float
    heldout_median_ape: float | None
    heldout_p90_ape: float | None
    n_fit: int
    n_heldout: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "r2": self.r2,
            "heldout_median_ape": self.heldout_median_ape,
            "heldout_p90_ape": self.heldout_p90_ape,
            "n_fit": self.n_fit,
            "n_heldout": self.n_heldout,
        }


def r_squared(pred: ArrayLike, y: ArrayLike) -> float:
    p, ya = np.asarray(pred, float), np.asarray(y, float)
    ss_res = float(np.sum((ya - p) ** 2))
    ss_tot = float(np.sum((ya - ya.mean()) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0


def ape(pred: ArrayLike, y: ArrayLike) -> np.ndarray:
    """Absolute percentage errors as fractions."""
    p, ya = np.asarray(pred, float), np.asarray(y, float)
    return np.abs(p - ya) / ya


def quality(
    pred_fit: ArrayLike,
    y_fit: ArrayLike,
    pred_test: ArrayLike | None = None,
    y_test: ArrayLike | None = None,
) -> FitQuality:
    """R² on fitted rows; median and p90 APE on held-out rows when given."""
    med = p90 = None
    n_test = 0
    if pred_test is not None and y_test is not None and len(np.asarray(y_test)):
        e = ape(pred_test, y_test)
        med, p90, n_test = float(np.median(e)), float(np.percentile(e, 90)), len(e)
    return FitQuality(
        r2=r_squared(pred_fit, y_fit),
        heldout_median_ape=med,
        heldout_p90_ape=p90,
        n_fit=len(np.asarray(y_fit)),
        n_heldout=n_test,
    )


def model_from_dict(d: dict[str, Any]) -> AlphaBeta | Piecewise | Roofline:
    """Inverse of the models' ``to_dict``."""
    kind = d.get("kind")
    if kind == "alpha_beta":
        return AlphaBeta(alpha=float(d["alpha"]), beta=float(d["beta"]))
    if kind == "piecewise":
        return Piecewise(
            segments=tuple(AlphaBeta(alpha=a, beta=b) for a, b in d["segments"]),
            breaks=tuple(d["breaks"]),
        )
    if kind == "roofline":
        return Roofline(
            alpha=d["alpha"], flops=d["flops"], bw=d["bw"], tile_m=int(d.get("tile_m", 64))
        )
    raise ValueError(f"unknown model kind {kind!r}")
