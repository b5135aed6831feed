"""Training figures: loss curves and the gradient-flow figure (paper Figure 4)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias.config.variants import parse_key
from tiebias.output.plotting.style import COLORS, log_axis, reference_line
from tiebias.paper import FIG4_OUTPUT_SHARE
from tiebias.stats import LEVEL
from tiebias.verdicts import claims


def _color(variant: str, i: int = 0) -> str:
    base = variant.split("_")[0]
    if variant in COLORS:
        return COLORS[variant]
    palette = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    return palette[i % len(palette)] if base == "tied" else COLORS.get(base, "#7f7f7f")


def loss_curves(train: dict[str, pd.DataFrame], val: dict[str, pd.DataFrame], *, smooth: int = 10,
                unigram: float | None = None, bigram: float | None = None) -> go.Figure:
    """Training loss (smoothed, thin) and validation loss (markers) per model key ``<variant>-s<seed>``.

    Args:
        train: model key -> its training log (``step``, ``loss``).
        val: model key -> its validation log (``step``, ``val_loss``); keys missing here draw no validation line.
        smooth: the rolling-mean window (steps) of the training loss.
        unigram: the unigram baseline's loss, drawn as a dashed line (:func:`tiebias.data.tokens.unigram_loss`;
            None: no line).
        bigram: the bigram baseline's loss on the validation windows, drawn as a dotted line
            (:class:`tiebias.data.bigram.Bigram`; None: no line).

    Returns:
        The plotly figure.
    """
    fig = go.Figure()
    variants = sorted({parse_key(k)[0].name for k in train})
    for key, df in train.items():
        variant = parse_key(key)[0].name
        c = _color(variant, variants.index(variant))
        fig.add_scatter(x=df.step, y=df.loss.rolling(smooth, min_periods=1).mean(), mode="lines",
                        line=dict(color=c, width=1), opacity=0.6, name=f"{key} train", legendgroup=variant)
        if key in val:
            v = val[key]
            fig.add_scatter(x=v.step, y=v.val_loss, mode="lines+markers", line=dict(color=c, width=2, dash="dot"),
                            name=f"{key} validation", legendgroup=variant)
    if unigram is not None:
        fig.add_hline(y=unigram, line=dict(color="gray", dash="dash"),
                      annotation_text=f"unigram baseline {unigram:.2f}", annotation_position="top right")
    if bigram is not None:
        fig.add_hline(y=bigram, line=dict(color="black", dash="dot"),
                      annotation_text=f"bigram baseline {bigram:.2f}", annotation_position="bottom right")
    fig.update_layout(title="Loss (nats per token)", xaxis_title="step", yaxis_title="cross-entropy (nats)",
                      height=420)
    return fig


def gradient_flow(metrics: dict[str, pd.DataFrame], *, first_n: int | None = None,
                  smooth: int = 5) -> go.Figure:
    """Paper Figure 4 for tied models: path norms (log scale) and the output path's share per step.

    Args:
        metrics: model key -> a tied model's training log (``step``, ``input_norm``, ``output_norm``,
            ``output_share``).
        first_n: draw only steps up to this one (None: all).
        smooth: the rolling-mean window (steps) of the norms and of the mean share.

    Returns:
        The plotly figure: the two paths' norms per model above, the mean output share over the models below, with the
        paper's values and claim 2's threshold.
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("L2 norm of the gradient reaching the shared matrix, by path",
                                        "output path's share  out / (in + out)"))
    for i, (key, df) in enumerate(metrics.items()):
        d = df if first_n is None else df[df.step <= first_n]
        show = i == 0
        fig.add_scatter(x=d.step, y=d.output_norm.rolling(smooth, min_periods=1).mean(), mode="lines",
                        line=dict(color="#d62728", width=1.5), name="output path", legendgroup="out",
                        showlegend=show, row=1, col=1, hovertext=key)
        fig.add_scatter(x=d.step, y=d.input_norm.rolling(smooth, min_periods=1).mean(), mode="lines",
                        line=dict(color="#1f77b4", width=1.5), name="input path", legendgroup="in",
                        showlegend=show, row=1, col=1, hovertext=key)
    shares = pd.concat([(df if first_n is None else df[df.step <= first_n]).set_index("step").output_share
                        for df in metrics.values()], axis=1)
    mean = shares.mean(axis=1).rolling(smooth, min_periods=1).mean()
    fig.add_scatter(x=mean.index, y=mean.values, mode="lines", fill="tozeroy", line=dict(color="#d62728"),
                    name=f"output share (mean of {shares.shape[1]})", row=2, col=1)
    fig.add_scatter(x=mean.index, y=[1.0] * len(mean), mode="lines", fill="tonexty", line=dict(color="#1f77b4"),
                    name="input share", row=2, col=1)
    for label, value in (("paper, quoted", FIG4_OUTPUT_SHARE["quoted"]),
                         ("paper, reproduction log", FIG4_OUTPUT_SHARE["reproduction_log_mean"])):
        fig.add_hline(y=value, line=dict(color="black", dash="dash", width=1), row=2, col=1,
                      annotation_text=f"{label}: {value:.0%}", annotation_position="bottom right")
    reference_line(fig, claims.CLAIM2_SHARE, f"claim 2 holds above {claims.CLAIM2_SHARE:.0%}", row=2, col=1)
    norms = [v for df in metrics.values() for c in ("input_norm", "output_norm") for v in df[c]]
    log_axis(fig, norms, "y", row=1, col=1)
    fig.update_yaxes(title_text="gradient L2 norm", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="share", row=2, col=1)
    fig.update_xaxes(title_text="training step", row=2, col=1)
    fig.update_layout(height=620, title="Gradient flow into the tied embedding (cf. paper Figure 4)")
    return fig


def claim2_windows(table: pd.DataFrame) -> go.Figure:
    """The output share per window (x) and metric (bars, mean with its 95% interval over seeds), the paper's log beside.

    Args:
        table: :func:`tiebias.train.windows.window_shares` rows, with a ``paper`` column
            (:func:`tiebias.train.windows.with_paper`) for the diamonds.

    Returns:
        The plotly figure.

    The paper's values (diamonds) are its published log's under the matching norm; its input column is always the
    proxy, so they belong beside the ``proxy`` bars.
    """
    fig = go.Figure()
    windows = list(dict.fromkeys(table.window))
    for i, (metric, g) in enumerate(table.groupby("metric", sort=False)):
        g = g.set_index("window").reindex(windows)
        fig.add_bar(x=windows, y=g["mean"], name=metric, marker_color=WINDOW_COLORS[i % len(WINDOW_COLORS)],
                    error_y=dict(type="data", symmetric=False, array=g.ci_high - g["mean"],
                                 arrayminus=g["mean"] - g.ci_low))
    if "paper" in table:
        p = table[table.metric == "proxy l2"].set_index("window").reindex(windows)
        fig.add_scatter(x=windows, y=p.paper, mode="markers", name="paper's log (proxy l2)",
                        marker=dict(symbol="diamond", size=12, color="black"))
    fig.add_hline(y=0.5, line_dash="dot", line_color="grey")
    fig.update_layout(barmode="group", title="Output share of the tied matrix's gradient, per window and metric "
                      f"(mean, {LEVEL:.0%} CI over seeds)", yaxis_title="out / (in + out)", yaxis_range=[0, 1.05],
                      legend_title="metric")
    return fig


WINDOW_COLORS = ["#1f77b4", "#aec7e8", "#9edae5", "#d62728", "#ff9896", "#f7b6d2"]
