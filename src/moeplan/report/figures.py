"""plotly figures of the ``moeplan plan`` report, one function per picture (drawn from the
planners' results as :func:`moeplan.search.job.run.plan_job` left them; nothing is recomputed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import plotly.graph_objects as go

from moeplan.units import GIB

COLORS = {
    "strategy": "#3b6fd8",
    "pipeline": "#d8873b",
    "dep": "#2f9e62",
    "pd": "#8e44ad",
    "afd": "#16a0a0",
}
GANTT_LABEL_PX = 10  # smallest readable label; names that do not fit a bar at this size hide


LOG_STEPS = (1, 2, 5)  # labelled ticks per decade on log axes: 1, 2, 5, 10, 20, 50, ...


def log_ticks(values: Any) -> dict[str, Any]:
    """A log axis whose ticks are 1-2-5 steps covering ``values`` (milliseconds), each labelled
    in full ("2,000", never a bare minor-tick digit "2")."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=float)) if x > 0])
    if not len(v):
        return {"type": "log"}
    lo, hi = float(v.min()), float(v.max())
    ticks = [
        m * 10.0**e
        for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
        for m in LOG_STEPS
    ]
    inside = [t for t in ticks if lo / 1.5 <= t <= hi * 1.5] or [lo, hi]
    return {"type": "log", "tickvals": inside, "ticktext": [f"{t:,g}" for t in inside]}


def families_bar(result: Any) -> go.Figure:
    """Prompt tokens/s per GPU of each family's best plan and of the named baselines."""
    names, values, colors, hover = [], [], [], []
    for c in result.candidates:
        names.append(c.name[0].upper() + c.name[1:])
        values.append(c.per_gpu)
        colors.append(COLORS[c.family])
        hover.append(c.label)
    for label, value, fam in baseline_rows(result):
        names.append(label)
        values.append(value)
        colors.append("#b8bfd0")
        hover.append(fam)
    fig = go.Figure(
        go.Bar(
            x=values,
            y=names,
            orientation="h",
            marker_color=colors,
            text=[f"{v:,.0f}" for v in values],
            textposition="auto",
            hovertext=hover,
        )
    )
    fig.update_layout(
        title="Prefill throughput per GPU (prompt tokens/s), best plans and baselines",
        yaxis={"autorange": "reversed"},
        height=160 + 32 * len(names),
        margin={"l": 260},
    )
    return fig


def baseline_rows(result: Any) -> list[tuple[str, float, str]]:
    """(label, prompt tokens/s per GPU, family) of every family's named baselines."""
    rows: list[tuple[str, float, str]] = []
    w = result.workload
    for c in result.candidates:
        rows += [
            (label, value, c.family) for label, value in BASELINES[c.family](c, w.batch * w.isl)
        ]
    return rows


def _strategy_baselines(c: Any, tokens: int) -> list[tuple[str, float]]:
    return [
        (f"MixServe baseline: {name}", tokens / r.prefill.total_s / r.num_gpus)
        for name, r in c.detail.baselines.items()
        if r is not None and r.fits
    ]


def _dep_baselines(c: Any, tokens: int) -> list[tuple[str, float]]:
    rep = c.detail
    return [
        (
            f"FinDEP baseline: {key}",
            getattr(rep, key).throughput
            / (rep.baseline_problems[key].ag + rep.baseline_problems[key].eg),
        )
        for key in ("pppipe", "naive")
    ]


def _pipeline_baselines(c: Any, tokens: int) -> list[tuple[str, float]]:
    return [
        (f"SMIDT baseline: {name}", b.throughput_tokens_per_s / c.gpus)
        for name, b in c.detail.baselines.items()
        if b is not None
    ]


#: Each proposed family's named baselines (label, prompt tokens/s per GPU), keyed by family
#: (:data:`moeplan.planners.families.PROPOSED`).
BASELINES: dict[str, Callable[[Any, int], list[tuple[str, float]]]] = {
    "strategy": _strategy_baselines,
    "pipeline": _pipeline_baselines,
    "dep": _dep_baselines,
}  # fmt: skip


def dep_gantt(schedules: dict[str, Any]) -> go.Figure:
    """FinDEP's schedule next to PPPipe's (``{label: Schedule}``, the first MoE layers as
    :func:`moeplan.search.job.run.plan_job` simulated them).

    Task names are drawn inside their bar only where they fit (plotly ``uniformtext`` hides the
    rest; every name stays in the hover text), so labels never overlap each other or spill
    into neighbouring bars.
    """
    from moeplan.sim.trace_export import gantt_figure

    fig = gantt_figure(schedules, title="FinDEP vs PPPipe, first MoE layers (simulated)")
    fig.update_traces(
        textposition="inside", insidetextanchor="middle", constraintext="both", textangle=0
    )
    fig.update_layout(
        uniformtext={"minsize": GANTT_LABEL_PX, "mode": "hide"},
        yaxis={"automargin": True},
        legend={"orientation": "h", "y": -0.15},
    )
    return fig


def pareto_points(a: Any, workload: Any) -> list[tuple[float, float, Any]]:
    """(ITL ms, prompt tokens/s per GPU for the batch, result) of every fitting strategy with a
    finite ITL: two of the verdict table's columns."""
    tokens = workload.batch * workload.isl
    return [
        (r.itl_s * 1e3, tokens / r.prefill.total_s / r.num_gpus, r)
        for r in a.strategies
        if np.isfinite(r.itl_s) and r.prefill.total_s > 0
    ]


