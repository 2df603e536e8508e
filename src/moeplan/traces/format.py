"""Routing-trace format: one in-memory type, columnar files, streaming and a seeded split.

DESIGN.md "Files and formats": a trace is columnar, one row per (token occurrence, MoE layer)
with columns ``request_id``, ``position``, ``token_id``, ``layer``, ``experts`` (k ids, -1
padded for dynamic k) and optional ``weights``. On disk that long layout is what we write
(Parquet via pyarrow, or ``.npz``). In memory the planners use the dense equivalent,
:class:`RoutingTrace`: per occurrence ``request_id``, ``position``, ``token_id`` and
``experts[N, L, k]`` (int16), because every occurrence carries all L MoE layers. ``layer`` is
the index among MoE layers (0 .. L-1), not the decoder-layer number.

Streaming: :func:`iter_trace` yields :class:`RoutingTrace` chunks that always hold whole
requests (a request is never cut between chunks), reading Parquet row group by row group;
``.npz`` cannot be read partially and is loaded column by column (documented limit).
The train/test split is by request and seeded (:func:`is_test_request`), so it can be applied
chunk by chunk without holding the trace.

Bad bytes (issue 17): every column read from a file is checked for an integer dtype, one
dimension (experts/weights: two), equal lengths and its range *before* any narrowing cast —
an expert id of 65541 is refused, never wrapped to 5 by int16. Sizes a file claims (its
``num_experts``, its layer ids, the shapes in its ``.npy`` headers) are bounded before anything
is allocated from them. Files are written through :func:`moeplan.io.atomic_path` (normal
``0666 & ~umask`` permissions, temp file removed on failure or on a signal that raises).
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError, check_int, require, show
from moeplan.io import atomic_path
from moeplan.specs.model import MAX_LAYERS, MAX_VOCAB

COLUMNS = ("request_id", "position", "token_id", "layer", "experts")
MAX_TRACE_EXPERTS = 2**15  # expert ids are stored as int16 (-1 = none)
MAX_TOP_K = 256  # experts per token in one layer (SGLang pads to 8; no model routes > 64)
MAX_POSITION = 2**31 - 1  # positions are stored as int32
MAX_REQUEST_ID = 2**62
# column -> (lowest, highest) value accepted in a file
_RANGES = {
    "request_id": (0, MAX_REQUEST_ID),
    "position": (0, MAX_POSITION),
    "token_id": (0, MAX_VOCAB - 1),
    "layer": (0, MAX_LAYERS - 1),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingTrace:
    """Dense routing trace: N token occurrences x L MoE layers x k routed experts.

    ``experts[n, l, j]`` is the j-th expert chosen for occurrence n at MoE layer l (highest
    gate weight first where known), -1 where a dynamic top-k chose fewer than k.
    ``weights`` (optional) has the same shape, float32.
    """

    request_id: np.ndarray  # [N] int64
    position: np.ndarray  # [N] int32
    token_id: np.ndarray  # [N] int64
    experts: np.ndarray  # [N, L, k] int16
    num_experts: int
    weights: np.ndarray | None = None  # [N, L, k] float32

    def __post_init__(self) -> None:
        for name in ("request_id", "position", "token_id"):
            _require_ints(f"trace.{name}", getattr(self, name), 1)
        _require_ints("trace.experts", self.experts, 3)
        check_int("trace.num_experts", self.num_experts, 1, MAX_TRACE_EXPERTS)
        n = len(self.token_id)
        require(
            len(self.request_id) == n and len(self.position) == n and self.experts.shape[0] == n,
            f"trace columns (lengths {len(self.request_id)}, {len(self.position)}, {n}, "
            f"{self.experts.shape[0]}) must have equal length",
        )
        require(self.num_experts >= 1, f"trace.num_experts ({self.num_experts}) must be >= 1")
        if n and self.experts.size:
            lo, hi = int(self.experts.min()), int(self.experts.max())
            require(
                lo >= -1 and hi < self.num_experts,
                f"trace.experts (range {lo}..{hi}) must lie in -1..{self.num_experts - 1}",
            )
        if self.weights is not None:
            require(
                self.weights.shape == self.experts.shape,
                f"trace.weights (shape {self.weights.shape}) must match experts "
                f"{self.experts.shape}",
            )

    @property
    def num_tokens(self) -> int:
        return len(self.token_id)

    @property
    def num_layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    def take(self, mask_or_index: np.ndarray) -> RoutingTrace:
        """The occurrences selected by a boolean mask or an index array."""
        w = None if self.weights is None else self.weights[mask_or_index]
        return RoutingTrace(
            request_id=self.request_id[mask_or_index],
            position=self.position[mask_or_index],
            token_id=self.token_id[mask_or_index],
            experts=self.experts[mask_or_index],
            num_experts=self.num_experts,
            weights=w,
        )


def concat(parts: list[RoutingTrace]) -> RoutingTrace:
    """Concatenate chunks (same L, k, E) into one trace."""
    require(len(parts) > 0, "trace (0 chunks) must not be empty")
    has_w = all(p.weights is not None for p in parts)
    return RoutingTrace(
        request_id=np.concatenate([p.request_id for p in parts]),
        position=np.concatenate([p.position for p in parts]),
        token_id=np.concatenate([p.token_id for p in parts]),
        experts=np.concatenate([p.experts for p in parts]),
        num_experts=parts[0].num_experts,
        weights=np.concatenate([p.weights for p in parts]) if has_w else None,
    )  # type: ignore[misc]


def is_test_request(request_id: np.ndarray, seed: int, test_fraction: float) -> np.ndarray:
    """Seeded, stateless split by request: True where the request belongs to the test split.

    A splitmix64-style hash of (request_id, seed) mapped to [0, 1); the same request always
    lands on the same side, whichever chunk it arrives in.
    """
    require(0.0 < test_fraction < 1.0, f"test_fraction ({test_fraction}) must lie in (0, 1)")
    with np.errstate(over="ignore"):
        z = request_id.astype(np.uint64) + np.uint64(seed * 0x9E3779B97F4A7C15 % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53) < test_fraction


def split(
    trace: RoutingTrace, seed: int = 0, test_fraction: float = 0.25
) -> tuple[RoutingTrace, RoutingTrace]:
    """(train, test) split by request, seeded."""
    test = is_test_request(trace.request_id, seed, test_fraction)
    return trace.take(~test), trace.take(test)


# ---------------------------------------------------------------- long <-> dense conversion
def to_long(trace: RoutingTrace) -> dict[str, np.ndarray]:
    """Long (file) layout: one row per (occurrence, layer)."""
    n, num_layers, k = trace.experts.shape
    cols = {
        "request_id": np.repeat(trace.request_id, num_layers),
        "position": np.repeat(trace.position, num_layers),
        "token_id": np.repeat(trace.token_id, num_layers),
        "layer": np.tile(np.arange(num_layers, dtype=np.int16), n),
        "experts": trace.experts.reshape(n * num_layers, k),
    }
    if trace.weights is not None:
        cols["weights"] = trace.weights.reshape(n * num_layers, k)
    return cols


def _require_ints(field: str, a: object, ndim: int) -> None:
    require(
        isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.ndim == ndim,
        f"{field} ({_describe(a)}) must be a {ndim}-d integer array",
    )


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"dtype {a.dtype}, shape {a.shape}"
    return type(a).__name__


def _check_range(field: str, a: np.ndarray, lo: int, hi: int) -> None:
    """Range check on the file's own dtype (before any narrowing cast)."""
    if a.size:
        amin, amax = int(a.min()), int(a.max())
        require(lo <= amin and amax <= hi, f"{field} (range {amin}..{amax}) must lie in {lo}..{hi}")


