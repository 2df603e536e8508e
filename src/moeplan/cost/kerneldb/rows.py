"""The kernel database's per-row decisions, taken for all rows of one query at once.

:meth:`moeplan.cost.kerneldb.db.KernelDB.predict_many` answers every row of a query in the
same way — the variant its dtype columns name, then on a GPU with tables the first of: the
exact measured row, the shape line's interpolated residual, the line end's residual carried
on, the residual field, the bare model; never faster than the datasheet peak. This module
takes those decisions with array operations over the rows (a decode-attention grid of a few
hundred contexts is one query), giving each row exactly the price, source and detail that
the same row asked alone gets. A row raised to the datasheet floor is priced by the floor,
so its source is ``roofline`` (with the roofline's error), whatever priced it before. Pure:
no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

EDGE_NOTE = "residual of the shape's last measured row carried on"
BEYOND_NOTE = "shape beyond the table: nearest shape's residual"
PEAK_NOTE = "raised to the datasheet peak"
DTYPE_NOTE = "no table for this dtype: another dtype's model"
#: a price read from another engine release's table (``KernelDB._release``)
RELEASE_NOTE = "; for the requested engine release:"


def row_groups(
    names: Sequence[str], cols: Mapping[str, np.ndarray], n: int
) -> list[tuple[dict[str, str], np.ndarray | None]]:
    """Rows grouped by the values (as strings) of the variant columns ``names``: a list of
    (those values, the rows' indices); ``None`` as indices when every row shares them."""
    if n == 1:
        return [({c: str(np.asarray(cols[c])[0]) for c in names}, None)]
    words = {c: np.asarray(cols[c]).astype(str) for c in names}
    if all(bool((a == a[0]).all()) for a in words.values()):
        return [({c: str(a[0]) for c, a in words.items()}, None)]
    groups: dict[tuple, list[int]] = {}
    for i in range(n):
        want = {c: str(words[c][i]) for c in names}
        groups.setdefault(tuple(sorted(want.items())), []).append(i)
    return [(dict(k), np.asarray(idx)) for k, idx in groups.items()]


def own_rows(
    label: str,
    lookups: tuple[np.ndarray, np.ndarray, np.ndarray],
    base: np.ndarray,
    field: tuple[np.ndarray, np.ndarray, np.ndarray],
    peak: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seconds, source and detail (object arrays) of each row priced on its table GPU.

    ``lookups``: exact latency, line residual and line-end residual (nan where none);
    ``base``: the variant's analytic model; ``field``: (residual-field correction, inside
    the measured box, beyond a carry axis); ``peak``: the datasheet floor."""
    exact, line, edge = lookups
    corr, inside, carried = field
    if len(base) == 1:  # one row (the memoised scalar path): the same decision on floats
        one = _one_row(label, [float(a[0]) for a in (*lookups, base, corr, peak)], field)
        return np.asarray([one[0]]), np.asarray([one[1]], object), np.asarray([one[2]], object)
    measured = np.isfinite(exact)
    on_line = ~measured & np.isfinite(line)
    on_edge = ~measured & ~on_line & np.isfinite(edge)
    in_field = ~(measured | on_line | on_edge) & inside
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.where(measured, exact, base)
        s = np.where(on_line, base * np.exp(np.where(on_line, line, 0.0)), s)
        s = np.where(on_edge, base * np.exp(np.where(on_edge, edge, 0.0)), s)
        s = np.where(in_field, base * np.exp(np.where(in_field, corr, 0.0)), s)
    src = np.full(len(s), "transferred", dtype=object)
    src[measured] = "measured"
    src[on_line | in_field] = "interpolated"
    detail = np.full(len(s), label, dtype=object)
    detail[on_edge] = f"{label}; {EDGE_NOTE}"
    detail[in_field & carried] = f"{label}; {BEYOND_NOTE}"
    raised = s < peak
    if raised.any():
        s = np.where(raised, peak, s)
        src[raised] = "roofline"  # the floor priced it, whatever the row's own source
        detail[raised] = f"{label}; {PEAK_NOTE}"
    return s, src, detail


def _one_row(
    label: str, v: list[float], field: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[float, str, str]:
    """:func:`own_rows` of one row: ``v`` = exact, line, edge, base, correction, peak."""
    exact, line, edge, base, corr, peak = v
    detail = label
    if math.isfinite(exact):
        s, src = exact, "measured"
    elif math.isfinite(line):
        s, src = base * float(np.exp(line)), "interpolated"
    elif math.isfinite(edge):
        s, src = base * float(np.exp(edge)), "transferred"
        detail = f"{label}; {EDGE_NOTE}"
    elif field[1][0]:
        s, src = base * float(np.exp(corr)), "interpolated"
        if field[2][0]:
            detail = f"{label}; {BEYOND_NOTE}"
    else:
        s, src = base, "transferred"
    if s < peak:
        s, src, detail = peak, "roofline", f"{label}; {PEAK_NOTE}"
    return s, src, detail
