"""Figures of the serving simulation: Pareto front, latency distributions, latency vs rate.

Every number drawn here was simulated (moeplan.serve) on moeplan's cost model by
:func:`moeplan.search.job.run.plan_job`; axes say per GPU or per user and which percentile. Log
axes label powers of ten only (1, 10, 100, 1,000 ms) and each SLO line says what it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeplan.report.figures import log_ticks

if TYPE_CHECKING:
    from moeplan.search.ranking.result import ServeRanking
    from moeplan.serve.metrics import SLO

DASHES = ("solid", "dash", "dot", "dashdot")
LINE_COLORS = ("#3b6fd8", "#d8873b", "#2f9e62", "#8e44ad")  # one per top plan, both panels
CDF_POINTS = 200  # quantiles drawn per latency distribution: finer than a 420 px chart resolves
SLO_COLOR = "#c33"


def serving_pareto(ranking: ServeRanking, curves: dict[str, Any]) -> go.Figure:
    """Output tokens/s per GPU against tokens/s per user (1 / median TPOT): every steady
    operating point of the load sweep (``curves["sweep"]``, one colour per deployment,
    faint), the non-dominated front (``curves["front"]``) as a labelled line, and the
    region whose tokens/s per user is within the TPOT SLO shaded."""
    fig = go.Figure()
    swept = curves.get("sweep") or {}
    for i, (label, pts) in enumerate(swept.items()):
        pts = [p for p in pts if p["stable"] and p["tokens_per_s_per_user"] > 0]
        if not pts:
            continue
        fig.add_scatter(
            x=[p["tokens_per_s_per_user"] for p in pts],
            y=[p["tokens_per_s_per_gpu"] for p in pts],
            mode="markers+lines",
            name=label,
            opacity=0.35,
            line={"color": LINE_COLORS[i % len(LINE_COLORS)], "width": 1},
            marker={
                "color": LINE_COLORS[i % len(LINE_COLORS)],
                "size": 8,
                "symbol": ["circle" if p["meets_slo"] else "x" for p in pts],
            },
            text=[_hover(p) for p in pts],
            hoverinfo="text",
        )
    front = sorted(curves.get("front") or [], key=lambda p: p["tokens_per_s_per_user"])
    if front:
        fig.add_scatter(
            x=[p["tokens_per_s_per_user"] for p in front],
            y=[p["tokens_per_s_per_gpu"] for p in front],
            mode="lines+markers+text",
            text=[_short(p) for p in front],
            textposition=[_text_side(i, len(front)) for i in range(len(front))],
            textfont={"size": 10},
            cliponaxis=False,
            name="Pareto front",
            line={"color": "#222", "width": 2},
            marker={"color": "#222", "size": 9},
            hovertext=[_hover(p) for p in front],
            hoverinfo="text",
        )
    tpot = ranking.slo.tpot_s
    if tpot:
        fig.add_vrect(
            x0=1.0 / tpot, x1=1.0 / tpot * 1e3, fillcolor="#2f9e62", opacity=0.08,
            line_width=0, annotation_text=f"within the TPOT SLO ({tpot * 1e3:,.0f} ms)",
            annotation_position="top left",
        )  # fmt: skip
    xs = [p["tokens_per_s_per_user"] for pts in swept.values() for p in pts]
    xs += [p["tokens_per_s_per_user"] for p in front]
    if xs:
        fig.update_xaxes(range=[0, 1.1 * max(xs)])
    fig.update_layout(
        title="Pareto front: throughput per GPU against speed per user (simulated steady "
        "runs; x = misses the SLOs)",
        xaxis_title="output tokens/s per user (1 / median TPOT)",
        yaxis_title="output tokens/s per GPU",
        height=480,
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def _short(p: dict[str, Any]) -> str:
    """A front point's label: its deployment and load, short enough to sit on the chart."""
    return f"{p['deployment'].replace(' : ', ' :<br>')}<br>{p['rate_rps']:,.3g} req/s"


def _hover(p: dict[str, Any]) -> str:
    """A point's figures on hover: deployment, rate, batch cap, TTFT and TPOT p90."""
    cap = "" if p.get("batch_cap") is None else f", batch cap {p['batch_cap']}"
    return (
        f"{p['label']}<br>{p['rate_rps']:,.3g} req/s{cap}<br>TTFT p90 "
        f"{p['ttft_p90_s'] * 1e3:,.0f} ms, TPOT p90 {p['tpot_p90_s'] * 1e3:,.1f} ms<br>"
        f"{'meets' if p['meets_slo'] else 'misses'} the SLOs"
    )


def _text_side(i: int, n: int) -> str:
    """Where the label of the ``i``-th of ``n`` front points (by x) goes: inward at both ends,
    so no label runs off the plot."""
    if n == 1:
        return "bottom center"
    return "top right" if i == 0 else "top left" if i == n - 1 else "top center"


