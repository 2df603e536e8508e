"""The figures the single-family commands write beside their ``plan.json``: the MixServe
Pareto front (``strategy``), SMIDT's stages (``pipeline``) and Sem-MoE's placement heatmap
(``place``). Each is one self-contained plotly HTML page, returned as text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the results drawn; a renderer computes nothing
    from moeplan.planners.pipeline import PipelineResult
    from moeplan.planners.placement.planner import PlacementResult
    from moeplan.planners.strategy.analyzer import Analysis


def pareto_html(a: Analysis, title: str) -> str:
    """Plotly figure: every ranked strategy, the Pareto front as a line."""
    import plotly.graph_objects as go

    def trace(rs, name, mode):
        return go.Scatter(
            x=[r.ttft_s * 1e3 for r in rs],
            y=[r.throughput_per_gpu for r in rs],
            text=[r.strategy.label for r in rs],
            name=name,
            mode=mode,
        )

    fig = go.Figure(
        [
            trace(a.strategies, "strategies", "markers"),
            trace(a.pareto, "Pareto front", "lines+markers"),
        ]
    )
    base = [r for r in a.baselines.values() if r is not None and r.fits]
    fig.add_trace(
        go.Scatter(
            x=[r.ttft_s * 1e3 for r in base],
            y=[r.throughput_per_gpu for r in base],
            mode="markers",
            marker={"symbol": "x", "size": 11},
            text=[n for n, r in a.baselines.items() if r in base],
            name="baselines",
        )
    )
    fig.update_layout(
        title=title, xaxis_title="TTFT (ms)", yaxis_title="throughput per GPU (tokens/s)"
    )
    return fig.to_html(include_plotlyjs=True, full_html=True)


def figure_html(res: PipelineResult) -> str:
    """Plotly page: stage time (compute + P2P) and memory per GPU, SMIDT vs baselines."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("stage time (ms)", "memory per GPU (GiB)"))
    plans = [("smidt", res.plan)] + [(k, v) for k, v in res.baselines.items() if v is not None]
    for name, plan in plans:
        x = [f"{name} PP{plan.pp} s{j}" for j in range(plan.pp)]
        fig.add_bar(
            x=x, y=[s.time_s * 1e3 for s in plan.stages], name=f"{name} compute", row=1, col=1
        )
        fig.add_bar(x=x, y=[s.p2p_s * 1e3 for s in plan.stages], name=f"{name} p2p", row=1, col=1)
        fig.add_bar(
            x=x,
            y=[s.mem_bytes_per_gpu / 2**30 for s in plan.stages],
            name=f"{name} memory",
            row=1,
            col=2,
        )
    fig.add_hline(
        y=res.mem_limit_bytes / 2**30, line_dash="dash", row=1, col=2, annotation_text="GPU memory"
    )
    fig.update_layout(
        barmode="stack", title=f"SMIDT plan: {res.model} on {res.cluster}", height=520
    )
    return fig.to_html(include_plotlyjs=True, full_html=True)


def heatmap_html(res: PlacementResult, title: str, top_tokens: int = 200) -> str:
    """Two panels: device of every expert per layer; P(device | token) of frequent tokens."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    y = res.methods["semmoe"].y
    conf = res.token_conf
    order = np.argsort(conf.argmax(axis=1) * 2.0 - conf.max(axis=1), kind="stable")
    order = order[:: max(1, len(order) // top_tokens)][:top_tokens]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "expert -> device (Sem-MoE), per MoE layer",
            "P(device | token), tokens by device",
        ),
    )
    fig.add_trace(
        go.Heatmap(
            z=y,
            colorscale="Viridis",
            colorbar={"title": "device", "x": 0.45},
            hovertemplate="layer %{y} expert %{x}: device %{z}<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Heatmap(
            z=conf[order].T,
            colorscale="Blues",
            x=[str(t) for t in res.token_ids[order]],
            hovertemplate="token %{x} device %{y}: %{z:.2f}<extra></extra>",
        ),
        1,
        2,
    )
    fig.update_xaxes(title_text="expert", row=1, col=1)
    fig.update_yaxes(title_text="MoE layer", row=1, col=1)
    fig.update_xaxes(title_text="token id", showticklabels=False, row=1, col=2)
    fig.update_yaxes(title_text="device", row=1, col=2)
    fig.update_layout(title=title)
    return fig.to_html(include_plotlyjs=True, full_html=True)
