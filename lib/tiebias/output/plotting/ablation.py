"""Ablation figures: dose-response of the tied matrix's alignment to the input-gradient factor k."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias.output.plotting.style import log_axis, reference_line
from tiebias.verdicts import claims

SERIES = {"vs_untied_input": ("untied input -> tied", "#1f77b4"),
          "vs_untied_output": ("untied output -> tied", "#d62728")}


def _band(fig: go.Figure, x, mean, std, name: str, color: str, row: int, col: int, show: bool) -> None:
    lo, hi = mean - np.nan_to_num(std), mean + np.nan_to_num(std)
    fig.add_scatter(x=list(x) + list(x)[::-1], y=list(hi) + list(lo)[::-1], fill="toself", fillcolor=color,
                    opacity=0.15, line=dict(width=0), hoverinfo="skip", showlegend=False, row=row, col=col)
    fig.add_scatter(x=x, y=mean, mode="lines+markers", line=dict(color=color), name=name, legendgroup=name,
                    showlegend=show, row=row, col=col)


def dose_response(table: pd.DataFrame, shares: pd.DataFrame | None = None, *, step: int | None = None) -> go.Figure:
    """Cosine of the untied input / output matrices to the tied one against k (log axis), mean +- sd over seeds.

    One panel per alignment method; a last panel with the output path's gradient share under each k.
    """
    d = table if step is None else table[table.step == step]
    if step is None:
        d = d[d.step == d.step.max()]
    methods = list(dict.fromkeys(d.method))
    ncols = len(methods) + (1 if shares is not None else 0)
    titles = [f"{m} alignment" for m in methods] + (["output share of the gradient"] if shares is not None else [])
    fig = make_subplots(rows=1, cols=ncols, subplot_titles=titles, horizontal_spacing=0.1)
    for i, m in enumerate(methods, start=1):
        dm = d[d.method == m]
        for col, (label, color) in SERIES.items():
            g = dm.groupby("k")[col]
            _band(fig, g.mean().index, g.mean().values, g.std(ddof=1).values, label, color, 1, i, i == 1)
        log_axis(fig, dm.k, "x", row=1, col=i)
        fig.update_xaxes(title_text="input-gradient factor k", row=1, col=i)
        fig.update_yaxes(title_text="mean cosine to tied", row=1, col=i)
    if shares is not None:
        g = shares.groupby("k").output_share
        _band(fig, g.mean().index, g.mean().values, g.std(ddof=1).values, "output share", "#7f7f7f", 1, ncols, True)
        reference_line(fig, claims.CLAIM2_SHARE, f"claim 2 threshold {claims.CLAIM2_SHARE:.0%}", row=1, col=ncols)
        log_axis(fig, shares.k, "x", row=1, col=ncols)
        fig.update_xaxes(title_text="input-gradient factor k", row=1, col=ncols)
        fig.update_yaxes(range=[0, 1.05], title_text="out / (in + out)", row=1, col=ncols)
    n = d.seed.nunique()
    fig.update_layout(height=440, margin=dict(t=110),
                      title=f"Dose-response at step {int(d.step.max())} (bands: ± sd over {n} seeds)")
    return fig


def over_steps(table: pd.DataFrame, method: str = "orthogonal") -> go.Figure:
    """Both cosines against training step, one line per k (mean over seeds)."""
    d = table[table.method == method]
    fig = make_subplots(rows=1, cols=2, subplot_titles=[v[0] for v in SERIES.values()], shared_yaxes=False)
    ks = sorted(d.k.unique())
    palette = ["#444444", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    for j, col in enumerate(SERIES, start=1):
        for i, k in enumerate(ks):
            g = d[d.k == k].groupby("step")[col].mean()
            fig.add_scatter(x=g.index, y=g.values, mode="lines+markers", name=f"k={k:g}",
                            line=dict(color=palette[i % len(palette)]), legendgroup=f"k{k}", showlegend=j == 1,
                            row=1, col=j)
        fig.update_xaxes(title_text="training step", row=1, col=j)
        fig.update_yaxes(title_text=f"mean cosine ({method})", row=1, col=j)
    fig.update_layout(height=380, title=f"{method} alignment through training, per k (mean over seeds)")
    return fig
