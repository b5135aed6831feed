"""Lens figures: per-layer KL (paper Figure 2) and cross-entropy, tied vs untied, with the gap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

COLORS = {"tied": "#d62728", "untied": "#1f77b4"}


def per_layer(df: pd.DataFrame, columns: dict[str, str], title: str, yaxis: str) -> go.Figure:
    """One panel per column (e.g. tuned and logit lens KL); a line per variant, mean +- sd over seeds."""
    fig = make_subplots(rows=1, cols=len(columns), subplot_titles=list(columns.values()), shared_yaxes=True)
    for j, col in enumerate(columns, start=1):
        for v in dict.fromkeys(df.variant):
            g = df[df.variant == v].groupby("layer")[col]
            mean, sd = g.mean(), g.std(ddof=1).fillna(0)
            fig.add_scatter(x=mean.index, y=mean.values, error_y=dict(array=sd.values), mode="lines+markers",
                            name=v, line=dict(color=COLORS.get(v, "#7f7f7f")), legendgroup=v, showlegend=j == 1,
                            row=1, col=j)
        fig.update_xaxes(title_text="layer (0 = embeddings, last = model output)", dtick=1, row=1, col=j)
    fig.update_yaxes(title_text=yaxis, row=1, col=1)
    fig.update_layout(height=420, title=title)
    return fig


def gap(gaps: pd.DataFrame, title: str = "tied - untied tuned-lens KL per layer (mean, 95% CI over seeds)") -> go.Figure:
    """The per-layer gap with its confidence interval; significant layers marked."""
    err_hi = np.nan_to_num(gaps.ci_high - gaps.gap)
    err_lo = np.nan_to_num(gaps.gap - gaps.ci_low)
    colors = ["#d62728" if s else "#aaaaaa" for s in gaps.significant]
    fig = go.Figure(go.Bar(x=gaps.layer, y=gaps.gap, marker_color=colors,
                           error_y=dict(type="data", array=err_hi, arrayminus=err_lo, symmetric=False)))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(height=380, title=title + " (red: CI excludes 0)", xaxis_title="layer",
                      yaxis_title="KL gap (bits)", xaxis=dict(dtick=1))
    return fig


def gap_by_depth(gaps: dict[str, pd.DataFrame]) -> go.Figure:
    """Tied - untied tuned-lens KL gap against relative depth (layer / layers), one line per model depth."""
    fig = go.Figure()
    for (name, g), color in zip(gaps.items(), ["#d62728", "#1f77b4", "#2ca02c"], strict=False):
        x = g.layer / g.layer.max()
        fig.add_scatter(x=x, y=g.gap, mode="lines+markers", name=f"{name} ({int(g.layer.max())} layers)",
                        line=dict(color=color), error_y=dict(array=np.nan_to_num(g.gap_sd.values)))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(height=380, title="tied - untied tuned-lens KL by relative depth (mean ± sd over seeds)",
                      xaxis_title="layer / number of layers", yaxis_title="KL gap (bits)")
    return fig
