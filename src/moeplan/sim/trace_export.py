"""Timelines out of the simulator: Chrome trace JSON (Perfetto) and Gantt figures.

- :func:`chrome_trace` returns the Chrome trace-event object (``{"traceEvents": [...]}``):
  one complete event (``"ph": "X"``, microseconds) per task, one process per schedule and one
  thread per resource, named by metadata events. It opens in https://ui.perfetto.dev and
  chrome://tracing, and is the same format the runtime writes, so predicted and measured
  timelines sit side by side: the runtime builds its events with :func:`complete_event` and
  :func:`lane_metadata`, the same builders.
- :func:`gantt_figure` / :func:`gantt_html` build a plotly Gantt chart (one horizontal bar per
  task, one colour per task kind); :func:`gantt_png` renders the same with matplotlib (Agg).

Everything here returns objects, strings or bytes; writing files is the caller's job.
plotly and matplotlib are imported lazily so planning never pays for them.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np

from moeplan.sim.timeline import Schedule

_PALETTE = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#72B7B2",
    "#B279A2",
    "#EECA3B",
    "#9D755D",
    "#BAB0AC",
    "#FF9DA6",
)


def _named(schedules: Schedule | Mapping[str, Schedule]) -> dict[str, Schedule]:
    return {"schedule": schedules} if isinstance(schedules, Schedule) else dict(schedules)


def complete_event(
    name: str, *, pid: int, tid: int, start_s: float, dur_s: float, **fields: Any
) -> dict[str, Any]:
    """One complete (``"ph": "X"``) event; times in seconds in, microseconds out."""
    return {
        "name": name,
        "ph": "X",
        "ts": start_s * 1e6,
        "dur": dur_s * 1e6,
        "pid": pid,
        "tid": tid,
        **fields,
    }


def lane_metadata(pid: int, process: str, threads: Mapping[int, str]) -> list[dict[str, Any]]:
    """Metadata events naming process ``pid`` and its threads (``tid -> name``), in order."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}},
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": pid},
        },
    ]
    for tid, name in threads.items():
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    return events


def chrome_trace(
    schedules: Schedule | Mapping[str, Schedule], *, metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Chrome trace-event object for one schedule or several named ones (one process each)."""
    events: list[dict[str, Any]] = []
    for pid, (label, sched) in enumerate(_named(schedules).items(), start=1):
        g = sched.graph
        events += lane_metadata(pid, label, dict(enumerate(g.resources, start=1)))
        for i, name in enumerate(g.names):
            events.append(
                complete_event(
                    name,
                    pid=pid,
                    tid=g.res[i] + 1,
                    start_s=float(sched.start[i]),
                    dur_s=float(sched.end[i] - sched.start[i]),
                    cat=g.kinds[i] or "task",
                    args={"task": i, "preds": list(g.preds[i])},
                )
            )
    other = {"makespan_s": {k: s.makespan for k, s in _named(schedules).items()}}
    other.update(metadata or {})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _kind_colors(kinds: list[str]) -> dict[str, str]:
    uniq = list(dict.fromkeys(kinds))
    return {k: _PALETTE[i % len(_PALETTE)] for i, k in enumerate(uniq)}


def gantt_figure(
    schedules: Schedule | Mapping[str, Schedule], *, title: str = "Timeline", unit: str = "ms"
) -> Any:
    """plotly ``Figure``: one row per (schedule, resource), bars coloured by task kind."""
    import plotly.graph_objects as go

    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    named = _named(schedules)
    all_kinds = [k or "task" for s in named.values() for k in s.graph.kinds]
    colors = _kind_colors(all_kinds)
    fig = go.Figure()
    shown: set[str] = set()
    for label, sched in named.items():
        g = sched.graph
        prefix = f"{label}: " if len(named) > 1 else ""
        rows = np.array([prefix + g.resources[r] for r in g.res], dtype=object)
        kinds = np.array([k or "task" for k in g.kinds], dtype=object)
        for kind in dict.fromkeys(kinds.tolist()):
            sel = np.flatnonzero(kinds == kind)
            fig.add_trace(
                go.Bar(
                    y=rows[sel],
                    x=(sched.end[sel] - sched.start[sel]) * scale,
                    base=sched.start[sel] * scale,
                    orientation="h",
                    name=kind,
                    legendgroup=kind,
                    showlegend=kind not in shown,
                    marker_color=colors[kind],
                    text=[g.names[i] for i in sel],
                    hovertemplate="%{text}<br>start %{base:.3f}"
                    f" {unit}<br>dur %{{x:.3f}} {unit}<extra></extra>",
                )
            )
            shown.add(kind)
    order = [
        f"{lab}: {r}" if len(named) > 1 else r
        for lab, s in named.items()
        for r in s.graph.resources
    ]
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis_title=f"time ({unit})",
        yaxis={"categoryorder": "array", "categoryarray": order[::-1]},
        height=120 + 40 * len(order),
    )
    return fig


def gantt_html(
    schedules: Schedule | Mapping[str, Schedule],
    *,
    title: str = "Timeline",
    include_plotlyjs: bool | str = "cdn",
) -> str:
    """Standalone HTML page with the plotly Gantt chart (``include_plotlyjs=True`` embeds
    plotly.js so the page works offline)."""
    fig = gantt_figure(schedules, title=title)
    return str(fig.to_html(include_plotlyjs=include_plotlyjs, full_html=True))


def gantt_png(
    schedules: Schedule | Mapping[str, Schedule], *, title: str = "Timeline", dpi: int = 120
) -> bytes:
    """PNG bytes of the Gantt chart drawn with matplotlib (Agg backend, no display)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    named = _named(schedules)
    rows = [(lab, r) for lab, s in named.items() for r in range(len(s.graph.resources))]
    colors = _kind_colors([k or "task" for s in named.values() for k in s.graph.kinds])
    fig = Figure(figsize=(12, 1.0 + 0.45 * len(rows)), dpi=dpi)
    ax = fig.add_subplot()
    for y, (lab, r) in enumerate(rows):
        sched = named[lab]
        ids = np.flatnonzero(np.asarray(sched.graph.res) == r)
        spans = [(sched.start[i] * 1e3, (sched.end[i] - sched.start[i]) * 1e3) for i in ids]
        face = [colors[sched.graph.kinds[i] or "task"] for i in ids]
        ax.broken_barh(spans, (len(rows) - 1 - y - 0.4, 0.8), facecolors=face, linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(
        [(f"{lab}: " if len(named) > 1 else "") + named[lab].graph.resources[r] for lab, r in rows][
            ::-1
        ]
    )
    ax.set_xlabel("time (ms)")
    ax.set_title(title)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in colors.items()],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize="small",
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
