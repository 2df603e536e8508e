"""Writing routing traces: a whole trace to ``.npz`` or Parquet (:func:`save_trace`), or
chunk by chunk to Parquet (:class:`TraceWriter`).

Layout as in :mod:`moeplan.traces.format`: the long columns of
:func:`~moeplan.traces.routing_trace.to_long`; in Parquet ``experts`` and ``weights`` are
fixed-size lists of k and the schema metadata ``moeplan.num_experts`` records E. Row groups
hold whole occurrences (``row_group_occurrences`` x L rows) so that the reader's memory stays
bounded. Files are written through :func:`moeplan.io.atomic_path` (normal ``0666 & ~umask``
permissions, temp file removed on failure or on a signal that raises).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError, require
from moeplan.io import atomic_path
from moeplan.traces.routing_trace import RoutingTrace, to_long


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
