"""Price provenance as shares of priced seconds: how much of a priced step or run each source
(measured, interpolated, transferred, roofline) priced, its held-out error and why it is not
measured.

A step's time is built from prices by sums, counts (layers, micro-batches) and maxima
(overlap, pipeline periods): it is a piecewise-linear function of the prices, homogeneous of
degree one. So it splits exactly into each price's seconds times its weight on the step
(Euler's theorem for homogeneous functions): the seconds one price key contributes are the
step's change when that key's prices are nudged by :data:`EPS`, divided by :data:`EPS` — a
price charged once per layer per iteration counts that many times, a price hidden under an
overlap counts zero. :func:`attribute` prices the step once with an accounting copy of the
cost model (:func:`accounting_copy`: it notes every kernel price's key,
:mod:`moeplan.cost.price_keys`) and once per key with that key's prices nudged. What no kernel
price explains — GEMMs, projections and collectives from the GEMM/NCCL model, datasheet terms
— is the ``roofline`` source (:data:`moeplan.cost.price_keys.ANALYTIC`). :func:`summarize`
turns the split into the ``price_sources`` record; its shares sum to 1.

The accounting copy prices afresh (its own memos), so the search's cost model, its memos and
its figures are untouched. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from moeplan.cost.kerneldb.sources import SOURCES, Prediction
from moeplan.cost.model import CostModel
from moeplan.cost.price_keys import ANALYTIC, WHY_NO_ENGINE, PriceKey

#: Relative nudge of one key's prices: small enough that no maximum changes branch, large
#: enough that float64 rounding of a step (~1e-16 relative) stays ~1e-10 of the split.
EPS = 1e-6


def accounting_copy(
    cm: CostModel, scale: dict[PriceKey, float] | None = None, shared: dict | None = None
) -> CostModel:
    """A fresh :class:`CostModel` with ``cm``'s cluster, profile, engine and tables that notes
    the key of every kernel price it charges and multiplies the keys in ``scale``; copies
    given one ``shared`` dict share their unscaled decode-grid answers."""
    copy = CostModel(cm.cluster, cm.profile, cm.engine, cm._kdb)
    copy._scale = dict(scale or {})
    if shared is not None:
        copy._kinds = shared
    return copy


Split = tuple[list[float], list[dict[PriceKey, float]], dict[PriceKey, Prediction]]


def attribute(cm: CostModel, price: Callable[[CostModel], Sequence[float]]) -> Split:
    """Each item ``price(cost)`` returns, split by price key (module docstring): the items'
    seconds, per item the seconds each key contributes, and one prediction per key (its
    source, errors and detail). ``price`` must build everything it prices from ``cost``."""
    shared: dict = {}
    first = accounting_copy(cm, shared=shared)
    base = [float(t) for t in price(first)]
    seen = dict(first._seen)
    parts: list[dict[PriceKey, float]] = [{} for _ in base]
    for key in seen:
        got = price(accounting_copy(cm, {key: 1.0 + EPS}, shared))
        for i, (t0, t1) in enumerate(zip(base, got, strict=True)):
            d = (float(t1) - t0) / EPS
            if d > 0.0:
                parts[i][key] = d
    return base, parts, seen


def summarize(
    split: Split,
    weights: Sequence[float] | None = None,
    analytic_error: float | None = None,
    analytic_reason: str = ANALYTIC,
) -> dict[str, dict[str, Any]]:
    """``price_sources``: per source the seconds it priced (item ``i`` counted ``weights[i]``
    times, 1 by default), its share, its held-out error (the seconds-weighted median of its
    prices' held-out median errors; ``analytic_error`` for the GEMM/NCCL model's share), the
    fraction of its seconds that figure covers (prices with no held-out figure are left
    out of it) and why it is not measured (its causes, most seconds first). Shares sum
    to 1."""
    base, parts, preds = split
    w = list(weights) if weights is not None else [1.0] * len(base)
    by_key: dict[PriceKey, float] = {}
    analytic = 0.0
    for t, p, wi in zip(base, parts, w, strict=True):
        kernel = sum(p.values())
        # a tie under a maximum counts both sides: scale the kernel parts back to the step
        f = t / kernel if kernel > t > 0.0 else (0.0 if t <= 0.0 else 1.0)
        for k, s in p.items():
            by_key[k] = by_key.get(k, 0.0) + wi * s * f
        analytic += wi * max(0.0, t - kernel * f)
    total = sum(by_key.values()) + analytic
    out: dict[str, dict[str, Any]] = {}
    for src in SOURCES:
        keys = {k: s for k, s in by_key.items() if k[1] == src and s > 0.0}
        secs = sum(keys.values()) + (analytic if src == "roofline" else 0.0)
        errs = [(preds[k].error, s) for k, s in keys.items() if preds[k].error is not None]
        if src == "roofline" and analytic > 0.0 and analytic_error is not None:
            errs.append((analytic_error, analytic))
        causes: dict[str, float] = {}
        for k, s in keys.items():
            causes[k[2]] = causes.get(k[2], 0.0) + s
        if src == "roofline" and analytic > 0.0:
            causes[analytic_reason] = causes.get(analytic_reason, 0.0) + analytic
        known = sum(x for e, x in errs if e is not None)
        out[src] = {
            "seconds": secs,
            "share": secs / total if total > 0.0 else 0.0,
            "heldout_error": _weighted_median(errs),
            "heldout_covers": known / secs if secs > 0.0 else None,
            "reason": None
            if src == "measured" or not causes
            else "; ".join(c for c, _ in sorted(causes.items(), key=lambda x: -x[1])),
        }
    return out


def analytic(cm: CostModel) -> dict[str, Any]:
    """:func:`summarize`'s figures for the GEMM/NCCL model's share on ``cm``: its stated
    held-out error (the median error of the cluster's fitted GEMM model on its held-out rows;
    ``None`` for datasheet rooflines or published coefficients, whose error is unmeasured)
    and why it is not measured (no kernel table for the operation, or no engine asked)."""
    q = cm.profile.quality.get("gemm") if cm.profile is not None else None
    return {
        "analytic_error": None if q is None else q.heldout_median_ape,
        "analytic_reason": ANALYTIC if cm.engine is not None else WHY_NO_ENGINE,
    }


def _weighted_median(pairs: list[tuple[float | None, float]]) -> float | None:
    """The median of values weighted by seconds (``None`` when there is none)."""
    pairs = sorted((v, s) for v, s in pairs if v is not None and s > 0.0)  # type: ignore[misc]
    if not pairs:
        return None
    half, acc = sum(s for _, s in pairs) / 2.0, 0.0
    for v, s in pairs:
        acc += s
        if acc >= half:
            return float(v)  # type: ignore[arg-type]
    return float(pairs[-1][0])  # type: ignore[arg-type]


#: the two halves :func:`headline_interval` compares
DOMINANT = ("simulation noise", "kernel prices")
#: the least share of priced seconds the kernel prices' band must cover to be compared with
#: the simulation noise: below it most seconds have no held-out figure and no half is named
MIN_COVER = 0.5


def price_band(sources: dict[str, dict[str, Any]]) -> tuple[float | None, float]:
    """(relative error band, share of priced seconds it covers) of a figure priced by
    ``sources`` (:func:`summarize`'s record). Each source's prices are taken as off together
    by its held-out error ``e_s`` (one systematic deviation: a table's interpolation, a
    transfer to another GPU, the roofline's efficiencies — correlated within a source), the
    sources independently of each other, so a source moves the figure by ``share_s e_s`` and
    the band is ``sqrt(sum_s (share_s e_s)^2)``. The held-out error is a median relative
    error (half of the held-out prices lie within it), so the band is a median band too. A
    source without a held-out figure (``heldout_error`` ``None``; its ``heldout_covers`` the
    part of its seconds that has one) is left out and the covered share says so; ``None``
    when no priced second has a figure."""
    acc, covered = 0.0, 0.0
    for r in sources.values():
        err, share = r.get("heldout_error"), float(r.get("share") or 0.0)
        if err is None or share <= 0.0:
            continue
        part = share * float(r.get("heldout_covers") or 1.0)
        acc += (part * float(err)) ** 2
        covered += part
    return (acc**0.5 if covered > 0.0 else None), min(1.0, covered)


def headline_interval(
    simulation_rel: float | None, sources: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The headline figure's two error halves side by side: ``simulation_rel``, the 95 %
    interval's relative half-width from independent simulated streams (the capacity search;
    ``None`` where the run has none: a closed loop, a P/D pair), and the kernel prices' band
    (:func:`price_band`), which moves a throughput or capacity by the same relative amount
    to first order (both are inverse in the step time). ``combined_rel`` adds the two as
    independent errors (root of the sum of squares, the unknown half as 0); ``dominant`` is
    the larger half (``None`` when either is unknown, or the band covers less than
    :data:`MIN_COVER` of the priced seconds)."""
    band, covers = price_band(sources)
    halves = [simulation_rel, band]
    known = [h for h in halves if h is not None]
    dominant = None
    if simulation_rel is not None and band is not None and covers >= MIN_COVER:
        dominant = DOMINANT[1] if band > simulation_rel else DOMINANT[0]
    return {
        "simulation_noise_rel": simulation_rel,
        "kernel_price_error_rel": band,
        "kernel_price_error_covers": covers,
        "combined_rel": sum(h * h for h in known) ** 0.5 if known else None,
        "dominant": dominant,
        "definition": "simulation noise: the 95 % interval's half-width over independent "
        "simulated streams; kernel prices: each price source's held-out median error times "
        "its share of the priced seconds, sources independent (root of the sum of squares), "
        "over the share of seconds with a held-out figure; combined: both as independent "
        "relative errors",
    }
