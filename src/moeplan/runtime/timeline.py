"""Per-rank timelines in Chrome trace event JSON (the simulator's format; opens in Perfetto).

Events are complete events ``{"name", "ph": "X", "ts" µs, "dur" µs, "pid": rank, "tid": lane}``
plus ``"M"`` metadata naming the rank and its lanes, built by the simulator's own builders
(:func:`moeplan.sim.trace_export.complete_event`, :func:`~moeplan.sim.trace_export.lane_metadata`)
so measured and predicted traces cannot drift apart. Times are taken with ``time.perf_counter`` relative to
``t0`` (set right after a barrier, so ranks share an origin to within the barrier's skew).
Inside the code times are seconds; only the exported JSON uses microseconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from moeplan.io import write_atomic
from moeplan.sim.trace_export import complete_event, lane_metadata

LANES = {"compute": 0, "send": 1, "recv": 2, "comm": 3}


class Timeline:
    """Records intervals of one rank on named lanes (compute, send, recv, comm)."""

    def __init__(self, rank: int, sync: Callable[[], None] | None = None) -> None:
        self.rank = rank
        self.sync = sync  # e.g. torch.cuda.synchronize, so spans measure device work
        self.t0 = time.perf_counter()
        self.events: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.t0 = time.perf_counter()
        self.events.clear()

    def add(self, name: str, lane: str, start: float, end: float) -> None:
        """Record ``[start, end]`` (perf_counter seconds) on ``lane``."""
        self.events.append(
            complete_event(
                name,
                pid=self.rank,
                tid=LANES[lane],
                start_s=start - self.t0,
                dur_s=max(end - start, 0.0),
            )
        )

    @contextmanager
    def span(self, name: str, lane: str = "compute") -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            self.add(name, lane, start, time.perf_counter())

    def trace_events(self) -> list[dict[str, Any]]:
        lanes = {tid: lane for lane, tid in LANES.items()}
        return lane_metadata(self.rank, f"rank {self.rank}", lanes) + self.events


def write_trace(events: list[dict[str, Any]], path: str | Path, **meta: Any) -> None:
    """Write ``{"traceEvents": events, ...meta}`` atomically (temp file + rename)."""
    write_atomic(path, json.dumps({"traceEvents": events, **meta}))
