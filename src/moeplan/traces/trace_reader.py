"""Reading routing traces: :func:`iter_trace` streams a ``.npz`` or Parquet file as chunks of
whole requests, :func:`load_trace` holds it in memory.

Parquet is read row group by row group, each re-cut to whole occurrences and then to whole
requests (a request is never split between chunks); ``.npz`` cannot be read partially and is
loaded column by column (documented limit). Bad bytes: every column is checked by
:func:`~moeplan.traces.routing_trace.check_columns` before any narrowing cast, and the sizes a
file claims (its ``num_experts``, the shapes in its ``.npy`` headers) are bounded before
anything is allocated from them. A damaged file is one :class:`~moeplan.errors.MoeplanError`
line naming it, never a library traceback.

Memory bombs: a compressed member or a dictionary-encoded Parquet column can expand a small
file into gigabytes. Before anything is decompressed, the bytes the needed columns will take
once decoded (``.npy`` header shape times item size; Parquet row count times the columns'
fixed widths) are bounded by :func:`decoded_limit`, and only those columns are read (other
members of an ``.npz``, other Parquet columns, are never decompressed).
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError, check_int, require, show
from moeplan.traces.routing_trace import (
    COLUMNS,
    MAX_TRACE_EXPERTS,
    RoutingTrace,
    check_columns,
    concat,
    from_long,
)

#: Columns a trace file is read for (the rest of a file is never decompressed).
NEEDED = (*COLUMNS, "weights", "num_experts")
#: Decoded bytes always allowed, whatever the file's size (a 256 MiB trace holds ~10 M rows).
DECODED_FLOOR = 256 * 2**20
#: Largest decoded/on-disk ratio beyond the floor: 10x the 26x measured on the Parquet file of
#: ``moeplan trace synth --model mixtral-8x7b --requests 200`` (1.6 MB holding 42 MB of
#: columns, dictionary and run-length encoded); an ``np.savez`` file is 1x.
MAX_EXPANSION = 256


def decoded_limit(file_bytes: int) -> int:
    """The most bytes the columns of a ``file_bytes`` trace file may decode to."""
    return max(DECODED_FLOOR, MAX_EXPANSION * file_bytes)


def _require_decoded_fits(path: Path, decoded: int, file_bytes: int) -> None:
    limit = decoded_limit(file_bytes)
    require(
        decoded <= limit,
        f"trace file ({path}, {file_bytes} bytes) declares {decoded} bytes of columns; more "
        f"than {limit} (max({DECODED_FLOOR}, {MAX_EXPANSION}x the file)) is refused",
    )


def _corrupt(path: Path, err: Exception) -> MoeplanError:
    return MoeplanError(f"trace file ({path}) cannot be read: {type(err).__name__}")


def _iter_long_parquet(path: Path) -> Iterator[tuple[dict[str, np.ndarray], int | None]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        names = [c for c in pf.schema_arrow.names if c in NEEDED]
        _require_decoded_fits(path, _parquet_decoded(pf, names), os.path.getsize(path))
        meta = pf.schema_arrow.metadata or {}
        e = meta.get(b"moeplan.num_experts")
        require(
            e is None or (len(e) <= 12 and e.isdigit()),
            f"trace file ({path}) num_experts metadata ({show(e)}) must be an integer",
        )
        num_experts = _claimed_experts(path, None if e is None else int(e))
        for rg in range(pf.num_row_groups):
            tab = pf.read_row_group(rg, columns=names, use_threads=False)  # threads: +100 MB
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


def _parquet_decoded(pf: Any, names: list[str]) -> int:
    """Bytes the columns ``names`` of every row group take decoded: rows times fixed width
    (a variable-width column: its stated uncompressed size, times 8 for the offsets)."""
    import pyarrow as pa

    md = pf.metadata
    schema = pf.schema_arrow
    total = 0
    for name in names:
        t = schema.field(name).type
        width = 1
        while pa.types.is_fixed_size_list(t):
            width *= t.list_size
            t = t.value_type
        try:
            width *= t.bit_width // 8 or 1
        except ValueError:  # not fixed-width: its stated size, plus 8-byte offsets per row
            col = pf.schema_arrow.get_field_index(name)
            total += sum(
                md.row_group(i).column(col).total_uncompressed_size + 8 * md.row_group(i).num_rows
                for i in range(md.num_row_groups)
            )
            continue
        total += width * md.num_rows
    return total


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


def _check_npz_headers(path: Path) -> list[str]:
    """Every needed member's ``.npy`` header: plain dtype, no more bytes than the member
    holds, all of them within :func:`decoded_limit`; returns the needed members' names."""
    decoded, names = 0, []
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.filename.removesuffix(".npy") not in NEEDED:
                continue  # never decompressed
            names.append(info.filename.removesuffix(".npy"))
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
            decoded += need
    _require_decoded_fits(path, decoded, os.path.getsize(path))
    return names


def _load_npz(path: Path) -> tuple[dict[str, np.ndarray], int | None]:
    try:
        names = _check_npz_headers(path)
        with np.load(path, allow_pickle=False) as z:
            cols = {k: z[k] for k in names if k != "num_experts"}
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
    seen = routed = False
    for cols, e in _whole_occurrences(_checked(path, parts, num_experts)):
        dense = from_long(cols, num_experts or e)
        routed = routed or bool((dense.experts >= 0).any())
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
    require(routed, f"trace ({path}) routes no token: every expert id is -1 (none chosen)")


def load_trace(path: str | os.PathLike[str], num_experts: int | None = None) -> RoutingTrace:
    """Whole trace in memory (concatenation of :func:`iter_trace`)."""
    return concat(list(iter_trace(path, chunk_occurrences=1 << 30, num_experts=num_experts)))
