"""Training figures: loss curves, the gradient flow into the tied matrix (paper Figure 4) and claim 2's windows."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias.config.variants import parse_key
from tiebias.output.plotting.style import COLORS, ci_bars, log_axis, reference_line
from tiebias.paper import FIG4_OUTPUT_SHARE
from tiebias.stats import LEVEL
from tiebias.verdicts import claims

TIED_COLORS = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
WINDOW_COLORS = ["#1f77b4", "#aec7e8", "#9edae5", "#d62728", "#ff9896", "#f7b6d2"]


def loss_curves(train: dict[str, pd.DataFrame], val: dict[str, pd.DataFrame], *, smooth: int = 10,
                unigram: float | None = None, bigram: float | None = None) -> go.Figure:
    """Training loss (rolling mean) and validation loss per model key, with the unigram and bigram baselines.

    Args: train, val: model key -> training / validation log; smooth: the rolling window (steps); unigram,
        bigram: the baselines (None: not drawn).
    Returns: the figure."""
    fig = go.Figure()
    variants = sorted({parse_key(k)[0].name for k in train})
    for key, df in train.items():
        variant = parse_key(key)[0].name  # a scaled tied variant (tied_in5) gets one of TIED_COLORS
        c = COLORS.get(variant) or (TIED_COLORS[variants.index(variant) % len(TIED_COLORS)]
                                    if variant.split("_")[0] == "tied" else COLORS.get(variant.split("_")[0], "#7f7f7f"))
        fig.add_scatter(x=df.step, y=df.loss.rolling(smooth, min_periods=1).mean(), mode="lines",
                        line=dict(color=c, width=1), opacity=0.6, name=f"{key} train", legendgroup=variant)
        if key in val:
            fig.add_scatter(x=val[key].step, y=val[key].val_loss, mode="lines+markers", name=f"{key} validation",
                            line=dict(color=c, width=2, dash="dot"), legendgroup=variant)
    for value, name, dash, where, line_color in ((unigram, "unigram", "dash", "top", "gray"),
                                                 (bigram, "bigram", "dot", "bottom", "black")):
        if value is not None:
            fig.add_hline(y=value, line=dict(color=line_color, dash=dash), annotation_position=f"{where} right",
                          annotation_text=f"{name} baseline {value:.2f}")
    return fig.update_layout(title="Loss (nats per token)", xaxis_title="step", yaxis_title="cross-entropy (nats)",
                             height=420)


def gradient_flow(metrics: dict[str, pd.DataFrame], *, first_n: int | None = None, smooth: int = 5) -> go.Figure:
    """Figure 4 from tied models' logs: each path's gradient norm above, the output share below with the paper's
    values and claim 2's threshold.

    Args: metrics: model key -> a tied model's training log; first_n: the last step shown (None: all); smooth: the
        rolling window (steps).
    Returns: the figure."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("L2 norm of the gradient reaching the shared matrix, by path",
                                        "output path's share  out / (in + out)"))
    logs = [df if first_n is None else df[df.step <= first_n] for df in metrics.values()]
    for i, (key, d) in enumerate(zip(metrics, logs, strict=True)):
        for col, name, group, color in (("output_norm", "output path", "out", "#d62728"),
                                        ("input_norm", "input path", "in", "#1f77b4")):
            fig.add_scatter(x=d.step, y=d[col].rolling(smooth, min_periods=1).mean(), mode="lines",
                            line=dict(color=color, width=1.5), name=name, legendgroup=group,
                            showlegend=i == 0, row=1, col=1, hovertext=key)
    shares = pd.concat([d.set_index("step").output_share for d in logs], axis=1)
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
    log_axis(fig, [v for df in metrics.values() for c in ("input_norm", "output_norm") for v in df[c]], "y", row=1, col=1)
    fig.update_yaxes(title_text="gradient L2 norm", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="share", row=2, col=1)
    fig.update_xaxes(title_text="training step", row=2, col=1)
    return fig.update_layout(height=620, title="Gradient flow into the tied embedding (cf. paper Figure 4)")


def claim2_windows(table: pd.DataFrame) -> go.Figure:
    """The output share per window and metric (:func:`tiebias.train.windows.window_shares`) with its interval, the
    paper's log (a ``paper`` column) as diamonds.

    Args: table: the window shares table.
    Returns: the figure."""
    fig = go.Figure()
    windows = list(dict.fromkeys(table.window))
    for i, (metric, g) in enumerate(table.groupby("metric", sort=False)):
        g = g.set_index("window").reindex(windows)
        fig.add_bar(x=windows, y=g["mean"], name=metric, marker_color=WINDOW_COLORS[i % len(WINDOW_COLORS)],
                    error_y=ci_bars(g, "mean"))
    if "paper" in table:
        p = table[table.metric == "proxy l2"].set_index("window").reindex(windows)
        fig.add_scatter(x=windows, y=p.paper, mode="markers", name="paper's log (proxy l2)",
                        marker=dict(symbol="diamond", size=12, color="black"))
    fig.add_hline(y=0.5, line_dash="dot", line_color="grey")
    return fig.update_layout(barmode="group", title="Output share of the tied matrix's gradient, per window and metric "
                             f"(mean, {LEVEL:.0%} CI over seeds)", xaxis_title="window of training steps", yaxis_title="out / (in + out)", yaxis_range=[0, 1.05],
                             legend_title="metric")
