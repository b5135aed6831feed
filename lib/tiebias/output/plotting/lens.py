"""Lens figures: per-layer KL (Figure 2), the tied - untied gap, lens budgets, depth and scale, the four readings,
row 1's penalty and one prompt's trajectory."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tiebias import stats
from tiebias.config.checks import is_int
from tiebias.output import token_text
from tiebias.output.plotting import style
from tiebias.output.plotting.style import ZERO, ci_bars, color, log_axis, mean_ci, mean_sd, palette

if TYPE_CHECKING:
    from tuned_lens.plotting import PredictionTrajectory

GAP_AXIS = "KL gap (bits)"
STATISTICS = ("cross_entropy", "entropy", "forward_kl", "rank", "max_probability")
CI = f"{stats.LEVEL:.0%} CI"


def per_layer(df: pd.DataFrame, columns: dict[str, str], title: str, yaxis: str) -> go.Figure:
    """A panel per column of a per-layer lens table, a line per variant, mean ± sd over seeds.

    Args: df: the table; columns: column -> panel title; title, yaxis: the figure's and the y axis's titles.
    Returns: the figure."""
    fig = make_subplots(rows=1, cols=len(columns), subplot_titles=list(columns.values()), shared_yaxes=True)
    for j, col in enumerate(columns, start=1):
        for v in dict.fromkeys(df.variant):
            mean_sd(fig, df[df.variant == v].groupby("layer")[col], v, color(v), showlegend=j == 1, row=1, col=j)
        fig.update_xaxes(title_text="layer (0 = embeddings, last = model output)", dtick=1, row=1, col=j)
    fig.update_yaxes(title_text=yaxis, row=1, col=1)
    return fig.update_layout(height=420, title=title)


def gap_by_depth(gaps: dict[str, pd.DataFrame]) -> go.Figure:
    """The gap against relative depth (layer / layers), a line with CIs per model depth.

    Args: gaps: name -> gap table.
    Returns: the figure."""
    fig = go.Figure()
    for (name, g), c in zip(gaps.items(), palette(len(gaps), ["#d62728", "#1f77b4", "#2ca02c"]), strict=True):
        fig.add_scatter(x=g.layer / g.layer.max(), y=g.gap, mode="lines+markers", line=dict(color=c),
                        name=f"{name} ({int(g.layer.max())} layers)", error_y=ci_bars(g))
    fig.add_hline(y=0, line=ZERO)
    return fig.update_layout(height=380, title=f"tied - untied tuned-lens KL by relative depth (mean, {CI})",
                             xaxis_title="layer / number of layers", yaxis_title=GAP_AXIS)


def ladder(df: pd.DataFrame, column: str = "kl_tuned_bits", title: str = "") -> go.Figure:
    """KL against lens budget, a panel per layer but the output's (0 bits), a line per variant and recipe.

    Args: df: a ladder lens table; column: the KL column shown; title: the figure's title (empty: a default).
    Returns: the figure."""
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
                mean_sd(fig, g, v if len(recipes) == 1 else f"{v}, {recipe}", color(v),
                        line=dict(dash="solid" if recipe == recipes[0] else "dash"), showlegend=j == 0, row=r, col=c)
        log_axis(fig, df.lens_steps, "x", row=r, col=c)
        fig.update_xaxes(title_text="lens training steps", row=r, col=c)
        fig.update_yaxes(title_text="KL (bits)", row=r, col=c)
    return fig.update_layout(height=320 * rows + 80,
                             title=title or "tuned-lens KL per layer against lens budget (mean ± sd over seeds)")


def ladder_gap(ladder_gaps: pd.DataFrame) -> go.Figure:
    """The early-layer gap with its CI per lens budget (:func:`tiebias.lens.tables.ladder_gaps`), a line per recipe.

    Args: ladder_gaps: the gap table per budget and recipe.
    Returns: the figure."""
    fig = go.Figure()
    for recipe, g in ladder_gaps.groupby("recipe", sort=False):
        fig.add_scatter(x=g.budget, y=g.gap, mode="lines+markers", name=str(recipe), error_y=ci_bars(g))
    fig.add_hline(y=0, line=ZERO)
    fig.update_layout(height=360, title=f"early-layer tuned-lens KL gap (tied - untied) by lens budget, {CI}",
                      xaxis_title="lens budget (multiple of lens_steps)", yaxis_title=GAP_AXIS)
    return log_axis(fig, ladder_gaps.budget, "x")


def gap_vs_loss(scale: pd.DataFrame, extra: dict[str, dict] | None = None) -> go.Figure:
    """The early-layer gap against validation loss (reversed), a point per checkpoint plus ``extra`` points.

    Args: scale: a gap and loss per checkpoint; extra: name -> {"val_loss", "gap", "ci_low", "ci_high"} (None: none).
    Returns: the figure."""
    fig = go.Figure()
    fig.add_scatter(x=scale.val_loss, y=scale.gap, mode="lines+markers+text", name="checkpoints of the run",
                    text=[f"step {s}" for s in scale.step], textposition="top center",
                    error_y=ci_bars(scale), line=dict(color="#d62728"))
    extra = extra or {}
    for (name, pt), c in zip(extra.items(), palette(len(extra), ["#1f77b4", "#2ca02c", "#9467bd"]), strict=True):
        g = pd.DataFrame([pt])
        fig.add_scatter(x=g.val_loss, y=g.gap, mode="markers+text", name=name, text=[name],
                        textposition="bottom center", marker=dict(size=11, symbol="diamond", color=c),
                        error_y=ci_bars(g))
    fig.add_hline(y=0, line=ZERO)
    return fig.update_layout(height=400, title=f"early-layer tuned-lens KL gap (tied - untied) against model quality, {CI}",
                             xaxis_title="validation loss (nats; lower = better trained)", yaxis_title=GAP_AXIS,
                             xaxis=dict(autorange="reversed"))


class _Formatter:
    """The package's token formatter in this kit's whitespace notation; a non-string (unknown id) is ``<unk>``."""

    def __init__(self) -> None:
        self.vectorized_format = np.vectorize(self.format, otypes=[object])

    def format(self, token: Any) -> str:
        return token_text.show(token, 8) if isinstance(token, str) else "<unk>"


def trajectory_figure(traj: PredictionTrajectory, statistic: str = "cross_entropy", title: str = "",
                      token_width: int = 80, max_width: int = 900) -> Any:
    """A heatmap of a trajectory statistic (layers x tokens) labelled with the lens's top tokens, as
    ``TrajectoryStatistic.figure`` draws it (whose ``colorbar.titleside`` plotly >= 6 rejects).

    Args: traj: the trajectory; statistic: the one shown; title: the title; token_width: pixels per token;
        max_width: the largest width (pixels, >= 300).
    Returns: the figure."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: must be one of {', '.join(STATISTICS)}; got {statistic!r}")
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
        title_text=title, title_x=0.5, width=min(max_width, 200 + token_width * stat.stats.shape[1]),
        height=max(320, 150 + 34 * rows), yaxis_title="layer (0 = embeddings)",
        xaxis_title=f"input token ({token_text.SPACE} = space, {token_text.NEWLINE} = newline)")