def front(points: list[tuple[float, float, Any]]) -> list[tuple[float, float, Any]]:
    """Points no other point beats on both axes (lower ITL, higher throughput)."""
    out: list[tuple[float, float, Any]] = []
    best = -np.inf
    for p in sorted(points, key=lambda p: (p[0], -p[1])):
        if p[1] > best:
            out.append(p)
            best = p[1]
    return out


def pareto(c: Any, workload: Any) -> go.Figure:
    """MixServe: every fitting strategy, prompt tokens/s per GPU vs decode ITL (the table's
    columns), with its Pareto front and the strategy the verdict table shows."""
    pts = pareto_points(c.detail, workload)

    def scatter(
        items: list[tuple[float, float, Any]], name: str, mode: str, **kw: Any
    ) -> go.Scatter:
        hover = [
            f"{r.strategy.label}<br>batch prefill {r.prefill.total_s * 1e3:.1f} ms<br>"
            f"MixServe end-to-end: {r.throughput_per_gpu:,.0f} output tokens/s/GPU, "
            f"queueing TTFT {r.ttft_s * 1e3:.1f} ms"
            for *_, r in items
        ]
        return go.Scatter(
            x=[p[0] for p in items],
            y=[p[1] for p in items],
            text=hover,
            hoverinfo="text+x+y",
            name=name,
            mode=mode,
            **kw,
        )

    fig = go.Figure(
        [
            scatter(pts, "strategies", "markers", marker={"color": "#9aa6c4"}),
            scatter(
                front(pts), "Pareto front", "lines+markers", marker={"color": COLORS["strategy"]}
            ),
        ]
    )
    if c.itl_s:
        fig.add_trace(
            go.Scatter(
                x=[c.itl_s * 1e3],
                y=[c.per_gpu],
                mode="markers+text",
                text=["verdict table row"],
                textposition="top center",
                marker={"symbol": "star", "size": 14, "color": "#c0392b"},
                name=f"in the table: {c.label}",
            )
        )
    fig.update_layout(
        title="MixServe: prompt tokens/s per GPU (batch prefill) vs decode ITL",
        xaxis_title="ITL (ms, log scale)",
        yaxis_title="prompt tokens/s per GPU",
        xaxis=log_ticks([p[0] for p in pts]),
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def pipeline_stages(c: Any, mem_limit: float) -> go.Figure:
    """SMIDT: time and memory per GPU of each stage, next to time-balanced layer-level PP."""
    from plotly.subplots import make_subplots

    res = c.detail
    fig = make_subplots(rows=1, cols=2, subplot_titles=("stage time (ms)", "memory per GPU (GiB)"))
    plans = [("SMIDT", res.plan, COLORS["pipeline"])]
    tb = res.baselines.get("time_balanced")
    if tb is not None:
        plans.append(("time-balanced layer PP", tb, "#9aa6c4"))
    for name, p, color in plans:
        x = [f"stage {i}" for i in range(len(p.stages))]
        fig.add_trace(
            go.Bar(
                x=x,
                y=[s.time_s * 1e3 for s in p.stages],
                name=name,
                marker_color=color,
                legendgroup=name,
            ),
            1,
            1,
        )
        fig.add_trace(
            go.Bar(
                x=x,
                y=[s.mem_bytes_per_gpu / GIB for s in p.stages],
                name=name,
                marker_color=color,
                legendgroup=name,
                showlegend=False,
            ),
            1,
            2,
        )
    fig.add_hline(y=mem_limit / GIB, line_dash="dash", annotation_text="GPU memory", row=1, col=2)
    fig.update_layout(title="SMIDT stages vs time-balanced layer-level PP", barmode="group")
    return fig


def placement_figures(placement: Any) -> list[go.Figure]:
    """Sem-MoE: LAR and imbalance per method, and the expert -> device map per layer."""
    methods = placement.methods
    names = list(methods)
    lar = [methods[n].metrics.get("lar", 0.0) for n in names]
    imb = [methods[n].metrics.get("imbalance", 0.0) for n in names]
    bars = go.Figure(
        [
            go.Bar(x=names, y=lar, name="LAR (higher is better)", marker_color="#2f9e62"),
            go.Bar(
                x=names, y=imb, name="imbalance max/mean (lower is better)", marker_color="#c0392b"
            ),
        ]
    )
    bars.update_layout(
        title=f"Expert placement on EP{placement.ep}: local activation rate and "
        "load imbalance (held-out tokens)",
        barmode="group",
        height=380,
    )
    y = methods["semmoe"].y
    heat = go.Figure(
        go.Heatmap(
            z=y,
            colorscale="Viridis",
            colorbar={"title": "device"},
            hovertemplate="layer %{y}, expert %{x}: device %{z}<extra></extra>",
        )
    )
    heat.update_layout(
        title="Sem-MoE placement: device of each expert, per MoE layer",
        xaxis_title="logical expert",
        yaxis_title="MoE layer",
        height=260 + 12 * y.shape[0],
    )
    return [bars, heat]