def check_columns(cols: dict[str, np.ndarray], num_experts: int | None) -> dict[str, np.ndarray]:
    """Validated long columns (types, shapes, lengths, ranges); see the module docstring."""
    for c in COLUMNS:
        require(c in cols, f"trace column ({c}) is missing; need {', '.join(COLUMNS)}")
    out: dict[str, np.ndarray] = {}
    experts = np.asarray(cols["experts"])
    _require_ints("trace.experts", experts, 2)
    rows, k = experts.shape
    require(1 <= k <= MAX_TOP_K, f"trace.experts (k={k}) must have 1..{MAX_TOP_K} columns")
    hi = (num_experts if num_experts is not None else MAX_TRACE_EXPERTS) - 1
    _check_range("trace.experts", experts, -1, hi)
    for c, (lo, top) in _RANGES.items():
        a = np.asarray(cols[c])
        _require_ints(f"trace.{c}", a, 1)
        require(len(a) == rows, f"trace.{c} (length {len(a)}) must have one value per row ({rows})")
        _check_range(f"trace.{c}", a, lo, top)
        out[c] = a.astype(np.int64)
    out["experts"] = experts.astype(np.int16)
    w = cols.get("weights")
    if w is not None:
        w = np.asarray(w)
        require(
            w.dtype.kind in "fiu" and w.shape == experts.shape,
            f"trace.weights ({_describe(w)}) must be numbers shaped like experts {experts.shape}",
        )
        with np.errstate(over="ignore", invalid="ignore"):
            w32 = w.astype(np.float32)
        require(bool(np.isfinite(w32).all()), "trace.weights must be finite float32 values")
        out["weights"] = w32
    return out


