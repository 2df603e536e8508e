"""KernelDB: predicted kernel times per GPU and engine, each with its source and error.

``KernelDB(tables, devices, errors)`` holds NVIDIA's measured tables (:class:`KernelTable`,
read by :mod:`moeplan.kernel_tables`), the datasheet :class:`Device` of each table GPU, and
the held-out errors per ``(gpu, engine, op, source)`` computed by :mod:`.evaluate`.
``predict_many(op, device, engine, columns)`` answers a whole table at once:

1. the row's variant: its dtype columns must match; the kernel is the engine's default for
   that dtype (most measured rows, gated SwiGLU, CUDA-graph all-reduce) unless named;
2. on a GPU with tables: ``measured`` for an exact row, else ``interpolated`` (shape line or
   neighbouring shapes, :mod:`.variant`), else the GPU's own analytic model, ``transferred``
   — past the end of a measured shape's token line with that line's end residual carried
   on (continuous and monotone at the table's edge), outside the measured box bare;
3. on other GPUs (or when the engine has no table for this op/dtype on this GPU): the
   reference table GPU's own price of the row (step 2) times the ratio of the reference's
   model scaled by this GPU's datasheet to the reference's model, ``transferred``: a GPU whose
   datasheet equals the reference's gets the reference's measured rows (ratio 1). A dtype the
   reference did not measure takes the scaled model and the reference's residual field.
   The reference GPUs are tried in :data:`REFERENCE_ORDER` (a Blackwell GPU borrows from
   the other Blackwell table GPU before the H100). The error stated beside a transferred
   price on a GPU without tables is the leave-one-GPU-out error of its reference
   (:attr:`KernelDB.gpu_transfer`: B200 -> GB200 for a GPU borrowing B200's tables, GB200 ->
   B200 for GB200's; ``moeplan/data/gpu_transfer.json``) where one was measured, else the
   ``other`` row of the held-out error table;
4. no table for the engine and op anywhere: ``roofline`` (70 % of peak FLOP/s, 80 % of
   bandwidth, 5 µs floor — the CostModel's defaults).
5. asked for one engine release (``--engine-version``: :attr:`KernelDB.versions`, chosen by
   :mod:`moeplan.kernel_tables`): a price read from another release's table — a measured row
   becomes ``transferred`` (a row of another release), the leave-one-version-out transfer
   error is added to its source's error and the detail names the release
   (:meth:`KernelDB._release`).

No prediction is faster than the datasheet allows (:func:`peak_time`: FLOPs at the tensor
peak, bytes at HBM / link bandwidth). A few table rows are (up to 1.8x on some fused-MoE rows,
where the collector's routing touched fewer expert weights than the shape implies); they
are raised to that floor and labelled ``roofline``.

Variant models are built on first use and cached on the database object; an optional
``store`` (``get(key)`` / ``put(key, value)``, e.g. :class:`moeplan.kernel_tables.DiskStore`)
keeps built variants and variant counts across processes — this module does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

import numpy as np

from moeplan.backends import kernel_tables
from moeplan.backends.versions import MEASURED
from moeplan.cost.kerneldb import price_memo
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.families import (
    EXPLICIT,
    KERNEL_FAMILIES,
    Family,
    Features,
)
from moeplan.cost.kerneldb.family import TABLE_COLS
from moeplan.cost.kerneldb.fit import Analytic
from moeplan.cost.kerneldb.normalize import normalize
from moeplan.cost.kerneldb.rows import DTYPE_NOTE, RELEASE_NOTE, own_rows, row_groups
from moeplan.cost.kerneldb.sources import Prediction
from moeplan.cost.kerneldb.stored import stored_counts_ok, stored_variant_ok
from moeplan.cost.kerneldb.variant import KernelTable, LazyTables, VariantModel
from moeplan.errors import MoeplanError

#: the engines whose measured kernel tables this database reads
TABLE_ENGINES = kernel_tables()
ROOFLINE = Analytic(floor=5e-6, per_work=0.0, flops_eff=0.70, bw_eff=0.80)
_AVOID = ("nongated", "situ", "eager")
MEMO_SIZE = 200_000  # memoised scalar predictions kept before the memo is cleared
ErrorKey = tuple[str, str, str, str]


class Store(Protocol):
    """Where built variants outlive the process: ``get`` returns ``None`` on a miss."""

    def get(self, key: tuple) -> Any | None: ...

    def put(self, key: tuple, value: Any) -> None: ...


class KernelDB:
    """Measured kernel tables + transfer model (see module docstring)."""

    def __init__(
        self,
        tables: Iterable[KernelTable] | LazyTables,
        devices: Mapping[str, Device],
        errors: Mapping[ErrorKey, tuple[float, float]] | None = None,
        store: Store | None = None,
        versions: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
        engine_version: tuple[str, str] | None = None,
        gpu_transfer: Mapping[tuple[str, str, str], tuple[float, float]] | None = None,
    ) -> None:
        self._store = store
        #: (reference table GPU, engine or "all", op) -> (median, p90) leave-one-GPU-out
        #: error of a price transferred from that reference to a GPU without tables
        self.gpu_transfer = dict(gpu_transfer or {})
        #: (gpu, engine, op) -> how the requested engine version is priced by that table
        #: (table version, measured / nearest version / extrapolated, transfer error)
        self.versions = dict(versions or {})
        #: the (engine, version) its tables were chosen for; None: the newest of each
        self.engine_version = engine_version
        self.tables: Mapping[tuple[str, str, str], KernelTable]
        if isinstance(tables, LazyTables):
            self.tables = tables
        else:
            self.tables = {(t.gpu, t.engine, t.op): t for t in tables}
        self.devices = dict(devices)
        self.errors = dict(errors or {})
        self._variants: dict[tuple, VariantModel | None] = {}
        self._memo: dict[tuple, Prediction] = {}
        self._variant_keys: dict[tuple[str, str, str], dict[tuple, int]] = {}
        self._chosen: dict[tuple, tuple | None] = {}  # choose()'s answers (variants are fixed)

    def held(self, device: Device) -> Device:
        """``device`` as this database prices it: a GPU record naming kernel tables the
        database does not hold (a package without the Blackwell folders) prices as a GPU
        without tables — transferred from its reference, with the reference's errors."""
        if device.table is None or any(k[0] == device.table for k in self.tables):
            return device
        return replace(device, table=None)

    # ---- variants ------------------------------------------------------------------------
    def variants(self, gpu: str, engine: str, op: str) -> dict[tuple, int]:
        """Variant keys (values of the family's variant columns) -> row count (cached)."""
        ck = (gpu, engine, op)
        if ck not in self._variant_keys:
            self._variant_keys[ck] = self._stored(
                ("variants", *ck),
                lambda: self._count_variants(gpu, engine, op),
                lambda v: stored_counts_ok(v, op),
            )
        return self._variant_keys[ck]

    def _stored(self, key: tuple, build: Any, ok: Callable[[Any], bool]) -> Any:
        """``build()``, through the store when there is one (``None`` is never stored); a
        stored value that ``ok`` refuses (:mod:`.stored`: not what ``build`` returns) is a
        miss, built again and rewritten."""
        if self._store is None:
            return build()
        value = self._store.get(key)
        if value is not None and not ok(value):
            value = None
        if value is None:
            value = build()
            if value is not None:
                self._store.put(key, value)
        return value

    def _count_variants(self, gpu: str, engine: str, op: str) -> dict[tuple, int]:
        t = self.tables.get((gpu, engine, op))
        if t is None:
            return {}
        fam = KERNEL_FAMILIES[op]
        if not fam.variant_cols:
            return {(): len(t.latency)} if len(t.latency) else {}
        code = np.zeros(len(t.latency), dtype=np.int64)  # one integer per distinct key
        words = []
        for c in fam.variant_cols:
            u, inv = np.unique(np.asarray(t.columns[c]).astype(str), return_inverse=True)
            code = code * len(u) + inv.reshape(-1)
            words.append(u.tolist())
        uniq, first, counts = np.unique(code, return_index=True, return_counts=True)
        out: dict[tuple, int] = {}
        for j in np.argsort(first):  # first-seen order, as the rows list them
            rest, key = int(uniq[j]), []
            for w in reversed(words):
                rest, i = divmod(rest, len(w))
                key.append(w[i])
            out[tuple(reversed(key))] = int(counts[j])
        return out

    def choose(self, gpu: str, engine: str, op: str, want: Mapping[str, str]) -> tuple | None:
        """The variant whose non-kernel columns equal ``want``; kernel by preference."""
        ck = (gpu, engine, op, tuple(sorted((c, str(v)) for c, v in want.items())))
        if ck not in self._chosen:
            self._chosen[ck] = self._choose(gpu, engine, op, want)
        return self._chosen[ck]

    def _choose(self, gpu: str, engine: str, op: str, want: Mapping[str, str]) -> tuple | None:
        fam = KERNEL_FAMILIES[op]
        best, score = None, None
        for key, n in self.variants(gpu, engine, op).items():
            vals = dict(zip(fam.variant_cols, key, strict=True))
            if any(vals[c] != str(want[c]) for c in want if c in vals):
                continue
            ks = vals.get("kernel_source", "")
            s = (not any(a in ks.lower() for a in _AVOID), "graph" in ks.lower(), n)
            if score is None or s > score:
                best, score = key, s
        return best

    def variant(self, gpu: str, engine: str, op: str, key: tuple) -> VariantModel | None:
        vk = (gpu, engine, op, key)
        if vk not in self._variants:
            if (gpu, engine, op) not in self.tables:
                self._variants[vk] = None
            else:
                vm = self._variants[vk] = self._stored(
                    ("variant", *vk),
                    lambda: self._build_variant(gpu, engine, op, key),
                    lambda v: stored_variant_ok(v, op, key),
                )
                if self._store is not None and vm is not None:  # the answers kept for it
                    price_memo.attach(vm, self._store.get(("memo", *vk)))
        return self._variants[vk]

    def save_memos(self) -> int:
        """Write to the store the answers of every variant that priced rows it had not kept
        (its own prices, :mod:`.price_memo`), one file beside each variant's: a later process
        reads them instead of pricing again. The number of files written (0 without a
        store)."""
        if self._store is None:
            return 0
        n = 0
        for vk, vm in self._variants.items():
            kept = None if vm is None else price_memo.stored(vm)
            if kept is not None:
                self._store.put(("memo", *vk), kept)
                n += 1
        return n

    def _build_variant(self, gpu: str, engine: str, op: str, key: tuple) -> VariantModel:
        t = self.tables[(gpu, engine, op)]
        fam = KERNEL_FAMILIES[op]
        sel = np.ones(len(t.latency), bool)
        for c, v in zip(fam.variant_cols, key, strict=True):
            sel &= np.asarray(t.columns[c]).astype(str) == v
        cols = {c: np.asarray(t.columns[c])[sel] for c in fam.columns}
        label = f"{gpu}/{engine}/{op}@{t.version}[{','.join(key)}]"
        return VariantModel(fam, cols, t.latency[sel], self.devices[gpu], label)

    # ---- prediction ----------------------------------------------------------------------
    def error(
        self, gpu: str | None, engine: str, op: str, source: str, reference: str | None = None
    ) -> tuple[float, float] | None:
        """The (median, p90) error of a ``source`` price: a GPU without tables (``gpu``
        ``None``) whose ``reference`` has a measured leave-one-GPU-out error takes it
        (:attr:`gpu_transfer`: the engine's own, else pooled over engines)."""
        if source == "measured":
            return (0.0, 0.0)
        if gpu is None and source == "transferred" and reference is not None:
            for eng in (engine, "all"):
                if (reference, eng, op) in self.gpu_transfer:
                    return self.gpu_transfer[(reference, eng, op)]
        return self.errors.get((gpu or "other", engine, op, source))

    def predict(
        self, op: str, device: Device, engine: str = "sglang", **shape: object
    ) -> Prediction:
        """One row (see :meth:`predict_many`), memoised: planners ask the same shapes often."""
        key = (op, device, engine, tuple(sorted(shape.items())))
        hit = self._memo.get(key)
        if hit is None:
            cols = {k: np.asarray([v]) for k, v in shape.items()}
            hit = self.predict_many(op, device, engine, cols)[0]
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = hit
        return hit

    def warm(self, op: str, device: Device, engine: str, shapes: list[dict[str, object]]) -> None:
        """Price the rows :meth:`predict` has not memoised in one vectorised call and memoise
        them: the same answers as row-by-row (the same :meth:`predict_many`), one pass over
        the variant's tables instead of one per row. ``shapes`` share their keys."""
        if not shapes:
            return
        names = sorted(shapes[0])  # the key order of predict()'s memo: sorted(shape.items())
        keys = [(op, device, engine, tuple((c, sh[c]) for c in names)) for sh in shapes]
        todo = [(k, sh) for k, sh in dict(zip(keys, shapes, strict=True)).items()]
        todo = [(k, sh) for k, sh in todo if k not in self._memo]
        if not todo:
            return
        cols = {c: np.asarray([sh[c] for _, sh in todo]) for c in names}
        if len(self._memo) + len(todo) >= MEMO_SIZE:
            self._memo.clear()
        for (key, _), pred in zip(todo, self.predict_many(op, device, engine, cols), strict=True):
            self._memo[key] = pred

    def predict_many(
        self, op: str, device: Device, engine: str, columns: Mapping[str, np.ndarray]
    ) -> list[Prediction]:
        """Predictions for every row of ``columns`` (named as in the measured tables)."""
        table, secs, srcs, details = self._priced(op, device, engine, columns)
        errs: dict[str, tuple[float, float] | None] = {}
        out = []
        for s, src, detail in zip(secs.tolist(), srcs.tolist(), details.tolist(), strict=True):
            if src not in errs:
                errs[src] = self.error(table, engine, op, src, device.reference)
            err = errs[src]
            out.append(
                self._release(
                    device, engine, op,
                    Prediction(seconds=s, source=src, error=_e(err, 0), error_p90=_e(err, 1),
                               detail=detail),
                )
            )  # fmt: skip
        return out

    def _release(self, device: Device, engine: str, op: str, p: Prediction) -> Prediction:
        """``p`` as a price of the requested engine release (:attr:`versions`): unchanged
        where that release's own table priced it; else a measured row is ``transferred`` (a
        row of another release), the leave-one-version-out error is added to the source's
        error (``None`` when either is unknown) and the detail says which release."""
        v = self.versions.get((device.table or device.reference, engine, op))
        if v is None or v["how"] == MEASURED:
            return p
        med, p90 = v.get("error_median"), v.get("error_p90")
        return Prediction(
            seconds=p.seconds,
            source="transferred" if p.source == "measured" else p.source,
            error=_plus(p.error, med),
            error_p90=_plus(p.error_p90, p90),
            detail=f"{p.detail}{RELEASE_NOTE} {v['how']}, the {v['table_version']} table",
        )

    def kinds_many(
        self, op: str, device: Device, engine: str, columns: Mapping[str, np.ndarray]
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, Prediction]]]:
        """The seconds of :meth:`predict_many` and, per distinct (source, detail), the rows it
        priced (a mask) with one :class:`Prediction` standing for them (its seconds the first
        row's): the provenance of many rows without one object per row."""
        table, secs, srcs, details = self._priced(op, device, engine, columns)
        kinds: dict[tuple[str, str], int] = {}
        pairs = list(zip(srcs.tolist(), details.tolist(), strict=True))
        for i, kind in enumerate(pairs):
            kinds.setdefault(kind, i)
        out = []
        for (src, detail), i in kinds.items():
            err = self.error(table, engine, op, src, device.reference)
            mask = (
                (srcs == src) & (details == detail) if len(kinds) > 1 else np.ones(len(secs), bool)
            )
            pred = Prediction(seconds=float(secs[i]), source=src, error=_e(err, 0),
                              error_p90=_e(err, 1), detail=detail)  # fmt: skip
            out.append((mask, self._release(device, engine, op, pred)))
        return secs, out

    def seconds_many(
        self, op: str, device: Device, engine: str, columns: Mapping[str, np.ndarray]
    ) -> np.ndarray:
        """The seconds of :meth:`predict_many`, without building a :class:`Prediction` per
        row (a caller that keeps no provenance: a grid of decode contexts)."""
        return self._priced(op, device, engine, columns)[1]

    def floor_many(
        self, op: str, device: Device, engine: str, columns: Mapping[str, np.ndarray]
    ) -> np.ndarray:
        """A lower bound of each row's :meth:`seconds_many`, without the lookups and the
        residual field's neighbour query (the analytic model and the datasheet floor only):
        a caller that needs the least price over many rows prices only the rows whose bound
        could still undercut it. A row's price is its variant's model times ``exp`` of a
        residual of that variant — a measured row's own, one interpolated between measured
        residuals, a weighted mean or median of neighbours' — or the bare model, never below
        the datasheet floor; so it is at least the model times ``exp`` of the least measured
        residual (or 1), raised to the floor. Transferred rows carry the same factor on the
        scaled model. The bound is lowered by :data:`FLOOR_MARGIN` for rounding."""
        fam = _family(op)
        if engine not in TABLE_ENGINES:
            raise MoeplanError(f"engine ({engine!r}) must be one of {', '.join(TABLE_ENGINES)}")
        cols, n = normalize(fam, columns)
        names = [c for c in fam.variant_cols if c not in TABLE_COLS]
        names += [c for c in TABLE_COLS if c in cols and c in fam.variant_cols]
        out = np.zeros(n)
        for want, idx in row_groups(names, cols, n):
            sub = cols if idx is None else {c: np.asarray(cols[c])[idx] for c in cols}
            got = self._floor_group(fam, device, engine, want, sub)
            if idx is None:
                return got
            out[idx] = got
        return out

    def _floor_group(
        self,
        fam: Family,
        device: Device,
        engine: str,
        want: dict[str, str],
        cols: dict[str, np.ndarray],
    ) -> np.ndarray:
        """:meth:`floor_many` of rows sharing their variant columns (as :meth:`_predict_group`
        chooses their variant)."""
        own = device.table
        key = self.choose(own, engine, fam.op, want) if own else None
        if key is not None:
            vm = self.variant(own, engine, fam.op, key)  # type: ignore[arg-type]
            assert vm is not None
            f = vm.featurize(cols)
            base = vm.model.predict(f, device, fam.link) * _least_factor(vm)
            return np.maximum(base, peak_time(f, device, fam.link)) * (1.0 - FLOOR_MARGIN)
        for ref in _refs(device.reference):
            rkey = self.choose(ref, engine, fam.op, want)
            if rkey is None:
                rkey = self.choose(ref, engine, fam.op, {})
            if rkey is not None:
                vm = self.variant(ref, engine, fam.op, rkey)
                assert vm is not None
                f = vm.featurize(cols, device)
                t = vm.model.scaled(vm.device, device, fam.link).predict(f, device, fam.link)
                t = t * _least_factor(vm)
                return np.maximum(t, peak_time(f, device, fam.link)) * (1.0 - FLOOR_MARGIN)
        return ROOFLINE.predict(fam.features(cols), device, fam.link) * (1.0 - FLOOR_MARGIN)

    def _priced(
        self, op: str, device: Device, engine: str, columns: Mapping[str, np.ndarray]
    ) -> tuple[str | None, np.ndarray, np.ndarray, np.ndarray]:
        """(the GPU whose errors apply, seconds, sources, details) of every row."""
        fam = _family(op)
        if engine not in TABLE_ENGINES:
            raise MoeplanError(f"engine ({engine!r}) must be one of {', '.join(TABLE_ENGINES)}")
        cols, n = normalize(fam, columns)
        names = [c for c in fam.variant_cols if c not in TABLE_COLS]
        names += [c for c in TABLE_COLS if c in cols and c in fam.variant_cols]  # named kernel
        groups = row_groups(names, cols, n)
        if len(groups) == 1 and groups[0][1] is None:
            return (device.table, *self._predict_group(fam, device, engine, groups[0][0], cols))
        secs, srcs, details = np.zeros(n), np.empty(n, object), np.empty(n, object)
        for want, idx in groups:
            sub = {c: np.asarray(cols[c])[idx] for c in cols}
            s, src, d = self._predict_group(fam, device, engine, want, sub)
            secs[idx], srcs[idx], details[idx] = s, src, d
        return device.table, secs, srcs, details

    def _predict_group(
        self,
        fam: Family,
        device: Device,
        engine: str,
        want: dict[str, str],
        cols: dict[str, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(next(iter(cols.values())))
        own = device.table
        key = self.choose(own, engine, fam.op, want) if own else None
        if key is not None:
            return self._own_prices(fam, device, engine, key, cols, n)
        for ref in _refs(device.reference):
            rkey = self.choose(ref, engine, fam.op, want)
            same = rkey is not None
            if rkey is None:  # same engine, other dtype: keep the row's dtype in the features
                rkey = self.choose(ref, engine, fam.op, {})
            if rkey is not None:
                return self._transfer(fam, device, engine, ref, rkey, cols, n, same)
        t = ROOFLINE.predict(fam.features(cols), device, fam.link)
        detail = f"datasheet roofline of {device.name}"
        return (
            np.asarray(t, dtype=float),
            np.full(len(t), "roofline", dtype=object),
            np.full(len(t), detail, dtype=object),
        )

    def _own_prices(
        self,
        fam: Family,
        device: Device,
        engine: str,
        key: tuple,
        cols: dict[str, np.ndarray],
        n: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Seconds, source and detail of each row on a GPU with tables (``device.table``):
        exact row, shape line, the line's end carried past it, residual field, model."""
        vm = self.variant(device.table, engine, fam.op, key)  # type: ignore[arg-type]
        assert vm is not None
        return price_memo.priced(vm, device, cols, n, partial(self._own_rows, fam, device, vm))

    def _own_rows(self, fam: Family, device: Device, vm: VariantModel, cols: dict, n: int):  # noqa: ANN201
        """:meth:`_own_prices` of rows ``vm`` has not kept (:mod:`.price_memo`)."""
        lookups = self._lookup(vm, cols, n)
        f = vm.featurize(cols)  # the variant's kernel for kernel-specific terms
        base = vm.model.predict(f, device, fam.link)
        # the residual field answers only the rows no measured line prices (rows independent)
        need = ~(np.isfinite(lookups[0]) | np.isfinite(lookups[1]) | np.isfinite(lookups[2]))
        corr, inside = np.zeros(n), np.zeros(n, bool)
        if need.all():
            corr, _, inside = vm.field.query(f.coords)
        elif need.any():
            corr[need], _, inside[need] = vm.field.query(f.coords[need])
        carried = vm.field.beyond(f.coords)
        peak = peak_time(f, device, fam.link)
        return own_rows(vm.label, lookups, base, (corr, inside, carried), peak)

    @staticmethod
    def _lookup(vm: VariantModel, cols: dict[str, np.ndarray], n: int):
        """Exact rows, shape-line residuals and line-end residuals; a row with an explicit
        (trace) load takes the residuals of the balanced line of its shape, never a measured
        latency."""
        if "distribution" not in cols:
            return vm.lookup(cols, n)
        explicit = np.asarray(cols["distribution"]).astype(str) == EXPLICIT
        if not explicit.any():
            return vm.lookup(cols, n)
        as_balanced = dict(cols, distribution=np.where(explicit, "balanced", cols["distribution"]))
        exact, line, edge = vm.lookup(as_balanced, n)
        return np.where(explicit, np.nan, exact), line, edge

    def _transfer(
        self,
        fam: Family,
        device: Device,
        engine: str,
        ref: str,
        key: tuple,
        cols: dict[str, np.ndarray],
        n: int,
        same_dtype: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The reference GPU's own price of each row (measured, interpolated or its model)
        times the ratio of the two GPUs' analytic models — 1 for a GPU whose datasheet
        equals the reference's, so it gets the reference's measured rows. A row whose dtype
        the reference did not measure keeps the reference's model and residual field, scaled."""
        vm = self.variant(ref, engine, fam.op, key)
        assert vm is not None
        t = self.transferred_seconds(fam, device, engine, ref, key, cols, same_dtype)
        detail = f"{vm.label} scaled to {device.name} datasheet"
        if not same_dtype:
            detail = f"{detail}; {DTYPE_NOTE}"
        return (
            np.asarray(t, dtype=float),
            np.full(len(t), "transferred", dtype=object),
            np.full(len(t), detail, dtype=object),
        )

    def transferred_seconds(
        self,
        fam: Family,
        device: Device,
        engine: str,
        ref: str,
        key: tuple,
        cols: dict[str, np.ndarray],
        same_dtype: bool = True,
    ) -> np.ndarray:
        """Seconds of ``cols`` on ``device`` transferred from table GPU ``ref``'s variant
        ``key`` (:meth:`_transfer`; the held-out evaluation calls it too)."""
        vm = self.variant(ref, engine, fam.op, key)
        assert vm is not None
        n = len(next(iter(cols.values())))
        f = vm.featurize(cols, device)
        t = vm.model.scaled(vm.device, device, fam.link).predict(f, device, fam.link)
        if same_dtype:
            own, _, _ = self._own_prices(fam, vm.device, engine, key, cols, n)
            t = own * t / vm.model.predict(vm.featurize(cols), vm.device, fam.link)
        else:
            corr, _, inside = vm.field.query(f.coords)
            t = t * np.exp(np.where(inside, corr, 0.0))
        return np.maximum(t, peak_time(f, device, fam.link))


#: relative slack of :meth:`KernelDB.floor_many`'s bound: a price and its bound are computed
#: along different paths (``exp(log y)`` for a measured row, a residual averaged), which
#: may round apart by a few units in the last place
FLOOR_MARGIN = 1e-9


def _least_factor(vm: VariantModel) -> float:
    """``exp`` of the least residual of ``vm``'s measured rows, at most 1: the least factor
    its exact rows, shape lines, line ends and residual field put on its model."""
    return float(np.exp(min(0.0, float(vm.residual.min())))) if len(vm.residual) else 1.0


def peak_time(f: Features, device: Device, link: bool) -> np.ndarray:
    """The datasheet floor: no prediction may claim more FLOP/s or bytes/s than the peak."""
    peak = device.tensor_peak(f.fp8)
    return np.maximum(f.flops / peak, f.nbytes / (device.link_bw if link else device.mem_bw))


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _e(err: tuple[float, float] | None, i: int) -> float | None:
    return None if err is None else err[i]


#: the table GPUs a GPU borrows kernels from, in order, by its reference: the same
#: generation first (B200 and GB200 run the same SM100 kernels; A100 and H100 the older ones)
REFERENCE_ORDER = {
    "h100_sxm": ("h100_sxm", "a100_sxm"),
    "a100_sxm": ("a100_sxm", "h100_sxm"),
    "b200_sxm": ("b200_sxm", "gb200", "h100_sxm"),
    "gb200": ("gb200", "b200_sxm", "h100_sxm"),
}


def _refs(reference: str) -> tuple[str, ...]:
    return REFERENCE_ORDER.get(reference, (reference, "h100_sxm"))


def _family(op: str) -> Family:
    if op not in KERNEL_FAMILIES:
        raise MoeplanError(f"op ({op!r}) must be one of {', '.join(KERNEL_FAMILIES)}")
    return KERNEL_FAMILIES[op]