def _slo_label(name: str, limit_s: float) -> str:
    return f"{name} SLO {limit_s * 1e3:,.0f} ms"


def _slo_line(fig: go.Figure, col: int, name: str, limit_s: float, vertical: bool) -> None:
    """A dashed SLO line on subplot ``col`` with its label. The label is placed by hand: on a
    log axis an annotation's coordinate is log10 of the value (plotly.js), which
    ``add_vline(annotation_text=...)`` does not convert."""
    ms = limit_s * 1e3
    ax = "" if col == 1 else str(col)
    if vertical:
        fig.add_vline(x=ms, line_dash="dash", line_color=SLO_COLOR, row=1, col=col)
        fig.add_annotation(
            x=float(np.log10(ms)),
            xref=f"x{ax}",
            y=0.02,
            yref=f"y{ax} domain",
            text=_slo_label(name, limit_s),
            showarrow=False,
            xanchor="left",
            font={"color": SLO_COLOR},
        )
    else:
        fig.add_hline(y=ms, line_dash="dash", line_color=SLO_COLOR, row=1, col=col)
        fig.add_annotation(
            y=float(np.log10(ms)),
            yref=f"y{ax}",
            x=0.01,
            xref=f"x{ax} domain",
            text=_slo_label(name, limit_s),
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"color": SLO_COLOR},
        )


def cdf_points(values: Any, n: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(value, fraction of requests at or below it) at ``n`` evenly spaced fractions: the
    empirical CDF's shape without one point per request (exact for ``n`` >= the sample)."""
    v = np.sort(np.asarray(values, dtype=float))
    if len(v) <= n:
        return v, np.arange(1, len(v) + 1) / len(v)
    frac = np.linspace(1.0 / len(v), 1.0, n)
    idx = np.ceil(frac * len(v)).astype(int) - 1
    return v[idx], (idx + 1) / len(v)


def latency_distributions(curves: dict[str, Any], slo: SLO) -> go.Figure:
    """Empirical CDFs of per-request TTFT and TPOT of the top plans, SLO limits labelled."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT per request", "TPOT per request"))
    drawn: dict[int, list[float]] = {1: [], 2: []}
    for i, (label, lat) in enumerate(curves["latency"].items()):
        dash = DASHES[i % len(DASHES)]
        color = LINE_COLORS[i % len(LINE_COLORS)]
        for col, key in ((1, "ttft_s"), (2, "tpot_s")):
            if not len(lat[key]):
                continue
            x, y = cdf_points(lat[key])
            fig.add_scatter(
                x=x * 1e3,
                y=y,
                mode="lines",
                name=label,
                legendgroup=label,
                showlegend=col == 1,
                line={"dash": dash, "color": color},
                row=1,
                col=col,
            )
            drawn[col] += list(x * 1e3)
    for col, name, limit in ((1, "TTFT", slo.ttft_s), (2, "TPOT", slo.tpot_s)):
        if limit is not None:
            _slo_line(fig, col, name, limit, vertical=True)
            drawn[col].append(limit * 1e3)
        fig.update_xaxes(title_text="ms (log scale)", row=1, col=col, **log_ticks(drawn[col]))
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02])
    fig.update_layout(
        title="Latency distributions at each plan's operating point (simulated)",
        height=420,
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def latency_rate(curves: dict[str, Any], slo: SLO) -> go.Figure:
    """p90 TTFT and TPOT against the arrival rate for the top plans, SLOs labelled."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT p90", "TPOT p90"))
    drawn: dict[int, list[float]] = {1: [], 2: []}
    for i, (label, pts) in enumerate(curves["rate"].items()):
        dash = DASHES[i % len(DASHES)]
        color = LINE_COLORS[i % len(LINE_COLORS)]
        x = [p["rate_rps"] for p in pts]
        for col, key in ((1, "ttft_p90_s"), (2, "tpot_p90_s")):
            fig.add_scatter(
                x=x,
                y=[p[key] * 1e3 for p in pts],
                mode="lines+markers",
                name=label,
                legendgroup=label,
                showlegend=col == 1,
                line={"dash": dash, "color": color},
                row=1,
                col=col,
            )
            drawn[col] += [p[key] * 1e3 for p in pts]
    for col, name, limit in ((1, "TTFT", slo.ttft_s), (2, "TPOT", slo.tpot_s)):
        if limit is not None:
            _slo_line(fig, col, name, limit, vertical=False)
            drawn[col].append(limit * 1e3)
        fig.update_yaxes(title_text="ms (log scale)", row=1, col=col, **log_ticks(drawn[col]))
    fig.update_xaxes(title_text="arrival rate (requests/s, Poisson)")
    fig.update_layout(
        title="Latency against load (simulated, p90 per point)",
        height=420,
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
