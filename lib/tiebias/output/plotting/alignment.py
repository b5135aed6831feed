"""Alignment figures: Figure 3, frequency bins, the levels at every checkpoint."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias.output.plotting.style import log_axis, mean_sd, palette

MATRIX_COLORS = {"untied input": "#1f77b4", "untied output": "#d62728", "tied": "#9467bd"}
COSINE = "mean per-token cosine"
STEP_AT_HALF = "training step (log; step 0 shown at 0.5)"


def _at_half(steps: pd.Series | np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(steps, dtype=float), 0.5)


def evolution(ev: pd.DataFrame) -> go.Figure:
    """Figure 3 (:func:`tiebias.align.comparisons.evolution_table`): each matrix's cosine to initialisation and to
    the previous checkpoint against step.

    Args: ev: the evolution table.
    Returns: the figure."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cosine to initialisation", "cosine to previous checkpoint"))
    for m, color in MATRIX_COLORS.items():
        d = ev[ev.matrix == m]
        for j, col in enumerate(("cos_to_init", "cos_to_prev"), start=1):
            if not d.empty:
                mean_sd(fig, d.groupby("step")[col], m, color, x=_at_half, showlegend=j == 1, row=1, col=j)
    log_axis(fig, _at_half(ev.step), "x")
    fig.update_xaxes(title_text=STEP_AT_HALF)
    fig.update_yaxes(title_text=COSINE)
    return fig.update_layout(height=420, title="Figure 3 analog: how far each matrix moves (mean ± sd over seeds)")


def by_frequency(tables: dict[str, pd.DataFrame]) -> go.Figure:
    """Mean cosine per frequency bin (:func:`tiebias.align.token_stats.by_frequency`), ± per-token sd within [-1, 1].

    Args: tables: comparison -> per-bin table.
    Returns: the figure."""
    fig = go.Figure()
    for (label, t), c in zip(tables.items(), palette(len(tables), ["#d62728", "#1f77b4", "#7f7f7f"]), strict=True):
        mean, sd = t["mean"].to_numpy(dtype=float), t["std"].fillna(0).to_numpy(dtype=float)
        n = t["n"] if "n" in t else pd.Series(np.nan, index=t.index)
        fig.add_bar(x=t["bin"], y=mean, name=label, marker_color=c,
                    error_y=dict(type="data", array=np.minimum(sd, 1 - mean), arrayminus=np.minimum(sd, mean + 1),
                                 symmetric=False), customdata=np.column_stack([sd, n]),
                    hovertemplate="%{x}: mean %{y:.3f}, per-token sd %{customdata[0]:.3f}, "
                                  "%{customdata[1]} tokens<extra>%{fullData.name}</extra>")
    return fig.update_layout(barmode="group", height=420, xaxis_title="frequency bin (q1 = rarest seen tokens)",
                             yaxis_title=COSINE,
                             title="Alignment by token frequency (error bars: ± per-token sd within the bin, clipped at 1)")


def levels_at_checkpoints(table: pd.DataFrame) -> go.Figure:
    """Tables 1, 2, 6 and Figure 3 at every checkpoint (:func:`tiebias.ablate.checkpoint_levels.levels`), the paper's
    levels dashed.

    Args: table: the levels table (ours and the paper's).
    Returns: the figure."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("alignment to the tied matrix (orthogonal map)",
                                                        "untied matrices: cosine to initialisation"))
    ours, theirs = table[table.who == "this run"], table[table.who == "paper"]
    colors = palette(ours.quantity.nunique(), ["#d62728", "#1f77b4", "#7f7f7f", "#9467bd"])
    for (q, d), color in zip(ours.groupby("quantity", sort=False), colors, strict=True):
        col = 2 if d.source.iloc[0] == "Figure 3" else 1
        fig.add_scatter(x=_at_half(d.step), y=d["mean"], error_y=dict(array=np.nan_to_num(d.sd.to_numpy(dtype=float))),
                        mode="lines+markers", name=q, line=dict(color=color), legendgroup=q, row=1, col=col)
        for r in theirs[theirs.quantity == q].itertuples():
            when = "trained model" if not np.isfinite(r.step) else f"step {int(r.step):,}"
            fig.add_hline(y=r.mean, line=dict(dash="dash", color=color, width=1), row=1, col=col,
                          annotation_text=f"paper {r.source}, {when}: {r.mean:.3f}", annotation_position="top left",
                          annotation_font=dict(size=10, color=color))
    log_axis(fig, _at_half(ours.step), "x")
    fig.update_xaxes(title_text="our " + STEP_AT_HALF)
    fig.update_yaxes(title_text=COSINE, row=1, col=1)
    fig.update_yaxes(title_text="cosine to the matrix at initialisation", row=1, col=2)
    return fig.update_layout(height=480, title="Cosine levels at every checkpoint, beside the paper's at its own steps")
