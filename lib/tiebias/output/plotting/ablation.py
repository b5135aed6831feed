"""Ablation figures: the tied matrix's alignment against the input-gradient factor k, its ingredients, scale axes."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias.output.plotting.style import ci_bars, log_axis, mean_sd, reference_line
from tiebias.stats import LEVEL
from tiebias.verdicts import claims

SERIES = {"vs_untied_input": ("untied input -> tied", "#1f77b4"),
          "vs_untied_output": ("untied output -> tied", "#d62728")}


def dose_response(table: pd.DataFrame, shares: pd.DataFrame | None = None, *, step: int | None = None) -> go.Figure:
    """Both untied matrices' cosine to the tied one against k (:func:`tiebias.ablate.sweep.alignment_table`), a panel
    per method; ``shares`` adds the output path's gradient share per k with claim 2's threshold.

    Args: table: the alignment table; shares: the gradient shares (None: no share panel); step: the step shown
        (None: the last).
    Returns: the figure."""
    d = table[table.step == (table.step.max() if step is None else step)]
    methods = list(dict.fromkeys(d.method))
    panels = [(m, d[d.method == m], "mean cosine to tied") for m in methods]
    titles = [f"{m} alignment" for m in methods] + (["output share of the gradient"] if shares is not None else [])
    if shares is not None:
        panels.append((None, shares, "out / (in + out)"))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, horizontal_spacing=0.1)
    for i, (m, dm, ytitle) in enumerate(panels, start=1):
        if m is None:
            mean_sd(fig, dm.groupby("k").output_share, "output share", "#7f7f7f", row=1, col=i)
            reference_line(fig, claims.CLAIM2_SHARE, f"claim 2 threshold {claims.CLAIM2_SHARE:.0%}", row=1, col=i)
            fig.update_yaxes(range=[0, 1.05], row=1, col=i)
        else:
            for col, (label, color) in SERIES.items():
                mean_sd(fig, dm.groupby("k")[col], label, color, showlegend=i == 1, row=1, col=i)
        log_axis(fig, dm.k, "x", row=1, col=i)
        fig.update_xaxes(title_text="input-gradient factor k", row=1, col=i)
        fig.update_yaxes(title_text=ytitle, row=1, col=i)
    return fig.update_layout(height=440, margin=dict(t=110), title=f"Dose-response at step {int(d.step.max())} "
                             f"(mean ± sd over {d.seed.nunique()} seeds)")


def ingredients(summary: pd.DataFrame, k: float) -> go.Figure:
    """The shift at ``k`` of both cosines per ingredient (:func:`tiebias.ablate.ingredients.summary`) with its
    interval, the paper's dashed.

    Args: summary: the ingredients summary; k: the k whose shift is shown.
    Returns: the figure."""
    d = summary[summary.k == k]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=[f"towards the untied input matrix (k={k:g} - k=1)",
                                                        f"from the untied output matrix (k={k:g} - k=1)"])
    for col, (c, (label, color)) in enumerate(SERIES.items(), start=1):
        fig.add_scatter(x=d[c], y=d.ingredient, mode="markers", marker=dict(color=color, size=10), name=label,
                        error_x=ci_bars(d, c, f"{c}_ci_low", f"{c}_ci_high"), row=1, col=col)
        paper = d[f"paper_{c}"].dropna()
        if not paper.empty:
            fig.add_vline(x=float(paper.iloc[0]), line_dash="dash", line_color="black", row=1, col=col,
                          annotation_text="paper", annotation_position="bottom right")
        fig.add_vline(x=0, line_color="grey", line_width=1, row=1, col=col)
    fig.update_layout(title=f"Claim 4's shift at k={k:g} under each ingredient (mean, {LEVEL:.0%} CI over seeds)",
                      showlegend=False, height=120 + 60 * len(d))
    fig.update_yaxes(title_text="ingredient", row=1, col=1)
    return fig.update_xaxes(title_text="change of the Procrustes cosine")


def scale_axes(summary: pd.DataFrame, quantities: dict[str, str], title: str, base_vocab: int,
               base_width: int, base_steps: int | None = None) -> go.Figure:
    """Each quantity (a row) of :func:`tiebias.ablate.scale.summary` against vocabulary, width and training length,
    the other axes held at the base values.

    Args: summary: the scale summary; quantities: column -> label; title: the figure's title; base_vocab,
        base_width, base_steps: the values held fixed on the other axes (base_steps None: no ``steps`` column).
    Returns: the figure."""
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
            g = d[(d[list(fixed)] == pd.Series(fixed)).all(axis=1)].sort_values(axis)
            fig.add_scatter(x=g[axis], y=g["mean"], mode="lines+markers", showlegend=False, line=dict(color="#1f77b4"),
                            row=row, col=col, error_y=ci_bars(g, "mean"))
            fig.update_xaxes(type="log", tickvals=list(g[axis]), ticktext=[f"{round(v):,}" for v in g[axis]], row=row, col=col,
                             title_text=axis.replace("_", " "))
        fig.update_yaxes(title_text=q.replace("_", " "), row=row, col=1)
    fig.update_annotations(font_size=10)
    return fig.update_layout(title=title, height=160 + 280 * len(quantities))