def from_long(
    cols: dict[str, np.ndarray], num_experts: int | None, num_layers: int | None = None
) -> RoutingTrace:
    """Dense trace from long columns; rows must be grouped per occurrence, layers 0..L-1."""
    if num_experts is not None:
        check_int("trace num_experts", num_experts, 1, MAX_TRACE_EXPERTS)
    cols = check_columns(cols, num_experts)
    layer = cols["layer"]
    require(len(layer) > 0, "trace (0 rows) must not be empty")
    num_l = int(layer.max()) + 1 if num_layers is None else num_layers
    rows = len(layer)
    require(
        rows % num_l == 0 and bool((layer.reshape(-1, num_l) == np.arange(num_l)).all()),
        f"trace.layer (rows {rows}) must cycle 0..{num_l - 1} for every occurrence",
    )
    experts = cols["experts"]
    k = experts.shape[1]
    e_max = int(experts.max()) + 1 if num_experts is None else num_experts
    first = slice(0, rows, num_l)
    w = cols.get("weights")
    return RoutingTrace(
        request_id=cols["request_id"][first],
        position=cols["position"][first].astype(np.int32),
        token_id=cols["token_id"][first],
        experts=experts.reshape(-1, num_l, k),
        num_experts=max(e_max, 1),
        weights=None if w is None else w.reshape(-1, num_l, k),
    )


# ---------------------------------------------------------------- files
def save_trace(
    trace: RoutingTrace, path: str | os.PathLike[str], row_group_occurrences: int = 8192
) -> None:
    """Write ``.npz`` or ``.parquet`` atomically (temp file + os.replace, mode 0666 & ~umask)."""
    path = Path(path)
    require(
        path.suffix in (".npz", ".parquet"), f"trace path ({path}) must end in .npz or .parquet"
    )
    with atomic_path(path) as tmp:
        if path.suffix == ".npz":
            with open(tmp, "wb") as fh:
                arrays: dict[str, Any] = to_long(trace)  # typed so mypy keeps savez's kwargs apart
                np.savez(fh, num_experts=np.int64(trace.num_experts), **arrays)
        else:
            _write_parquet(trace, str(tmp), row_group_occurrences)


def _arrow_table(trace: RoutingTrace):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    cols = to_long(trace)
    k = trace.top_k
    arrays = {c: pa.array(cols[c]) for c in ("request_id", "position", "token_id", "layer")}
    arrays["experts"] = pa.FixedSizeListArray.from_arrays(pa.array(cols["experts"].ravel()), k)
    if "weights" in cols:
        arrays["weights"] = pa.FixedSizeListArray.from_arrays(pa.array(cols["weights"].ravel()), k)
    meta = {b"moeplan.num_experts": str(trace.num_experts).encode()}
    return pa.table(arrays).replace_schema_metadata(meta)


