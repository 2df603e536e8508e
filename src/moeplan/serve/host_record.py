"""What a run's engine host work was priced at (:mod:`moeplan.cost.host`): whether the engine
overlaps it with the GPU step, the price per sequence and its source, and the share of the
run's engine time the decode sequences' host work makes up.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from moeplan.backends import backend_or_none
from moeplan.cost.host import HOST_S_PER_SEQ, HOST_SOURCE
from moeplan.serve.engine.config import SimResult
from moeplan.serve.iteration.instance_knobs import InstanceKnobs


def host_record(
    engine: str | None,
    version: str | None,
    knobs: InstanceKnobs | None,
    attn_dp: int,
    runs: list[SimResult],
) -> dict[str, Any] | None:
    """The host-work record of ``runs`` (None without an engine: none was priced).
    ``decode_host_share``: the decode sequences' host work on the busiest attention-DP rank
    (each rank runs its own scheduler) over the runs' engine time; overlapped, the part of it
    the GPU step is longer than is hidden, in series every second of it adds."""
    eng = backend_or_none(engine)
    if eng is None:
        return None
    overlap = eng.overlaps(None if knobs is None else knobs.overlap, version)
    busy = host = 0.0
    for r in runs:
        busy += float((r.iter_end_s - r.iter_start_s).sum())
        per_rank = -(-np.asarray(r.iter_decode, dtype=np.int64) // max(1, attn_dp))
        host += HOST_S_PER_SEQ * float(per_rank.sum())
    return {
        "overlapped": overlap,
        "seconds_per_sequence": HOST_S_PER_SEQ,
        "decode_host_share": host / busy if busy > 0 else 0.0,
        "source": HOST_SOURCE,
    }
