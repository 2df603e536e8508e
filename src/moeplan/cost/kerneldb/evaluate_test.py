"""The final test error of the kernel database on the frozen test fold (:mod:`.frozen_fold`).

Every frozen table (B200 and GB200) is read twice by the I/O layer: the database's copy
without its test-fold rows (every fit, residual field and price) and the test-fold rows alone
(:func:`moeplan.kernel_tables.frozen_fold_loaders`). Each test row of the kernel the database
prices its dtype with (the engine's default for the dtype) is priced by
:meth:`~.db.KernelDB.seconds_many` on its own GPU as a user's question is — its shape and
dtype columns, no kernel named — and scored ``|priced / measured - 1|``. No test row is in
any table the database holds, so every price is an interpolation or the variant's model
(never ``measured``).

Cells are GPU x operation x dtype (the family's dtype columns, ``kernel_source`` aside: the
MoE weight dtype, attention's compute and KV-cache dtypes, an MLA module's projections),
pooled over the engines (``engine = "all"``) and per engine; a cell is judged
(:data:`MEDIAN_TARGET`, :data:`P90_TARGET`) when it has at least :data:`MIN_ROWS` rows from
:data:`MIN_SHAPES` test shapes. Pure: tables in, figures out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from moeplan.cost.kerneldb.db import KernelDB
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES
from moeplan.cost.kerneldb.family import TABLE_COLS
from moeplan.cost.kerneldb.frozen_fold import LOAD_COLUMNS, TOKEN_AXES
from moeplan.cost.kerneldb.variant import KernelTable, row_keys

#: the targets of the final test error (median, 90th percentile of |priced / measured - 1|)
MEDIAN_TARGET, P90_TARGET = 0.10, 0.25
#: a cell is judged against the targets from this many rows of this many test shapes
MIN_ROWS, MIN_SHAPES = 30, 3
METHOD = "frozen_test"


@dataclass(frozen=True, kw_only=True, slots=True)
class FoldCell:
    """Median / p90 error of one GPU x engine x op x dtype cell of the test fold."""

    gpu: str
    engine: str  # an engine, or "all" (pooled)
    op: str
    dtype: str
    rows: int
    shapes: int
    median: float
    p90: float

    @property
    def judged(self) -> bool:
        return self.rows >= MIN_ROWS and self.shapes >= MIN_SHAPES

    @property
    def met(self) -> bool:
        return self.median <= MEDIAN_TARGET and self.p90 <= P90_TARGET

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {k: getattr(self, k) for k in self.__slots__}
        return out | {"method": METHOD, "judged": self.judged, "met": self.met}


def dtype_label(op: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each row's dtype cell: the family's variant columns other than the kernel, joined
    ``column=value`` (``moe_dtype=nvfp4``; ``attn_dtype=bfloat16 kv_cache_dtype=fp8``)."""
    fam = KERNEL_FAMILIES[op]
    names = [c for c in fam.variant_cols if c not in TABLE_COLS and c in cols]
    n = len(next(iter(cols.values())))
    if not names:
        return np.full(n, "-")
    vals = [np.asarray(cols[c]).astype(str) for c in names]
    return np.array([" ".join(f"{c}={v[i]}" for c, v in zip(names, vals, strict=True))
                     for i in range(n)])  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scored:
    """Per-row errors of one test table: dtype cell, shape key and error of each row."""

    gpu: str
    engine: str
    op: str
    dtype: np.ndarray
    shape: np.ndarray
    err: np.ndarray


