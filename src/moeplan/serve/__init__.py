"""Request-level, iteration-level serving simulation (DESIGN.md "Serving simulation").

Requests arrive (:mod:`.workload`), an engine model schedules iterations as SGLang and vLLM V1
do (:mod:`.engine`), each iteration's time comes from the cost model for the deployment's
layout (:mod:`.iteration`, :mod:`.layout`), and a run is summarised as TTFT / TPOT / ITL /
E2E percentiles, tokens/s per GPU and goodput under SLOs (:mod:`.metrics`). :mod:`.search`
finds the engine knobs per layout and the largest rate meeting the SLOs;
:func:`evaluate_layouts` is the entry point for planners. Pure Python + numpy: no torch, no I/O.
"""

from moeplan.serve.engine import EngineConfig, SimResult, simulate
from moeplan.serve.iteration import Batch, IterationModel, iteration_model, iteration_time
from moeplan.serve.layout import ServeLayout, kv_capacity_tokens
from moeplan.serve.metrics import SLO, ServeMetrics, summarize
from moeplan.serve.search import (
    ServeResult,
    engine_config,
    evaluate_layout,
    evaluate_layouts,
    max_rate_meeting_slo,
    rank_results,
)
from moeplan.serve.trace import serve_trace
from moeplan.serve.workload import (
    LengthDist,
    Requests,
    ServeWorkload,
    generate,
    requests_from_rows,
)

__all__ = [
    "SLO",
    "Batch",
    "EngineConfig",
    "IterationModel",
    "LengthDist",
    "Requests",
    "ServeLayout",
    "ServeMetrics",
    "ServeResult",
    "ServeWorkload",
    "SimResult",
    "engine_config",
    "evaluate_layout",
    "evaluate_layouts",
    "generate",
    "iteration_model",
    "iteration_time",
    "kv_capacity_tokens",
    "max_rate_meeting_slo",
    "rank_results",
    "requests_from_rows",
    "serve_trace",
    "simulate",
    "summarize",
]
