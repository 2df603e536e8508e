"""Event-driven simulator of tasks on exclusive resources (see :mod:`moeplan.sim.timeline`)
and its exports (Chrome trace JSON, Gantt figures; see :mod:`moeplan.sim.trace_export`)."""

from moeplan.sim.timeline import (
    InvariantError,
    Schedule,
    TaskGraph,
    simulate,
    simulate_list,
)
from moeplan.sim.trace_export import chrome_trace, gantt_figure, gantt_html, gantt_png

__all__ = [
    "InvariantError",
    "Schedule",
    "TaskGraph",
    "chrome_trace",
    "gantt_figure",
    "gantt_html",
    "gantt_png",
    "simulate",
    "simulate_list",
]
