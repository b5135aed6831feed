"""Ablation figures: dose-response of the tied matrix's alignment to the input-gradient factor k."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias.output.plotting.style import log_axis, reference_line
from tiebias.stats import LEVEL
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

    Args:
        table: the sweep's alignment table (:func:`tiebias.ablate.sweep.alignment_table`).
        shares: the gradient shares per k and seed (:func:`tiebias.ablate.sweep.gradient_shares`), drawn in a last
            panel with claim 2's threshold (None: no such panel).
        step: the checkpoint drawn (None: the table's largest step).

    Returns:
        The plotly figure.

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
    """Both cosines against training step, one line per k (mean over seeds).

    Args:
        table: the sweep's alignment table at several steps (:func:`tiebias.ablate.sweep.alignment_table`).
        method: the alignment map drawn.

    Returns:
        The plotly figure: one panel per cosine (towards the untied input, the untied output matrix).
    """
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


def ingredients(summary: pd.DataFrame, k: float) -> go.Figure:
    """The shift at k of both cosines under each ingredient (mean with its 95% interval over seeds), the paper's beside.

    Args:
        summary: the :func:`tiebias.ablate.ingredients.summary` table.
        k: the factor whose shifts are drawn (the paper's shift is drawn where the table has it).

    Returns:
        The plotly figure: one panel per cosine, one row of the y axis per ingredient.
    """
    d = summary[summary.k == k]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=[f"towards the untied input matrix (k={k:g} - k=1)",
                                                        f"from the untied output matrix (k={k:g} - k=1)"])
    for col, (c, (label, color)) in enumerate(SERIES.items(), start=1):
        fig.add_scatter(x=d[c], y=d.ingredient, mode="markers", marker=dict(color=color, size=10), name=label,
                        error_x=dict(type="data", symmetric=False, array=d[f"{c}_ci_high"] - d[c],
                                     arrayminus=d[c] - d[f"{c}_ci_low"]), row=1, col=col)
        paper = d[f"paper_{c}"].dropna()
        if not paper.empty:
            fig.add_vline(x=float(paper.iloc[0]), line_dash="dash", line_color="black", row=1, col=col,
                          annotation_text="paper", annotation_position="bottom right")
        fig.add_vline(x=0, line_color="grey", line_width=1, row=1, col=col)
    fig.update_layout(title=f"Claim 4's shift at k={k:g} under each ingredient (mean, {LEVEL:.0%} CI over seeds)",
                      showlegend=False, height=120 + 60 * len(d))
    fig.update_xaxes(title_text="change of the Procrustes cosine")
    return fig


def scale_axes(summary: pd.DataFrame, quantities: dict[str, str], title: str, base_vocab: int,
               base_width: int, base_steps: int | None = None) -> go.Figure:
    """Quantities (one row each) against vocabulary size (left, at the run's width) and width (middle, at its
    vocabulary), and against training length as tokens seen per row (right, at both) where the summary holds several
    lengths; mean and 95% interval over seeds, log-2 axes.

    Args:
        summary: the :func:`tiebias.ablate.scale.summary` table.
        quantities: column name -> label of the quantities drawn, one figure row each (e.g. one entry of
            :func:`tiebias.ablate.scale.figure_quantities`).
        title: the figure's title.
        base_vocab, base_width: the run's own vocabulary size and width, the value the other axis is held at.
        base_steps: the run's own training length, the value the size axes are held at (None: not held, for a
            summary without a ``steps`` column).

    Returns:
        The plotly figure.
    """
    has_steps = base_steps is not None and "steps" in summary.columns
    panels = [("vocab_size", {"width": base_width}, f"against vocabulary (width {base_width})"),
              ("width", {"vocab_size": base_vocab}, f"against width (vocabulary {base_vocab})")]
    if has_steps:
        panels = [(a, {**fixed, "steps": base_steps}, t) for a, fixed, t in panels]
        if summary["steps"].nunique() > 1:
            panels.append(("tokens_per_row", {"vocab_size": base_vocab, "width": base_width},
                           f"against training length (vocabulary {base_vocab}, width {base_width})"))
    fig = make_subplots(rows=len(quantities), cols=len(panels), shared_yaxes="rows",
                        vertical_spacing=0.25 / len(quantities),
                        subplot_titles=[f"{q}<br>{t}" for q in quantities.values() for _, _, t in panels])
    for row, q in enumerate(quantities, start=1):
        d = summary[summary.quantity == q]
        for col, (axis, fixed, _) in enumerate(panels, start=1):
            keep = np.ones(len(d), dtype=bool)
            for c, v in fixed.items():
                keep &= (d[c] == v).to_numpy()
            g = d[keep].sort_values(axis)
            fig.add_scatter(x=g[axis], y=g["mean"], mode="lines+markers", showlegend=False,
                            line=dict(color="#1f77b4"), row=row, col=col,
                            error_y=dict(type="data", symmetric=False, array=g.ci_high - g["mean"],
                                         arrayminus=g["mean"] - g.ci_low))
            fig.update_xaxes(type="log", tickvals=list(g[axis]), ticktext=[f"{round(v):,}" for v in g[axis]], row=row, col=col,
                             title_text=axis.replace("_", " ") if row == len(quantities) else None)
    fig.update_annotations(font_size=10)
    fig.update_layout(title=title, height=160 + 280 * len(quantities))
    return fig
