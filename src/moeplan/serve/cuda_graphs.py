"""Decode steps outside the engine's CUDA graphs: how much of a run moeplan prices
optimistic.

An engine replays a captured CUDA graph for a decode step of up to its capture size (per
attention-DP rank: vLLM 0.11.0's ``min(2 x max_num_seqs, 512)``, SGLang's
``cuda_graph_max_bs``; :meth:`moeplan.backends.EngineBackend.graph_max_bs`) and runs a larger
one eagerly, launching every kernel from the host, while its scheduler, input preparation
and output handling grow with the running requests. moeplan prices every decode step with
the kernel tables' times, which were measured under CUDA graphs, and the host work at one
published per-sequence figure (:mod:`moeplan.cost.host`): nothing public measures eager
launches or the host work at these batch sizes. So a run records the share of its engine time
spent in decode steps above the capture size (``moeplan bench``:
``moeplan.scheduler.cuda_graphs``; ``serve-sim``: ``cuda_graphs``, of its run at the
operating rate), and a run with more than :data:`OUTSIDE_GRAPHS_FLAG` of it there says so:
its figures are optimistic. ``moeplan validate`` scores such runs apart (the ``graphs``
dimension of its tables): on the lab's runs they are the ones predicted at about twice the
measured throughput (docs/benchmarks/validate.md). Not stated for TensorRT-LLM (its capture
sizes are not modelled) nor for a P/D pair.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from moeplan.backends import backend, simulated
from moeplan.backends.base import MemoryContext
from moeplan.planners.layout import Layout
from moeplan.serve.engine.config import EngineConfig, SimResult
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.specs import ClusterSpec, ModelSpec

#: a run with more than this share of its engine time in decode steps above the engine's
#: CUDA-graph capture size is flagged (module docstring): a tenth, a share no run reaches by
#: a few stray steps (the lab's runs have either at most 4.3 % or at least 17.5 % there)
OUTSIDE_GRAPHS_FLAG = 0.10


def outside_graphs(runs: list[SimResult], attn_dp: int, capture: int) -> float:
    """The share of ``runs``' engine time (their iterations' durations together) spent in
    decode steps of more than ``capture`` sequences on an attention-DP rank (the step's
    sequences over ``attn_dp`` ranks, rounded up)."""
    busy = above = 0.0
    for r in runs:
        d = r.iter_end_s - r.iter_start_s
        per_rank = -(-np.asarray(r.iter_decode, dtype=np.int64) // max(1, attn_dp))
        busy += float(d.sum())
        above += float(d[per_rank > capture].sum())
    return above / busy if busy > 0 else 0.0


def graphs_record(
    engine: str,
    model: ModelSpec,
    cluster: ClusterSpec,
    lay: Layout,
    cfg: EngineConfig,
    knobs: InstanceKnobs | None,
    runs: list[SimResult],
) -> dict[str, Any]:
    """The engine's decode capture size per attention-DP rank (None: not stated), the share
    of ``runs``' engine time above it and whether that flags the run (module docstring)."""
    ctx = MemoryContext(
        gpu=cluster.gpu, tp=lay.stage_gpus, pp=lay.pp, attn_dp=lay.attn_dp,
        chunk=cfg.chunk_tokens or 0, deepep=knobs is not None and knobs.a2a == "deepep",
        mla=model.attention == "mla", mtp=0 if knobs is None else knobs.mtp,
    )  # fmt: skip
    cap = backend(engine).graph_max_bs(ctx, cfg.max_running) if engine in simulated() else None
    share = None if cap is None else outside_graphs(runs, lay.attn_dp, cap)
    return {
        "capture_max_batch_per_rank": cap,
        "engine_time_above_share": share,
        "flagged": share is not None and share > OUTSIDE_GRAPHS_FLAG,
    }
