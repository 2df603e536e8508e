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

Bad bytes: every column read from a file is checked for an integer dtype, one
dimension (experts/weights: two), equal lengths and its range *before* any narrowing cast —
an expert id of 65541 is refused, never wrapped to 5 by int16. Sizes a file claims (its
``num_experts``, its layer ids, the shapes in its ``.npy`` headers) are bounded before anything
is allocated from them. Files are written through :func:`moeplan.io.atomic_path` (normal
``0666 & ~umask`` permissions, temp file removed on failure or on a signal that raises).

This module is the format's public face; the code is split by concern and every name is
re-exported here: the in-memory type, split and column conversion/checks in
:mod:`moeplan.traces.routing_trace`, reading in :mod:`moeplan.traces.trace_reader`, writing in
:mod:`moeplan.traces.trace_writer`.
"""

from __future__ import annotations

from moeplan.traces.routing_trace import (
    COLUMNS,
    MAX_POSITION,
    MAX_REQUEST_ID,
    MAX_TOP_K,
    MAX_TRACE_EXPERTS,
    RoutingTrace,
    check_columns,
    concat,
    from_long,
    is_test_request,
    split,
    to_long,
)
from moeplan.traces.trace_reader import iter_trace, load_trace
from moeplan.traces.trace_writer import TraceWriter, save_trace

__all__ = [
    "COLUMNS", "MAX_POSITION", "MAX_REQUEST_ID", "MAX_TOP_K", "MAX_TRACE_EXPERTS",
    "RoutingTrace", "TraceWriter", "check_columns", "concat", "from_long", "is_test_request",
    "iter_trace", "load_trace", "save_trace", "split", "to_long",
]  # fmt: skip
