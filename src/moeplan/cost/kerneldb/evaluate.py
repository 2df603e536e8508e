"""Held-out evaluation of the kernel database: whole shapes held out, and whole GPUs.

- Whole shapes: within each kernel variant, the distinct shapes (all columns but the token
  axes and the expert load) are split into :data:`FOLDS` seeded folds; each fold's shapes —
  every token count and every load of them — are predicted by a model and residual field
  built without them, the way :class:`~.db.KernelDB` predicts a layer it has not measured.
  (A MoE layer's balanced and power-law rows leave together: a user's new layer has neither,
  and the power-law rows validate the load model only if its balanced twin is not in the
  fit. Splitting by load as well gave 0.8-2.5 points lower medians and 3-9 points lower p90.)
- Leave one GPU out: the variant of the same dtype on the other table GPU (learned from A100
  to predict H100, and the reverse): that GPU's own price of the row times the ratio of its
  model scaled by the datasheet to its model, as the database transfers
  (:meth:`~.db.KernelDB.transferred_seconds`).
  For fused MoE a like-for-like breakdown (:data:`LIKE_FOR_LIKE`, only where it differs):
  the destination kernels whose library the source kernel shares; reported, not a bar.
- Roofline: the datasheet roofline (:data:`~.db.ROOFLINE`) on every row.

These folds are *development* error: they were read while the features, transfer rules and
constants were chosen (some constants were read from whole tables, e.g. in
:mod:`.attention_features`), so they say how well the model fits the tables it was shaped on.
The test error comes from the frozen test fold of tables never used for development
(:mod:`.frozen_fold`), whose rows no development path reads.

Errors are absolute relative errors ``|predicted / measured - 1|``, summarised per GPU x
engine x op x regime (tokens <= 64, 65-1024, > 1024; for ``moe`` also balanced vs power-law
load) as median and 90th percentile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from moeplan.cost.kerneldb.db import ROOFLINE, KernelDB, peak_time
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES, Family, Features, moe_kernel_class
from moeplan.cost.kerneldb.variant import VariantModel, dedupe, row_keys

FOLDS = 5
LOAD_COLS = ("distribution",)  # not part of a held-out layer's identity (module docstring)
REGIMES = (("tokens<=64", 0, 64), ("65-1024", 65, 1024), (">1024", 1025, float("inf")))
GPUS = ("h100_sxm", "a100_sxm")
#: method of the like-for-like-kernel leave-one-GPU-out breakdown (fused MoE; not a source)
LIKE_FOR_LIKE = "leave_one_gpu_out_like_kernels"


@dataclass(frozen=True, kw_only=True, slots=True)
class Scored:
    """Per-row errors of one evaluation (arrays of equal length)."""

    gpu: str
    engine: str
    op: str
    method: str  # heldout_shape | leave_one_gpu_out | LIKE_FOR_LIKE | roofline
    err: np.ndarray
    tokens: np.ndarray
    load: np.ndarray  # "balanced" / "power_law" / "" per row


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorRow:
    """Median / p90 error of one (gpu, engine, op, method, regime, load) cell."""

    gpu: str
    engine: str
    op: str
    method: str
    regime: str
    load: str
    n: int
    median: float
    p90: float

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}


def variant_rows(db: KernelDB, gpu: str, engine: str, op: str, key: tuple):
    """The deduplicated rows (columns, latency) of one variant's table."""
    t = db.tables[(gpu, engine, op)]
    fam = KERNEL_FAMILIES[op]
    sel = np.ones(len(t.latency), bool)
    for c, v in zip(fam.variant_cols, key, strict=True):
        sel &= np.asarray(t.columns[c]).astype(str) == v
    return dedupe(
        {c: np.asarray(t.columns[c])[sel] for c in fam.columns}, t.latency[sel], fam.columns
    )


def _load(op: str, cols) -> np.ndarray:
    if op != "moe":
        return np.full(len(next(iter(cols.values()))), "")
    d = np.asarray(cols["distribution"]).astype(str)
    return np.where(np.char.startswith(d, "power_law"), "power_law", "balanced")


