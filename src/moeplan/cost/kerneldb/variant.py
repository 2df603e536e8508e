"""One measured kernel variant (GPU x engine x op x kernel/dtype): model, residuals, lookups.

Built from the table rows of that variant (duplicates averaged by their median), less its
spikes (:func:`spikes`):

- the :class:`~.fit.Analytic` model fitted to all rows;
- exact lookup: a row measured with the very same columns is returned as ``measured``;
- lines: along the last token axis of one shape (all other columns equal), the log residual
  is interpolated linearly in log2 of that axis; past the line's ends the nearer end's
  residual carries on (the price stays continuous and monotone at a table edge);
- the :class:`~.fit.ResidualField` across shapes for everything else inside the table.

Spikes: NVIDIA's tables time most shapes once, and a few cells are measurement glitches — a
cell several times its neighbours on its own line while every other line steps smoothly
between the same two sizes (H100 vLLM 0.14.0 prefill attention, 8 heads on one KV head, one
sequence: 0.56 ms at 12,288 tokens, 3.61 ms at 16,384, 1.00 ms with two KV heads; vLLM's MLA
decode tables: 0.5 ms at step 7 between 0.15 ms neighbours). Such a cell would be returned as
``measured``, bend its neighbours' interpolation and, at a line's end, be carried past the
table's edge (a 32,000-token prompt priced 3.5x its trend). Decision: along each shape line
(the last of the family's columns), the step of log latency between two consecutive sizes is
compared with the median step between the same two sizes over every line of the variant that
has both (at least :data:`SPIKE_MIN_LINES` of them); a cell is dropped when it departs from
that median by more than :data:`SPIKE_FACTOR` on the way in and the opposite way on the way
out (an isolated spike inside a line), or, at a line's end, upward on the way in after a
regular step (the cell a price past the edge would carry). A line's first cell is never
dropped (the first steps differ by shape: fused MoE's 1 -> 4 tokens grows with the experts a
shape touches), nor judged on a step no other line shares. 643 of the 2,996,317 rows of the
shipped tables (every version; 0.021 %) are dropped; ``tests/test_cost_kerneldb.py`` checks
the rule on made rows and on the H100 cell above.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np

from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import SM_COUNT_COLUMN, Family, Features
from moeplan.cost.kerneldb.fit import Analytic, ResidualField, sm_count

#: a measured row departing from every other line's step between the same two sizes by more
#: than this factor, in and out (or upward at a line's end), is a spike (module docstring):
#: twice, where the shipped tables' lines step within 1.25x of that median at the 90th
#: percentile and 1.68x at the 99th (0.19 % of the steps depart by more than twice)
SPIKE_FACTOR = 2.0
#: the steps between two sizes are compared with their median over at least this many lines
SPIKE_MIN_LINES = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelTable:
    """Rows of one measured table: ``columns`` (arrays) and ``latency`` in seconds."""

    gpu: str
    engine: str
    op: str
    version: str
    columns: Mapping[str, np.ndarray]
    latency: np.ndarray
    origin: str = ""


class LazyTables(Mapping[tuple[str, str, str], KernelTable]):
    """``(gpu, engine, op) -> KernelTable``, each read by its loader on first access."""

    def __init__(self, loaders: Mapping[tuple[str, str, str], Callable[[], KernelTable]]) -> None:
        self._loaders = dict(loaders)
        self._cache: dict[tuple[str, str, str], KernelTable] = {}

    def __getitem__(self, key: tuple[str, str, str]) -> KernelTable:
        if key not in self._cache:
            self._cache[key] = self._loaders[key]()
        return self._cache[key]

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)

    def __contains__(self, key: object) -> bool:
        return key in self._loaders


def row_keys(cols: Mapping[str, np.ndarray], names: tuple[str, ...], n: int) -> list[tuple]:
    """Hashable per-row keys over ``names`` (numbers as floats, the rest as strings)."""
    parts = []
    for c in names:
        a = np.asarray(cols[c])
        parts.append(a.astype(float).tolist() if a.dtype.kind in "iuf" else a.astype(str).tolist())
    return list(zip(*parts, strict=True)) if parts else [()] * n


def dedupe(
    cols: Mapping[str, np.ndarray], y: np.ndarray, names: tuple[str, ...]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One row per distinct key over ``names``; latency = median of the duplicates."""
    keys = row_keys(cols, names, len(y))
    index: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        index.setdefault(k, []).append(i)
    first = np.array([v[0] for v in index.values()], dtype=int)
    med = np.array([y[v[0]] if len(v) == 1 else float(np.median(y[v])) for v in index.values()])
    return {c: np.asarray(cols[c])[first] for c in names}, med


