"""One measured kernel variant (GPU x engine x op x kernel/dtype): model, residuals, lookups.

Built from the table rows of that variant (duplicates averaged by their median):

- the :class:`~.fit.Analytic` model fitted to all rows;
- exact lookup: a row measured with the very same columns is returned as ``measured``;
- lines: along the last token axis of one shape (all other columns equal), the log residual
  is interpolated linearly in log2 of that axis; past the line's ends the nearer end's
  residual carries on (the price stays continuous and monotone at a table edge);
- the :class:`~.fit.ResidualField` across shapes for everything else inside the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np

from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import SM_COUNT_COLUMN, Family, Features
from moeplan.cost.kerneldb.fit import Analytic, ResidualField, sm_count


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
