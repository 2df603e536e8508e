"""Request-level, iteration-level serving simulation (DESIGN.md "Serving simulation").

Requests arrive (:mod:`.workload`), an engine model schedules iterations as SGLang and vLLM V1
do (:mod:`.engine`), each iteration's time comes from the cost model for the deployment's
layout (:mod:`.iteration`, :mod:`.layout`), and a run is summarised as TTFT / TPOT / ITL /
E2E percentiles, tokens/s per GPU and goodput under SLOs (:mod:`.metrics`). The searches over this simulator (engine knobs per layout, the largest rate
meeting the SLOs, the deployment space, ``moeplan plan``'s job) are :mod:`moeplan.search`, the
layer above. Pure Python + numpy: no torch, no I/O.
"""

from moeplan.serve.engine.run import EngineConfig, SimResult, simulate
from moeplan.serve.iteration.model import Batch, IterationModel, iteration_model, iteration_time
from moeplan.serve.knobs import engine_config
from moeplan.serve.layout import ServeLayout, kv_capacity_tokens
from moeplan.serve.metrics import SLO, ServeMetrics, summarize
from moeplan.serve.trace import serve_trace
from moeplan.serve.workload.arrivals import (
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
    "ServeWorkload",
    "SimResult",
    "engine_config",
    "generate",
    "iteration_model",
    "iteration_time",
    "kv_capacity_tokens",
    "requests_from_rows",
    "serve_trace",
    "simulate",
    "summarize",
]