def score_table(db: KernelDB, device: Device, test: KernelTable) -> Scored | None:
    """The test rows of one table priced by ``db`` on ``device`` (its own GPU), each as a
    user's question of its dtype is: the rows of the kernel the database prices that dtype
    with (:meth:`~.db.KernelDB.choose`: the engine's default kernel), not the other kernels
    the collector also timed (a price the database never gives)."""
    if not len(test.latency):
        return None
    fam = KERNEL_FAMILIES[test.op]
    cols = {c: np.asarray(test.columns[c]) for c in fam.columns if c in test.columns}
    dtype = dtype_label(test.op, cols)
    names = [c for c in fam.variant_cols if c not in TABLE_COLS and c in cols]
    keep = np.zeros(len(dtype), bool)
    for d in sorted(set(dtype.tolist())):
        sel = dtype == d
        i = int(np.argmax(sel))
        key = db.choose(test.gpu, test.engine, test.op, {c: str(cols[c][i]) for c in names})
        if key is None:
            continue
        chosen = dict(zip(fam.variant_cols, key, strict=True))
        for c in TABLE_COLS:
            if c in chosen and c in cols:
                sel = sel & (np.asarray(cols[c]).astype(str) == chosen[c])
        keep |= sel
    if not keep.any():
        return None
    cols = {c: v[keep] for c, v in cols.items()}
    query = {c: v for c, v in cols.items() if c not in TABLE_COLS}
    secs = db.seconds_many(test.op, device, test.engine, query)
    shape_cols = tuple(c for c in query if c not in TOKEN_AXES and c not in LOAD_COLUMNS)
    return Scored(
        test.gpu,
        test.engine,
        test.op,
        dtype[keep],
        np.array([repr(k) for k in row_keys(query, shape_cols, int(keep.sum()))]),
        np.abs(secs / test.latency[keep] - 1.0),
    )