def readings(layers: pd.DataFrame, table: pd.DataFrame, a: str = "tied", b: str = "untied") -> go.Figure:
    """Per-layer KL of ``a`` and ``b`` under the four readings (:func:`tiebias.lens.readings.decomposition`), a panel
    per reading titled with its early-layer gap.

    Args: layers: per-layer KL per reading; table: a gap per reading; a, b: the variants compared.
    Returns: the figure."""
    titles = [f"({r.reading}) {r.protocol} reading, {r.lens_steps} steps<br>early gap {r.gap + 0.0:+.3g} "
              f"[{r.ci_low + 0.0:+.3g}, {r.ci_high + 0.0:+.3g}]" for r in table.itertuples()]
    fig = make_subplots(rows=1, cols=len(table), subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.03)
    for j, key in enumerate(table.reading):
        g = layers[layers.reading == key]
        for v in (a, b):
            fig.add_scatter(x=g.layer, y=g[v], mode="lines+markers", name=v, legendgroup=v, showlegend=j == 0,
                            line=dict(color=color(v)), row=1, col=j + 1)
        fig.update_xaxes(title_text="layer", row=1, col=j + 1)
    fig.update_yaxes(title_text="tuned-lens KL (bits)", col=1)
    fig.update_annotations(font_size=11)
    return fig.update_layout(height=420, title="tied vs untied tuned-lens KL per layer under the four readings (mean over seeds)")


