"""Lens figures: per-layer KL (paper Figure 2) and cross-entropy, tied vs untied, the gap, the lens-budget ladder,
the scale axis (gap against validation loss and relative depth), claim 3 under four lens readings and one prompt's
prediction trajectory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias import stats
from tiebias.config.checks import is_int
from tiebias.output import token_text
from tiebias.output.plotting.style import COLORS, log_axis, palette

if TYPE_CHECKING:
    from tuned_lens.plotting import PredictionTrajectory

def per_layer(df: pd.DataFrame, columns: dict[str, str], title: str, yaxis: str) -> go.Figure:
    """One panel per column (e.g. tuned and logit lens KL); a line per variant, mean +- sd over seeds.

    Args:
        df: a per-layer lens table (:func:`tiebias.lens.tables.per_layer`) of one rung and protocol, with ``variant``,
            ``seed`` and ``layer``.
        columns: column drawn -> its panel's title.
        title: the figure's title.
        yaxis: the first panel's y-axis title (the panels share it).

    Returns:
        The plotly figure.
    """
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


def gap(gaps: pd.DataFrame, title: str = f"tied - untied tuned-lens KL per layer (mean, {stats.LEVEL:.0%} CI over seeds)") -> go.Figure:
    """The per-layer gap with its confidence interval; significant layers marked.

    Args:
        gaps: a per-layer gap table (:func:`tiebias.lens.tables.gaps`).
        title: the figure's title (" (red: CI excludes 0)" is added).

    Returns:
        The plotly figure: one bar per layer, red where ``significant``.
    """
    err_hi = np.nan_to_num(gaps.ci_high - gaps.gap)
    err_lo = np.nan_to_num(gaps.gap - gaps.ci_low)
    colors = ["#d62728" if s else "#aaaaaa" for s in gaps.significant]
    fig = go.Figure(go.Bar(x=gaps.layer, y=gaps.gap, marker_color=colors,
                           error_y=dict(type="data", array=err_hi, arrayminus=err_lo, symmetric=False)))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(height=380, title=title + " (red: CI excludes 0)", xaxis_title="layer",
                      yaxis_title="KL gap (bits)", xaxis=dict(dtick=1))
    return fig


def _ci_errors(g: pd.DataFrame) -> dict:
    """Asymmetric plotly error bars from ``ci_low`` / ``ci_high`` around ``gap`` (missing CI: no bar)."""
    return dict(type="data", array=np.nan_to_num(g.ci_high - g.gap), arrayminus=np.nan_to_num(g.gap - g.ci_low),
                symmetric=False)


def gap_by_depth(gaps: dict[str, pd.DataFrame]) -> go.Figure:
    """Tied - untied tuned-lens KL gap against relative depth (layer / layers), one line per model depth, with CIs.

    Args:
        gaps: name -> a per-layer gap table (:func:`tiebias.lens.tables.gaps`) of models of one depth, one colour each.

    Returns:
        The plotly figure.
    """
    fig = go.Figure()
    for (name, g), color in zip(gaps.items(), palette(len(gaps), ["#d62728", "#1f77b4", "#2ca02c"]), strict=True):
        x = g.layer / g.layer.max()
        fig.add_scatter(x=x, y=g.gap, mode="lines+markers", name=f"{name} ({int(g.layer.max())} layers)",
                        line=dict(color=color), error_y=_ci_errors(g))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(height=380, title=f"tied - untied tuned-lens KL by relative depth (mean, {stats.LEVEL:.0%} CI)",
                      xaxis_title="layer / number of layers", yaxis_title="KL gap (bits)")
    return fig


def ladder(df: pd.DataFrame, column: str = "kl_tuned_bits", title: str = "") -> go.Figure:
    """Per-layer KL against lens budget (training steps), tied and untied: one panel per layer, mean ± sd over seeds.

    Args:
        df: a per-layer lens table holding every rung, of one protocol.
        column: the metric drawn (one of :data:`tiebias.lens.tables.METRICS`).
        title: the figure's title ("": a default naming the metric's meaning).

    Returns:
        The plotly figure.

    ``df`` is a per-layer table with ``recipe``, ``budget`` and ``lens_steps``; the model-output layer
    (0 bits by construction) is left out. Recipes after the first are dashed.
    """
    layers = sorted(set(df.layer))[:-1] or sorted(set(df.layer))
    recipes = list(dict.fromkeys(df.recipe))
    cols = min(len(layers), 4)
    rows = -(-len(layers) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"layer {i}" for i in layers],
                        horizontal_spacing=0.08, vertical_spacing=0.22 if rows > 1 else 0.12)
    for j, layer in enumerate(layers):
        r, c = j // cols + 1, j % cols + 1
        for recipe in recipes:
            for v in dict.fromkeys(df.variant):
                g = df[(df.layer == layer) & (df.variant == v) & (df.recipe == recipe)].groupby("lens_steps")[column]
                mean, sd = g.mean(), g.std(ddof=1).fillna(0)
                name = v if len(recipes) == 1 else f"{v}, {recipe}"
                fig.add_scatter(x=mean.index, y=mean.values, error_y=dict(array=sd.values), mode="lines+markers",
                                name=name, legendgroup=name, showlegend=j == 0,
                                line=dict(color=COLORS.get(v, "#7f7f7f"), dash="solid" if recipe == recipes[0] else "dash"),
                                row=r, col=c)
        log_axis(fig, df.lens_steps, "x", row=r, col=c)
        fig.update_xaxes(title_text="lens training steps", row=r, col=c)
        fig.update_yaxes(title_text="KL (bits)", row=r, col=c)
    fig.update_layout(height=320 * rows + 80,
                      title=title or "tuned-lens KL per layer against lens budget (mean ± sd over seeds)")
    return fig


def ladder_gap(ladder_gaps: pd.DataFrame) -> go.Figure:
    """The early-layer gap (tied - untied) with its CI at each lens budget: did more lens training move it?

    Args:
        ladder_gaps: the :func:`tiebias.lens.tables.ladder_gaps` table (several recipes' stacked give one line each).

    Returns:
        The plotly figure (log budget axis).
    """
    fig = go.Figure()
    for recipe, g in ladder_gaps.groupby("recipe", sort=False):
        fig.add_scatter(x=g.budget, y=g.gap, mode="lines+markers", name=str(recipe), error_y=_ci_errors(g))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(height=360, title=f"early-layer tuned-lens KL gap (tied - untied) by lens budget, {stats.LEVEL:.0%} CI",
                      xaxis_title="lens budget (multiple of lens_steps)", yaxis_title="KL gap (bits)")
    return log_axis(fig, ladder_gaps.budget, "x")


def gap_vs_loss(scale: pd.DataFrame, extra: dict[str, dict] | None = None) -> go.Figure:
    """Early-layer gap with its CI against validation loss, one point per checkpoint (labelled by step).

    Args:
        scale: the per-checkpoint table of :func:`tiebias.lens.ladder.train_checkpoint_lens_ladders`.
        extra: single labelled points, one colour each (None: none).

    Returns:
        The plotly figure (loss axis reversed: better-trained models to the right).

    ``extra`` adds single labelled points (e.g. a second depth): name -> {"val_loss", "gap", "ci_low", "ci_high"}.
    """
    fig = go.Figure()
    fig.add_scatter(x=scale.val_loss, y=scale.gap, mode="lines+markers+text", name="checkpoints of the run",
                    text=[f"step {s}" for s in scale.step], textposition="top center",
                    error_y=_ci_errors(scale), line=dict(color="#d62728"))
    extra = extra or {}
    for (name, pt), color in zip(extra.items(), palette(len(extra), ["#1f77b4", "#2ca02c", "#9467bd"]), strict=True):
        g = pd.DataFrame([pt])
        fig.add_scatter(x=g.val_loss, y=g.gap, mode="markers+text", name=name, text=[name],
                        textposition="bottom center", marker=dict(size=11, symbol="diamond", color=color),
                        error_y=_ci_errors(g))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(height=400, title=f"early-layer tuned-lens KL gap (tied - untied) against model quality, {stats.LEVEL:.0%} CI",
                      xaxis_title="validation loss (nats; lower = better trained)", yaxis_title="KL gap (bits)",
                      xaxis=dict(autorange="reversed"))
    return fig


class _Formatter:
    """The package's token formatter in this kit's whitespace notation (:mod:`tiebias.output.token_text`)."""

    def __init__(self, max_chars: int = 8) -> None:
        self.max_chars = max_chars
        self.vectorized_format = np.vectorize(self.format, otypes=[object])

    def format(self, token: Any) -> str:
        """``Ġking`` -> ``␣king``, cut to ``max_chars``; a non-string (unknown id) -> ``<unk>``."""
        return token_text.show(token, self.max_chars) if isinstance(token, str) else "<unk>"


def trajectory_figure(
    traj: PredictionTrajectory,
    statistic: Literal["cross_entropy", "entropy", "forward_kl", "rank", "max_probability"] = "cross_entropy",
    title: str = "",
    token_width: int = 80,
    max_width: int = 900,
) -> Any:
    """Plotly heatmap of one trajectory statistic (layers x tokens), each cell labelled with the lens's top token.

    Args:
        traj: the trajectory (:func:`tiebias.lens.evaluate.trajectory`).
        statistic: the statistic drawn, one of the names in the signature.
        title: the figure's title.
        token_width: pixels per token.
        max_width: the figure's widest (an int >= 300).

    Returns:
        The plotly figure.

    ``token_width`` pixels per token plus 200, capped at ``max_width`` so the figure fits a notebook
    (about 950 px wide). Tokens are shown in :mod:`tiebias.output.token_text`'s notation (legend in the x-axis
    title), cell labels at a legible 12 px, and the top row is named "model output" (the model's own
    prediction, not a lens). Re-implements ``TrajectoryStatistic.figure`` because the package sets
    ``colorbar.titleside``, which plotly >= 6 rejects; the colorbar title is passed in the current
    ``colorbar.title.side`` form instead.
    """
    from dataclasses import replace

    if statistic not in ("cross_entropy", "entropy", "forward_kl", "rank", "max_probability"):
        raise ValueError(
            f"statistic: must be one of cross_entropy, entropy, forward_kl, rank, max_probability; got {statistic!r}"
        )
    if not is_int(max_width) or max_width < 300:
        raise ValueError(f"max_width: must be an int >= 300 (pixels), got {max_width!r}")
    stat = getattr(traj, statistic)(formatter=_Formatter())
    rows = stat.stats.shape[0]
    layers = [str(i) for i in range(rows - 1)] + ["model output"] if stat.includes_output else list(map(str, range(rows)))
    labels = stat.sequence_labels
    if traj.tokenizer is not None:
        labels = np.array([token_text.show(t, 10) for t in traj.tokenizer.convert_ids_to_tokens(traj.input_ids.tolist())])
    stat = replace(stat, sequence_labels=labels, _layer_labels=np.array(layers))
    heat = stat.heatmap(colorbar={"title": {"text": f"{stat.name} ({stat.units})", "side": "right"}},
                        textfont={"size": 12})
    return go.Figure(heat).update_layout(
        title_text=title,
        title_x=0.5,
        width=min(max_width, 200 + token_width * stat.stats.shape[1]),
        height=max(320, 150 + 34 * rows),
        xaxis_title=f"input token ({token_text.SPACE} = space, {token_text.NEWLINE} = newline)",
        yaxis_title="layer (0 = embeddings)",
    )


def readings(layers: pd.DataFrame, table: pd.DataFrame, a: str = "tied", b: str = "untied") -> go.Figure:
    """Claim 3 under four readings (``tiebias.lens.readings.decomposition``): per-layer KL of ``a`` and ``b``, one panel
    per reading, titled with its early-layer gap and 95% CI.

    Args:
        layers: the per-layer table :func:`tiebias.lens.readings.decomposition` returns second.
        table: its table of readings (the first it returns), one panel per row.
        a, b: the two variants drawn (columns of ``layers``).

    Returns:
        The plotly figure.
    """
    keys = list(table.reading)
    titles = [f"({r.reading}) {r.protocol} reading, {r.lens_steps} steps<br>early gap {r.gap + 0.0:+.3g} "
              f"[{r.ci_low + 0.0:+.3g}, {r.ci_high + 0.0:+.3g}]" for r in table.itertuples()]
    fig = make_subplots(rows=1, cols=len(keys), subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.03)
    for j, key in enumerate(keys):
        g = layers[layers.reading == key]
        for v in (a, b):
            fig.add_scatter(x=g.layer, y=g[v], mode="lines+markers", name=v, legendgroup=v, showlegend=j == 0,
                            line=dict(color=COLORS.get(v, "#7f7f7f")), row=1, col=j + 1)
        fig.update_xaxes(title_text="layer", row=1, col=j + 1)
    fig.update_yaxes(title_text="tuned-lens KL (bits)", col=1)
    fig.update_annotations(font_size=11)
    fig.update_layout(height=420, title="tied vs untied tuned-lens KL per layer under the four readings (mean over seeds)")
    return fig


def row1_parts(parts: pd.DataFrame, readings: tuple[str, ...]) -> go.Figure:
    """Row-1 KL under each reading (package; plus the embedding part; plus the update part; both = the paper's), per
    variant: mean and 95% t-interval over seeds.

    Args:
        parts: :func:`tiebias.lens.mechanism.run_row1_parts` rows (``kind`` "kl" rows are drawn).
        readings: the measures drawn, in order (e.g. :data:`tiebias.lens.mechanism.PARTS`).

    Returns:
        The plotly figure: grouped bars, one colour per variant.
    """
    fig = go.Figure()
    kl = parts[parts.kind == "kl"]
    for v, g in kl.groupby("variant", sort=False):
        s = [stats.summarise(g[g.measure == r].value.to_numpy()) for r in readings]
        mean = np.array([x.mean for x in s])
        fig.add_bar(x=list(readings), y=mean, name=str(v), marker_color=COLORS.get(str(v), "#7f7f7f"),
                    error_y=dict(type="data", symmetric=False, array=np.array([x.ci_high for x in s]) - mean,
                                 arrayminus=mean - np.array([x.ci_low for x in s])))
    fig.update_layout(barmode="group", title=f"Row 1 read four ways: KL(final || lens) in bits (mean, {stats.LEVEL:.0%} CI over seeds)",
                      yaxis_title="KL at row 1, bits", height=420)
    return fig


def penalty_vs_k(by_k: pd.DataFrame) -> go.Figure:
    """The row-1 penalty of the paper's reading (its KL minus the package's) of the tied models trained with the input
    path scaled by k: per seed (points) and mean with 95% t-interval, log-2 k axis.

    Args:
        by_k: the :func:`tiebias.lens.mechanism.penalty_by_k` table (``k``, ``penalty``).

    Returns:
        The plotly figure.
    """
    fig = go.Figure()
    fig.add_scatter(x=by_k.k, y=by_k.penalty, mode="markers", marker=dict(color="#bbbbbb", size=7), name="one seed")
    ks = sorted(by_k.k.unique())
    s = [stats.summarise(by_k[by_k.k == k].penalty.to_numpy()) for k in ks]
    mean = np.array([x.mean for x in s])
    fig.add_scatter(x=ks, y=mean, mode="lines+markers", name="mean", line=dict(color=COLORS.get("tied", "#d62728")),
                    error_y=dict(type="data", symmetric=False, array=np.array([x.ci_high for x in s]) - mean,
                                 arrayminus=mean - np.array([x.ci_low for x in s])))
    fig.update_xaxes(type="log", tickvals=ks, title_text="k (input-path gradient factor)")
    fig.update_layout(title="The paper's lens reading's row-1 penalty against k (tied models, bits)",
                      yaxis_title="KL(reference) - KL(package) at row 1, bits", height=420)
    return fig


def bigram_bound(table: pd.DataFrame) -> go.Figure:
    """Figure 2's layer-0 level against the bigram baseline: one point per model.

    Args:
        table: the :func:`tiebias.lens.bigram_bound.bound_table` frame.

    Returns:
        The plotly figure: x the model's gain over the bigram baseline, (CE(bigram) - CE(model)) / ln 2 bits, y its
        tuned-lens KL at layer 0 in bits, coloured by variant; the dotted diagonal is y = x, where a layer-0 lens that
        reads as well as the best bigram would sit, and the vertical line x = 0 the bigram baseline itself.
    """
    fig = go.Figure()
    for variant, d in table.groupby("variant", sort=False):
        fig.add_scatter(x=d.bigram_gain_bits, y=d.kl_layer0_bits, mode="markers", name=str(variant),
                        marker=dict(size=11, color=COLORS.get(str(variant))),
                        text=[f"{variant}-s{s}" for s in d.seed], hovertemplate="%{text}: gain %{x:.3f}, KL %{y:.3f}")
    lo = float(min(table.bigram_gain_bits.min(), 0.0))
    hi = float(max(table.bigram_gain_bits.max(), table.kl_layer0_bits.max(), 0.0))
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="KL = gain", line=dict(dash="dot", color="gray"))
    fig.add_vline(x=0.0, line=dict(dash="dash", color="gray", width=1), annotation_text="bigram baseline",
                  annotation_position="top")
    fig.update_layout(height=440, xaxis_title="gain over the bigram baseline: (CE(bigram) - CE(model)) / ln 2, bits",
                      yaxis_title="tuned-lens KL at layer 0, bits",
                      title="Figure 2's level: layer-0 KL against how much the model beats a count bigram")
    return fig
