"""Chrome trace and Gantt exports of simulated schedules (moeplan.sim.trace_export)."""

from __future__ import annotations

import json

import pytest

from moeplan.sim import TaskGraph, chrome_trace, gantt_html, gantt_png, simulate


def _schedule():
    g = TaskGraph()
    a = g.add("A0", "AG", 0.002, kind="attention")
    g.add("E0", "EG", 0.001, [a], kind="expert")
    return simulate(g)


def test_chrome_trace_has_one_complete_event_per_task_in_microseconds():
    tr = chrome_trace(_schedule())
    json.dumps(tr)  # serializable
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in xs] == [
        ("A0", 0.0, pytest.approx(2000.0)),
        ("E0", pytest.approx(2000.0), pytest.approx(1000.0)),
    ]
    threads = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {"AG", "EG"}


def test_chrome_trace_puts_each_named_schedule_in_its_own_process():
    tr = chrome_trace({"FinDEP": _schedule(), "PPPipe": _schedule()})
    procs = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert procs == {1: "FinDEP", 2: "PPPipe"}
    assert set(tr["otherData"]["makespan_s"]) == {"FinDEP", "PPPipe"}


def test_gantt_html_and_png():
    html = gantt_html(_schedule(), title="t")
    assert "<html>" in html and "plotly" in html.lower() and "A0" in html
    png = gantt_png({"x": _schedule(), "y": _schedule()})
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