def spikes(keys: list[tuple], y: np.ndarray) -> np.ndarray:
    """Rows that are isolated spikes along their shape line (module docstring)."""
    lines: dict[tuple, list[tuple[float, int]]] = {}
    for i, k in enumerate(keys):
        lines.setdefault(k[:-1], []).append((float(k[-1]), i))
    ly = np.log(np.maximum(y, 1e-30))
    steps: dict[tuple[float, float], list[float]] = {}
    order = {}
    for shape, pts in lines.items():
        pts.sort()
        order[shape] = pts
        for (xa, ia), (xb, ib) in zip(pts, pts[1:], strict=False):
            steps.setdefault((xa, xb), []).append(ly[ib] - ly[ia])
    med = {p: float(np.median(v)) for p, v in steps.items() if len(v) >= SPIKE_MIN_LINES}
    far = np.log(SPIKE_FACTOR)
    out = np.zeros(len(y), dtype=bool)
    for pts in order.values():
        n = len(pts)
        if n < 2:
            continue
        dev: list[float | None] = []
        for (xa, ia), (xb, ib) in zip(pts, pts[1:], strict=False):
            m = med.get((xa, xb))
            dev.append(None if m is None else ly[ib] - ly[ia] - m)
        big = [d is not None and abs(d) > far for d in dev]
        regular = [d is not None and abs(d) <= far for d in dev]
        for j in range(1, n):
            if j < n - 1:  # inside the line: off by the factor in both directions
                hit = big[j - 1] and big[j] and (dev[j - 1] or 0.0) * (dev[j] or 0.0) < 0
            else:  # its end: a jump up after a regular step (carried past the edge)
                hit = big[j - 1] and (dev[j - 1] or 0.0) > 0 and (n == 2 or regular[j - 2])
            out[pts[j][1]] = hit
    return out


class VariantModel:
    """Model + residual lookups of one kernel variant on its own (table) GPU."""

    def __init__(
        self,
        family: Family,
        cols: Mapping[str, np.ndarray],
        y: np.ndarray,
        device: Device,
        label: str,
    ) -> None:
        self.family, self.device, self.label = family, device, label
        self.cols, self.y = dedupe(cols, y, family.columns)
        names = family.shape_cols + family.x_cols
        keep = ~spikes(row_keys(self.cols, names, len(self.y)), self.y)
        if not keep.all():
            self.cols = {c: v[keep] for c, v in self.cols.items()}
            self.y = self.y[keep]
        self.key = {c: str(np.asarray(self.cols[c])[0]) for c in family.variant_cols if len(y)}
        self.features = self.featurize(self.cols)
        kernel = self.key.get("kernel_source", "")
        host = kernel in family.host_floor_kernels
        self.model = Analytic.fit(self.features, self.y, device, family.link, floor_in_norm=host)
        if family.wave_latency_transfers:
            self.model = replace(self.model, scale_work=False)
        self.residual = np.log(self.y) - np.log(
            self.model.predict(self.features, device, family.link)
        )
        weights, robust = family.field_options(kernel)
        self.field = ResidualField(
            self.features.coords, self.residual, weights, robust, family.carry_axes
        )
        names = family.shape_cols + family.x_cols
        keys = row_keys(self.cols, names, len(self.y))
        self.exact = dict(zip(keys, self.y.tolist(), strict=True))
        self._lines = self._build_lines(keys)

    @property
    def rows(self) -> int:
        return len(self.y)

    def featurize(self, cols: Mapping[str, np.ndarray], device: Device | None = None) -> Features:
        """The family's features of query rows priced by this variant: columns the query
        leaves out (the kernel, typically) take this variant's values, so kernel-specific
        terms (:mod:`.families`) apply to every row this variant answers; the rows run on
        ``device`` (default: this variant's GPU), whose SM count kernel dispatch rules read."""
        n = len(next(iter(cols.values())))
        full = {c: np.full(n, v) for c, v in self.key.items() if c not in cols}
        full[SM_COUNT_COLUMN] = np.full(n, float(sm_count(device or self.device)))
        return self.family.features({**cols, **full})

    def _build_lines(self, keys: list[tuple]) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
        acc: dict[tuple, list[tuple[float, float]]] = {}
        for k, r in zip(keys, self.residual.tolist(), strict=True):
            acc.setdefault(k[:-1], []).append((float(np.log2(max(k[-1], 1e-9))), r))
        out = {}
        for k, pts in acc.items():
            pts.sort()
            out[k] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
        return out

    def lookup(self, cols: Mapping[str, np.ndarray], n: int):
        """Exact latencies (nan when not measured), line-interpolated log residuals (nan when
        the row's shape line does not bracket it) and, for a row past its shape line's ends,
        the log residual of the nearer end (nan when its shape was not measured): carried
        past the edge, it keeps the price continuous there and, the model being monotone in
        the token axis, monotone beyond it."""
        names = self.family.shape_cols + self.family.x_cols
        keys = row_keys(cols, names, n)
        exact = np.array([self.exact.get(k, np.nan) for k in keys])
        line = np.full(n, np.nan)
        edge = np.full(n, np.nan)
        shapes: dict[tuple, list[int]] = {}  # rows of each measured shape line
        for i, k in enumerate(keys):
            if k[:-1] in self._lines:
                shapes.setdefault(k[:-1], []).append(i)
        for shape, rows in shapes.items():
            xs_, rs = self._lines[shape]
            idx = np.asarray(rows)
            x = np.log2(np.maximum([keys[i][-1] for i in rows], 1e-9))
            on = (xs_[0] <= x) & (x <= xs_[-1]) if len(xs_) >= 2 else np.zeros(len(x), bool)
            line[idx[on]] = np.interp(x[on], xs_, rs)
            edge[idx[~on]] = np.where(x[~on] < xs_[0], rs[0], rs[-1])
        return exact, line, edge