def heldout_shapes(
    db: KernelDB,
    gpu: str,
    engine: str,
    op: str,
    seed: int = 0,
    folds: int = FOLDS,
    max_folds: int | None = None,
) -> Scored | None:
    """Whole-shape held-out errors of every variant of (gpu, engine, op)."""
    fam = KERNEL_FAMILIES[op]
    dev = db.devices[gpu]
    errs, toks, loads = [], [], []
    for key in db.variants(gpu, engine, op):
        cols, y = variant_rows(db, gpu, engine, op, key)
        shapes = row_keys(cols, tuple(c for c in fam.shape_cols if c not in LOAD_COLS), len(y))
        uniq = sorted(set(shapes))
        if len(uniq) < 2:
            continue
        rng = np.random.default_rng([seed, len(uniq)])
        fold_of = dict(zip(uniq, rng.permutation(len(uniq)) % folds, strict=True))
        fold = np.array([fold_of[s] for s in shapes])
        for fo in range(min(folds, max_folds or folds)):
            test = fold == fo
            if not test.any() or test.all():
                continue
            err, f = holdout(fam, cols, y, test, dev)
            errs.append(err)
            toks.append(f.tokens)
            loads.append(_load(op, {c: v[test] for c, v in cols.items()}))
    return _scored(gpu, engine, op, "heldout_shape", errs, toks, loads)


def holdout(
    fam: Family, cols: Mapping[str, np.ndarray], y: np.ndarray, test: np.ndarray, dev: Device
) -> tuple[np.ndarray, Features]:
    """Errors of the ``test`` rows predicted by a variant built from the other rows (and the
    test rows' features)."""
    vm = VariantModel(fam, {c: v[~test] for c, v in cols.items()}, y[~test], dev, "")
    f = vm.featurize({c: v[test] for c, v in cols.items()})
    return np.abs(_predict(vm, f, dev) / y[test] - 1), f


def leave_one_gpu_out(
    db: KernelDB, src: str, dst: str, engine: str, op: str, like_for_like: bool = False
) -> Scored | None:
    """Predict every row of ``dst`` from the ``src`` variant of the same dtype (the figure the
    bars test). ``like_for_like`` (fused MoE; a reported breakdown only): only the ``dst``
    variants whose kernel library matches the chosen ``src`` kernel's
    (:func:`~.families.moe_kernel_class`: Triton from Triton, CUTLASS from CUTLASS)."""
    fam = KERNEL_FAMILIES[op]
    if (src, engine, op) not in db.tables or (dst, engine, op) not in db.tables:
        return None
    dev = db.devices[dst]
    errs, toks, loads = [], [], []
    for key in db.variants(dst, engine, op):
        want = {c: v for c, v in zip(fam.variant_cols, key, strict=True) if c != "kernel_source"}
        skey = db.choose(src, engine, op, want)
        if skey is None:
            continue
        if like_for_like and op == "moe":
            dk, sk = (dict(zip(fam.variant_cols, k, strict=True)) for k in (key, skey))
            if moe_kernel_class(dk["kernel_source"]) != moe_kernel_class(sk["kernel_source"]):
                continue
        vm = db.variant(src, engine, op, skey)
        assert vm is not None
        cols, y = variant_rows(db, dst, engine, op, key)
        query = {c: v for c, v in cols.items() if c != "kernel_source"}
        f = vm.featurize(query, dev)
        pred = db.transferred_seconds(fam, dev, engine, src, skey, query)  # as the database
        errs.append(np.abs(pred / y - 1))
        toks.append(f.tokens)
        loads.append(_load(op, cols))
    return _scored(dst, engine, op, "leave_one_gpu_out", errs, toks, loads)


def _predict(vm: VariantModel, f: Features, dev: Device) -> np.ndarray:
    """What the database answers off its measured rows: model x residual, datasheet floor."""
    link = vm.family.link
    corr, _, inside = vm.field.query(f.coords)
    model = vm.model.scaled(vm.device, dev, link)
    pred = model.predict(f, dev, link) * np.exp(np.where(inside, corr, 0.0))
    return np.maximum(pred, peak_time(f, dev, link))


def _scored(
    gpu: str, engine: str, op: str, method: str, errs: list, toks: list, loads: list
) -> Scored | None:
    if not errs:
        return None
    return Scored(
        gpu=gpu,
        engine=engine,
        op=op,
        method=method,
        err=np.concatenate(errs),
        tokens=np.concatenate(toks),
        load=np.concatenate(loads),
    )