def row1_parts(parts: pd.DataFrame, readings: tuple[str, ...]) -> go.Figure:
    """Row-1 KL under each of ``readings`` (:func:`tiebias.lens.mechanism.run_row1_parts`), bars per variant.

    Args: parts: the row-1 parts table; readings: the readings shown.
    Returns: the figure."""
    fig = go.Figure()
    kl = parts[parts.kind == "kl"]
    for v, g in kl.groupby("variant", sort=False):
        mean, err = mean_ci(g[g.measure == r].value.to_numpy() for r in readings)
        fig.add_bar(x=list(readings), y=mean, name=str(v), marker_color=color(v), error_y=err)
    return fig.update_layout(barmode="group", title=f"Row 1 read four ways: KL(final || lens) in bits (mean, {CI} over seeds)",
                             xaxis_title="reading", yaxis_title="KL at row 1, bits", height=420)


def penalty_vs_k(by_k: pd.DataFrame) -> go.Figure:
    """Tied models' row-1 penalty against k (:func:`tiebias.lens.mechanism.penalty_by_k`): seeds and their mean.

    Args: by_k: the penalty per seed and k.
    Returns: the figure."""
    fig = go.Figure()
    fig.add_scatter(x=by_k.k, y=by_k.penalty, mode="markers", marker=dict(color="#bbbbbb", size=7), name="one seed")
    ks = sorted(by_k.k.unique())
    mean, err = mean_ci(by_k[by_k.k == k].penalty.to_numpy() for k in ks)
    fig.add_scatter(x=ks, y=mean, mode="lines+markers", name="mean", line=dict(color=style.COLORS["tied"]), error_y=err)
    fig.update_xaxes(type="log", tickvals=ks, title_text="k (input-path gradient factor)")
    return fig.update_layout(title="The paper's lens reading's row-1 penalty against k (tied models, bits)",
                             yaxis_title="KL(reference) - KL(package) at row 1, bits", height=420)


def bigram_bound(table: pd.DataFrame) -> go.Figure:
    """Layer-0 KL against the gain over the bigram (:func:`tiebias.lens.bigram_bound.bound_table`), a point per model;
    on the dotted diagonal a layer-0 lens is as good as the best bigram.

    Args: table: the bound table, a row per model.
    Returns: the figure."""
    fig = go.Figure()
    for variant, d in table.groupby("variant", sort=False):
        fig.add_scatter(x=d.bigram_gain_bits, y=d.kl_layer0_bits, mode="markers", name=str(variant),
                        marker=dict(size=11, color=style.COLORS.get(str(variant))),
                        text=[f"{variant}-s{s}" for s in d.seed], hovertemplate="%{text}: gain %{x:.3f}, KL %{y:.3f}")
    lo = float(min(table.bigram_gain_bits.min(), 0.0))
    hi = float(max(table.bigram_gain_bits.max(), table.kl_layer0_bits.max(), 0.0))
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="KL = gain", line=dict(dash="dot", color="gray"))
    fig.add_vline(x=0.0, line=dict(dash="dash", color="gray", width=1), annotation_text="bigram baseline",
                  annotation_position="top")
    return fig.update_layout(height=440, xaxis_title="gain over the bigram baseline: (CE(bigram) - CE(model)) / ln 2, bits",
                             yaxis_title="tuned-lens KL at layer 0, bits",
                             title="Figure 2's level: layer-0 KL against how much the model beats a count bigram")