def _write_parquet(trace: RoutingTrace, path: str, row_group_occurrences: int) -> None:
    import pyarrow.parquet as pq

    table = _arrow_table(trace)
    pq.write_table(table, path, row_group_size=row_group_occurrences * trace.num_layers)


class TraceWriter:
    """Streaming Parquet writer: append chunks, then ``close()`` renames into place.

    Use it as a context manager (or call :meth:`abort` on failure): the temp file is removed
    whatever stops the write, a SIGTERM turned into an exception included.
    """

    def __init__(self, path: str | os.PathLike[str], row_group_occurrences: int = 8192) -> None:
        self.path = Path(path)
        self.row_group_occurrences = row_group_occurrences
        require(
            self.path.suffix == ".parquet",
            f"trace path ({self.path}) must end in .parquet for streaming writes",
        )
        self._ctx = atomic_path(self.path)
        self._tmp = self._ctx.__enter__()
        self._writer: Any = None  # a pyarrow ParquetWriter once the first chunk arrives

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, chunk: RoutingTrace) -> None:
        import pyarrow.parquet as pq

        table = _arrow_table(chunk)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._tmp, table.schema)
        # row groups of whole occurrences; small groups keep the reader's memory bounded
        self._writer.write_table(
            table, row_group_size=self.row_group_occurrences * chunk.num_layers
        )

    def close(self) -> None:
        if self._writer is None:
            self.abort()
            raise MoeplanError(f"trace ({self.path}) must not be empty")
        self._writer.close()
        self._writer = None
        self._ctx.__exit__(None, None, None)  # chmod + rename into place

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        err = MoeplanError("trace write aborted")
        self._ctx.__exit__(type(err), err, None)  # removes the temp file


def _corrupt(path: Path, err: Exception) -> MoeplanError:
    return MoeplanError(f"trace file ({path}) cannot be read: {type(err).__name__}")