def roofline(db: KernelDB, gpu: str, engine: str, op: str) -> Scored | None:
    t = db.tables.get((gpu, engine, op))
    if t is None:
        return None
    fam = KERNEL_FAMILIES[op]
    cols, y = dedupe(t.columns, t.latency, fam.columns)
    f = fam.features(cols)
    err = np.abs(ROOFLINE.predict(f, db.devices[gpu], fam.link) / y - 1)
    return Scored(
        gpu=gpu,
        engine=engine,
        op=op,
        method="roofline",
        err=err,
        tokens=f.tokens,
        load=_load(op, cols),
    )


def summarize(scored: Iterable[Scored]) -> list[ErrorRow]:
    """Median / p90 per regime and load (plus an ``all`` row per evaluation)."""
    out = []
    for s in scored:
        cells = [("all", "all", np.ones(len(s.err), bool))]
        for name, lo, hi in REGIMES if s.op != "allreduce" else ():  # no token axis
            cells.append((name, "all", (s.tokens >= lo) & (s.tokens <= hi)))
        for load in sorted(set(s.load.tolist()) - {""}):
            for name, lo, hi in REGIMES:
                cells.append((name, load, (s.tokens >= lo) & (s.tokens <= hi) & (s.load == load)))
        for regime, load, sel in cells:
            if sel.any():
                out.append(
                    ErrorRow(
                        gpu=s.gpu,
                        engine=s.engine,
                        op=s.op,
                        method=s.method,
                        regime=regime,
                        load=load,
                        n=int(sel.sum()),
                        median=float(np.median(s.err[sel])),
                        p90=float(np.percentile(s.err[sel], 90)),
                    )
                )
    return out


def evaluate_all(
    db: KernelDB, ops: Iterable[str] | None = None, seed: int = 0, max_folds: int | None = None
) -> list[Scored]:
    """Every evaluation for every (gpu, engine, op) with tables on the development GPUs
    (:data:`GPUS`); B200 and GB200 are scored on their frozen test fold instead
    (:mod:`.evaluate_test`, ``moeplan calibrate --kernels --test-fold``)."""
    out = []
    for gpu, engine, op in sorted(db.tables):
        if gpu not in GPUS or (ops is not None and op not in ops):
            continue  # the frozen GPUs' tables: their test fold (:mod:`.evaluate_test`)
        other = GPUS[1] if gpu == GPUS[0] else GPUS[0]
        logo = leave_one_gpu_out(db, other, gpu, engine, op)
        like = leave_one_gpu_out(db, other, gpu, engine, op, True) if op == "moe" else None
        if like is not None and logo is not None and len(like.err) < len(logo.err):
            like = replace(like, method=LIKE_FOR_LIKE)  # reported next to the tested figure
        else:
            like = None
        for s in (
            heldout_shapes(db, gpu, engine, op, seed, max_folds=max_folds),
            logo,
            like,
            roofline(db, gpu, engine, op),
        ):
            if s is not None:
                out.append(s)
    return out


SOURCE_OF = {
    "heldout_shape": "interpolated",
    "leave_one_gpu_out": "transferred",
    "roofline": "roofline",
}


def error_table(rows: Iterable[ErrorRow]) -> list[dict[str, object]]:
    """The ``all``-regime rows as the database's per-source error table; GPUs without tables
    ("other") get the larger of the two leave-one-GPU-out / roofline figures."""
    out: list[dict[str, object]] = []
    other: dict[tuple[str, str, str], tuple[float, float]] = {}
    for r in rows:
        if r.regime != "all" or r.load != "all" or r.method not in SOURCE_OF:
            continue
        src = SOURCE_OF[r.method]
        out.append(
            {
                "gpu": r.gpu,
                "engine": r.engine,
                "op": r.op,
                "source": src,
                "median": r.median,
                "p90": r.p90,
                "n": r.n,
            }
        )
        if src != "interpolated":
            k = (r.engine, r.op, src)
            prev = other.get(k, (0.0, 0.0))
            other[k] = (max(prev[0], r.median), max(prev[1], r.p90))
    for (engine, op, src), (med, p90) in sorted(other.items()):
        out.append(
            {
                "gpu": "other",
                "engine": engine,
                "op": op,
                "source": src,
                "median": med,
                "p90": p90,
                "n": 0,
            }
        )
    return out