def cells(scored: Iterable[Scored]) -> list[FoldCell]:
    """Per GPU x op x dtype: pooled over engines, then per engine."""
    groups: dict[tuple[str, str, str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for s in scored:
        for d in sorted(set(s.dtype.tolist())):
            sel = s.dtype == d
            for engine in ("all", s.engine):
                key = (s.gpu, engine, s.op, d)
                groups.setdefault(key, []).append((s.err[sel], s.shape[sel]))
    out = []
    for (gpu, engine, op, d), parts in sorted(groups.items()):
        err = np.concatenate([e for e, _ in parts])
        shapes = len({f"{i}|{k}" for i, (_, ks) in enumerate(parts) for k in ks.tolist()})
        out.append(
            FoldCell(gpu=gpu, engine=engine, op=op, dtype=d, rows=len(err), shapes=shapes,
                     median=float(np.median(err)), p90=float(np.percentile(err, 90)))
        )  # fmt: skip
    return out


def fold_scores(
    db: KernelDB,
    devices: Mapping[str, Device],
    tests: Iterable[KernelTable],
    ops: Iterable[str] | None = None,
) -> list[Scored]:
    """The scored rows of the test-fold tables ``tests`` (module docstring)."""
    wanted = None if ops is None else set(ops)
    scored = [score_table(db, devices[t.gpu], t) for t in tests if wanted is None or t.op in wanted]
    return [s for s in scored if s is not None]


def fold_errors(
    db: KernelDB,
    devices: Mapping[str, Device],
    tests: Iterable[KernelTable],
    ops: Iterable[str] | None = None,
) -> list[FoldCell]:
    """The final test error cells of the test-fold tables ``tests`` (module docstring)."""
    return cells(fold_scores(db, devices, tests, ops))


#: the price source a test row of a frozen table gets (no test row is in a table the
#: database holds: an interpolation or the variant's model, module docstring)
STATED_SOURCE = "interpolated"


def stated_errors(scored: Iterable[Scored]) -> list[dict[str, object]]:
    """The error stated beside a price of a frozen table: per GPU x engine x op, the median
    and p90 of the test rows' errors pooled over the dtypes (a price names its table, not
    the cell), with the rows and shapes behind it. The rows of ``heldout_errors.json``
    (``gpu``, ``engine``, ``op``, ``source``, ``median``, ``p90``) so the database reads them
    as it reads the development folds' errors of the other GPUs."""
    groups: dict[tuple[str, str, str], list[Scored]] = {}
    for s in scored:
        groups.setdefault((s.gpu, s.engine, s.op), []).append(s)
    out: list[dict[str, object]] = []
    for (gpu, engine, op), parts in sorted(groups.items()):
        err = np.concatenate([p.err for p in parts])
        shapes = len({f"{i}|{k}" for i, p in enumerate(parts) for k in p.shape.tolist()})
        out.append({
            "gpu": gpu, "engine": engine, "op": op, "source": STATED_SOURCE,
            "median": float(np.median(err)), "p90": float(np.percentile(err, 90)),
            "rows": len(err), "shapes": shapes, "method": METHOD,
        })  # fmt: skip
    return out


def proxy_errors(
    tables: Iterable[tuple[str, str, str]],
    stated: list[dict[str, object]],
    dev: Mapping[tuple[str, str, str, str], tuple[float, float]],
    order: Mapping[str, tuple[str, ...]],
) -> list[dict[str, object]]:
    """The error stated beside the prices of a frozen table the test fold holds no scored row
    of (whole-shape folds leave a table of one or two shapes without test rows): the same
    op's, from the nearest source, named in ``method``: the test fold's errors of the same
    op on the same GPU (other engines), then on the GPUs of ``order`` (the database's
    :data:`~.db.REFERENCE_ORDER`: the other Blackwell GPU first), then the development
    folds' error ``dev`` of the op on an unfrozen GPU of ``order``. Pooled errors are not at
    hand here, so the largest median and p90 of the candidates are stated (a bound, not a
    pooled figure)."""
    by_op: dict[tuple[str, str], list[dict[str, object]]] = {}
    for e in stated:
        by_op.setdefault((str(e["gpu"]), str(e["op"])), []).append(e)
    have = {(e["gpu"], e["engine"], e["op"]) for e in stated}
    out: list[dict[str, object]] = []
    for gpu, engine, op in sorted(tables):
        if (gpu, engine, op) in have:
            continue
        for ref in order.get(gpu, (gpu,)):
            found = [(float(e["median"]), float(e["p90"])) for e in by_op.get((ref, op), [])]
            method = f"{METHOD} of {op} on {ref}"
            if not found and (ref, engine, op, STATED_SOURCE) in dev:
                found, method = [dev[(ref, engine, op, STATED_SOURCE)]], f"heldout_shape on {ref}"
            if found:
                out.append({
                    "gpu": gpu, "engine": engine, "op": op, "source": STATED_SOURCE,
                    "median": max(m for m, _ in found), "p90": max(p for _, p in found),
                    "rows": 0, "shapes": 0, "method": f"proxy: {method}",
                })  # fmt: skip
                break
    return out


def transfer_scored(
    db: KernelDB, src: str, dst: str, ops: Iterable[str] | None = None
) -> list[Scored]:
    """Leave one GPU out: every development row of ``dst`` priced from ``src``'s variant of
    the same dtype, as the database transfers a price to a GPU without tables
    (:meth:`~.db.KernelDB.transferred_seconds`; the engine's default kernel for the dtype —
    the row's kernel name is dropped, a GPU's kernels are what changes). Rows of a dtype
    ``src`` did not measure are left out (no like-for-like reference)."""
    from moeplan.cost.kerneldb.evaluate import variant_rows

    wanted = None if ops is None else set(ops)
    out = []
    for gpu, engine, op in sorted(db.tables):
        if gpu != dst or (wanted is not None and op not in wanted):
            continue
        if (src, engine, op) not in db.tables:
            continue
        fam = KERNEL_FAMILIES[op]
        dev = db.devices[dst]
        for key in db.variants(dst, engine, op):
            want = {c: v for c, v in zip(fam.variant_cols, key, strict=True) if c not in TABLE_COLS}
            skey = db.choose(src, engine, op, want)
            if skey is None:
                continue
            cols, y = variant_rows(db, dst, engine, op, key)
            query = {c: v for c, v in cols.items() if c not in TABLE_COLS}
            pred = db.transferred_seconds(fam, dev, engine, src, skey, query)
            shape_cols = tuple(c for c in query if c not in TOKEN_AXES and c not in LOAD_COLUMNS)
            keys = row_keys(query, shape_cols, len(y))
            out.append(
                Scored(dst, engine, op, dtype_label(op, cols), np.array([repr(k) for k in keys]),
                       np.abs(pred / y - 1.0))
            )  # fmt: skip
    return out