def _iter_long_parquet(path: Path) -> Iterator[tuple[dict[str, np.ndarray], int | None]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        meta = pf.schema_arrow.metadata or {}
        e = meta.get(b"moeplan.num_experts")
        require(
            e is None or (len(e) <= 12 and e.isdigit()),
            f"trace file ({path}) num_experts metadata ({show(e)}) must be an integer",
        )
        num_experts = _claimed_experts(path, None if e is None else int(e))
        for rg in range(pf.num_row_groups):
            tab = pf.read_row_group(rg, use_threads=False)  # threads: +100 MB peak
            cols = {}
            for name in tab.column_names:
                col = tab.column(name).combine_chunks()
                if name in ("experts", "weights"):
                    k = col.type.list_size
                    cols[name] = col.flatten().to_numpy().reshape(-1, k)
                else:
                    cols[name] = col.to_numpy()
            yield cols, num_experts
    except MoeplanError:
        raise
    except Exception as err:  # pyarrow raises many types on a damaged file
        raise _corrupt(path, err) from err


def _claimed_experts(path: Path, value: object) -> int | None:
    """The ``num_experts`` a file states, bounded before it sizes anything."""
    if value is None:
        return None
    a = np.asarray(value)
    require(
        a.ndim == 0 and a.dtype.kind in "iu",
        f"trace file ({path}) num_experts ({show(value)}) must be one integer",
    )
    return check_int(f"trace file ({path}) num_experts", int(a), 1, MAX_TRACE_EXPERTS)


def _check_npz_headers(path: Path) -> None:
    """Every member's ``.npy`` header: plain dtype, and no more bytes than the member holds."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read(fh)
            need = math.prod(shape) * dtype.itemsize
            require(
                not dtype.hasobject,
                f"trace file ({path}) member {info.filename} holds Python objects",
            )
            require(
                need <= info.file_size,
                f"trace file ({path}) member {info.filename} claims shape {shape} "
                f"({need} bytes) but holds {info.file_size} bytes",
            )


def _load_npz(path: Path) -> tuple[dict[str, np.ndarray], int | None]:
    try:
        _check_npz_headers(path)
        with np.load(path, allow_pickle=False) as z:
            cols = {k: z[k] for k in z.files if k != "num_experts"}
            claimed = z["num_experts"] if "num_experts" in z.files else None
    except MoeplanError:
        raise
    except Exception as err:
        raise _corrupt(path, err) from err
    return cols, _claimed_experts(path, claimed)


def _checked(
    path: Path, parts: Iterator[tuple[dict[str, np.ndarray], int | None]], num_experts: int | None
) -> Iterator[tuple[dict[str, np.ndarray], int | None]]:
    for cols, e in parts:
        try:
            checked = check_columns(cols, num_experts or e)
        except MoeplanError as err:
            raise MoeplanError(f"trace file ({path}): {err}") from None
        yield checked, e


def _whole_occurrences(
    parts: Iterator[tuple[dict[str, np.ndarray], int | None]],
) -> Iterator[tuple[dict[str, np.ndarray], int | None]]:
    """Re-cut row groups so that each holds whole occurrences (all L layer rows)."""
    pending: dict[str, np.ndarray] | None = None
    num_l: int | None = None
    e: int | None = None
    for cols, e in parts:
        if pending is not None:
            cols = {k: np.concatenate([pending[k], cols[k]]) for k in cols}
        if "layer" not in cols or len(cols["layer"]) == 0:
            yield cols, e
            continue
        layer = np.asarray(cols["layer"])
        num_l = int(layer.max()) + 1 if num_l is None else max(num_l, int(layer.max()) + 1)
        ends = np.flatnonzero(layer == num_l - 1)
        cut = int(ends[-1]) + 1 if len(ends) else 0
        pending = {k: v[cut:] for k, v in cols.items()}
        if cut:
            yield {k: v[:cut] for k, v in cols.items()}, e
    if pending is not None and len(pending["layer"]):
        yield pending, e


def iter_trace(
    path: str | os.PathLike[str], chunk_occurrences: int = 65536, num_experts: int | None = None
) -> Iterator[RoutingTrace]:
    """Stream a trace file as chunks of whole requests (about ``chunk_occurrences`` each)."""
    path = Path(path)
    require(path.exists(), f"trace path ({path}) does not exist")
    require(path.is_file(), f"trace path ({path}) must be a regular file")
    if num_experts is not None:
        check_int("num_experts", num_experts, 1, MAX_TRACE_EXPERTS)
    if path.suffix == ".npz":
        cols, e = _load_npz(path)
        parts: Iterator[tuple[dict[str, np.ndarray], int | None]] = iter([(cols, e)])
    elif path.suffix == ".parquet":
        parts = _iter_long_parquet(path)
    else:
        raise MoeplanError(f"trace path ({path}) must end in .npz or .parquet")
    carry: RoutingTrace | None = None
    seen = False
    for cols, e in _whole_occurrences(_checked(path, parts, num_experts)):
        dense = from_long(cols, num_experts or e)
        if carry is not None and carry.num_tokens:
            dense = concat([carry, dense])
        rid = dense.request_id
        if len(rid) == 0:
            continue
        # hold back the last request: it may continue in the next row group
        other = np.flatnonzero(rid != rid[-1])
        cut = int(other[-1]) + 1 if len(other) else 0
        lo = 0
        while lo < cut:
            hi = min(cut, lo + chunk_occurrences)
            while hi < cut and rid[hi] == rid[hi - 1]:  # extend to the end of the request
                hi += 1
            seen = True
            yield dense.take(slice(lo, hi))  # type: ignore[arg-type]
            lo = hi
        carry = dense.take(slice(cut, None))  # type: ignore[arg-type]
    if carry is not None and carry.num_tokens:
        seen = True
        yield carry
    require(seen, f"trace ({path}) must not be empty")


def load_trace(path: str | os.PathLike[str], num_experts: int | None = None) -> RoutingTrace:
    """Whole trace in memory (concatenation of :func:`iter_trace`)."""
    return concat(list(iter_trace(path, chunk_occurrences=1 << 30, num_experts=num_experts)))
