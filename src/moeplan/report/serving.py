"""Figures of the serving simulation: Pareto front, latency distributions, latency vs rate.

Every number drawn here is simulated (moeplan.serve) on moeplan's cost model; axes say per GPU
or per user and which percentile.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeplan.report.figures import COLORS, FAMILY_NAMES

DASHES = ("solid", "dash", "dot", "dashdot")
LINE_COLORS = ("#3b6fd8", "#d8873b", "#2f9e62", "#8e44ad")  # one per top plan, both panels


def serving_pareto(ranking: Any) -> go.Figure:
    """Output tokens/s per GPU against tokens/s per user (1 / median TPOT), every simulated
    deployment; the non-dominated front as a line."""
    fig = go.Figure()
    for fam in dict.fromkeys(x.entry.family for x in ranking.ranked):
        xs = [x for x in ranking.ranked if x.entry.family == fam and x.metrics is not None
              and x.metrics.tpot_p50_s > 0]
        if not xs:
            continue
        fig.add_scatter(
            x=[1.0 / x.metrics.tpot_p50_s for x in xs],
            y=[x.metrics.output_tokens_per_s_per_gpu for x in xs],
            mode="markers", name=FAMILY_NAMES.get(fam, fam),
            marker={"color": COLORS.get(fam), "size": 11,
                    "symbol": ["circle" if x.result.meets_slo else "x" for x in xs]},
            text=[f"{x.entry.layout.label}<br>{'meets' if x.result.meets_slo else 'misses'} "
                  "the SLOs" for x in xs], hoverinfo="text+x+y")
    front = ranking.pareto()
    if front:
        pts = sorted(front, key=lambda p: p["tokens_per_s_per_user"])
        fig.add_scatter(x=[p["tokens_per_s_per_user"] for p in pts],
                        y=[p["tokens_per_s_per_gpu"] for p in pts], mode="lines",
                        name="Pareto front", line={"color": "#555", "dash": "dash"})
    fig.update_layout(title="Throughput per GPU against speed per user (simulated; "
                            "x = failed SLOs)",
                      xaxis_title="tokens/s per user (1 / median TPOT)",
                      yaxis_title="output tokens/s per GPU", height=420)
    return fig


def latency_distributions(curves: dict[str, Any], slo: Any) -> go.Figure:
    """Empirical CDFs of per-request TTFT and TPOT of the top plans, SLO limits dashed."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT per request", "TPOT per request"))
    for i, (label, lat) in enumerate(curves["latency"].items()):
        dash = DASHES[i % len(DASHES)]
        color = LINE_COLORS[i % len(LINE_COLORS)]
        for col, key in ((1, "ttft_s"), (2, "tpot_s")):
            v = np.sort(np.asarray(lat[key], dtype=float)) * 1e3
            if not len(v):
                continue
            fig.add_scatter(x=v, y=np.arange(1, len(v) + 1) / len(v), mode="lines",
                            name=label, legendgroup=label, showlegend=col == 1,
                            line={"dash": dash, "color": color}, row=1, col=col)
    for col, limit in ((1, slo.ttft_s), (2, slo.tpot_s)):
        if limit is not None:
            fig.add_vline(x=limit * 1e3, line_dash="dash", line_color="#c33", row=1, col=col)
    fig.update_xaxes(title_text="ms", type="log")
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02])
    fig.update_layout(title="Latency distributions at each plan's operating point (simulated; "
                            "SLO limits dashed red)", height=400)
    return fig


def latency_rate(curves: dict[str, Any], slo: Any) -> go.Figure:
    """p90 TTFT and TPOT against the arrival rate for the top plans, SLO limits dashed."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"TTFT p{slo.percentile:g}",
                                                        f"TPOT p{slo.percentile:g}"))
    for i, (label, pts) in enumerate(curves["rate"].items()):
        dash = DASHES[i % len(DASHES)]
        color = LINE_COLORS[i % len(LINE_COLORS)]
        x = [p["rate_rps"] for p in pts]
        for col, key in ((1, "ttft_p90_s"), (2, "tpot_p90_s")):
            fig.add_scatter(x=x, y=[p[key] * 1e3 for p in pts], mode="lines+markers",
                            name=label, legendgroup=label, showlegend=col == 1,
                            line={"dash": dash, "color": color}, row=1, col=col)
    for col, limit in ((1, slo.ttft_s), (2, slo.tpot_s)):
        if limit is not None:
            fig.add_hline(y=limit * 1e3, line_dash="dash", line_color="#c33", row=1, col=col)
    fig.update_xaxes(title_text="arrival rate (requests/s, Poisson)")
    fig.update_yaxes(title_text="ms", type="log")
    fig.update_layout(title="Latency against load (simulated, 300 requests per point)",
                      height=400)
    return fig
