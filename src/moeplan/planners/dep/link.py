"""One A2E/E2A link model for every ``(ag, eg)`` split, consistent with a profile's fits.

FinDEP (paper 000, Fig. 7 / Eq. 9) publishes A2E α-β fits on the A6000 testbed for three
splits only: (ag, eg) = (1, 7), (2, 6), (4, 4), with β = 0.96, 1.28 and 2.55 ns per byte
received per expert GPU (1.04, 0.78, 0.39 GB/s). Every other split used to fall back to the
datasheet link (25 GB/s: 7–25x faster), so the ``(ag, eg)`` search always picked an unfitted
split and neighbours differed 7x.

Model (ours; the paper gives no formula): α and β are piecewise-linear in
``log2(ag / eg)`` through the fitted points — exact at the fitted splits, continuous and
monotone between them (β grows with the attention share: more senders per receiver), and
extended beyond the outermost fits with the slope of the nearest segment (α clamped at 0).
Using the ratio makes it defined for any GPU budget, not only 8. The interpolation is an
assumption about splits that were never measured; ``moeplan dep`` output says which were.
With no profile fits (or one), the cost model's own link model is used unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from moeplan.cost.linear import AlphaBeta


def _x(ag: int, eg: int) -> float:
    return math.log2(ag / eg)


def interpolated_a2e(
    fits: Mapping[tuple[int, int], AlphaBeta], ag: int, eg: int
) -> AlphaBeta | None:
    """The A2E α-β of split ``(ag, eg)`` from ``fits`` (module docstring); None with < 2 fits."""
    if (ag, eg) in fits:
        return fits[(ag, eg)]
    if len(fits) < 2:
        return None
    pts = sorted((_x(a, e), f.alpha, f.beta) for (a, e), f in fits.items())
    xs = np.array([p[0] for p in pts])
    x = _x(ag, eg)
    i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(pts) - 2))
    (x0, a0, b0), (x1, a1, b1) = pts[i], pts[i + 1]
    w = (x - x0) / (x1 - x0)
    return AlphaBeta(alpha=max(0.0, a0 + w * (a1 - a0)), beta=max(0.0, b0 + w * (b1 - b0)))


def a2e_seconds(cm, nbytes: float, ag: int, eg: int) -> float:
    """A2E (= E2A) of one chunk, ``nbytes`` received per expert GPU: the interpolated
    profile fit when the profile has fits, else :meth:`CostModel.a2e`."""
    return a2e_function(cm, ag, eg)(nbytes)


def a2e_function(cm, ag: int, eg: int):  # type: ignore[no-untyped-def]
    """:func:`a2e_seconds` of split ``(ag, eg)`` as a function of ``nbytes``, the fit
    interpolated once (a search prices hundreds of chunk sizes on one split)."""
    fits = getattr(cm.profile, "a2e", None) or {}
    fit = interpolated_a2e(fits, ag, eg)

    def seconds(nbytes: float) -> float:
        if fit is None or nbytes <= 0:
            return cm.a2e(nbytes, ag, eg)
        return fit(nbytes)

    return seconds


def a2e_source(cm, ag: int, eg: int) -> str:
    """Where the split's A2E model comes from: ``fitted``, ``interpolated`` or ``link``."""
    fits = getattr(cm.profile, "a2e", None) or {}
    if (ag, eg) in fits:
        return "fitted"
    return "interpolated" if len(fits) >= 2 else "link"
