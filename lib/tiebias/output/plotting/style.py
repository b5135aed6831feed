"""The shared look: variant colours, log axes ticked at 1, 2, 5, 10 (plotly's own read "9 1 2 3 ... 10 2"),
labelled reference lines, and mean ± sd or confidence-interval error bars."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import plotly.graph_objects as go

COLORS = {"tied": "#d62728", "untied": "#1f77b4"}
MORE_COLORS = ("#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def color(variant: Any) -> str:
    return COLORS.get(str(variant), "#7f7f7f")


def palette(n: int, first: Iterable[str]) -> list[str]:
    """``n`` colours: ``first`` (a figure's own), then :data:`MORE_COLORS` cycled, so no series goes undrawn."""
    out = list(first)[:n]
    return out + [MORE_COLORS[i % len(MORE_COLORS)] for i in range(n - len(out))]


def tick_text(x: float) -> str:
    """A log-axis tick label: 1, 20, 0.05, 2000, 1e5 (no trailing zeros, no negative zero)."""
    return f"{x + 0.0:.4g}".replace("e+0", "e").replace("e-0", "e-")


def log_ticks(values: Iterable[float]) -> list[float]:
    """Up to 8 distinct positive values are ticked themselves; more get the 1-2-5 series spanning them, thinned to
    powers of ten beyond 12 ticks."""
    distinct = np.unique(np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], dtype=float))
    if distinct.size <= 8:
        return [float(x) for x in distinct]
    lo, hi = math.floor(math.log10(distinct[0])), math.ceil(math.log10(distinct[-1]))
    series = [m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 2, 5)]
    inside = [t for t in series if distinct[0] / 1.0001 <= t <= distinct[-1] * 1.0001]
    if len(inside) > 12:
        inside = [t for t in inside if math.isclose(math.log10(t), round(math.log10(t)), abs_tol=1e-9)]
    return [float(t) for t in inside]


def log_axis(fig: go.Figure, values: Iterable[float], axis: str = "x", **where: int) -> go.Figure:
    """Make axis ``axis`` ("x" or "y"; ``where``: row= / col= of a subplot) logarithmic, ticked by :func:`log_ticks`."""
    ticks = log_ticks(values)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    return update(type="log", tickmode="array", tickvals=ticks, ticktext=[tick_text(t) for t in ticks],
                  minor=dict(showgrid=False), **where)


def reference_line(fig: go.Figure, y: float, label: str, **where: int) -> go.Figure:
    """A dashed horizontal line at ``y`` with ``label`` written on it (right end, above the line)."""
    return fig.add_hline(y=y, line=dict(dash="dash", color="gray", width=1), annotation_text=label,
                         annotation_position="top right", annotation_font=dict(size=11, color="#555555"), **where)


def zero_line(fig: go.Figure) -> None:
    fig.add_hline(y=0, line=dict(color="black", width=1))


def ci_bars(mean, low, high, nan_to_zero: bool = False) -> dict:  # noqa: ANN001
    """Asymmetric plotly error bars from ``low`` to ``high`` around ``mean`` (``nan_to_zero``: a missing CI, no bar)."""
    up, down = np.asarray(high - mean), np.asarray(mean - low)
    if nan_to_zero:
        up, down = np.nan_to_num(up), np.nan_to_num(down)
    return dict(type="data", symmetric=False, array=up, arrayminus=down)


def gap_bars(g: Any) -> dict:
    """A gap table's (``gap``, ``ci_low``, ``ci_high``) interval as error bars, none where it is missing."""
    return ci_bars(g.gap, g.ci_low, g.ci_high, nan_to_zero=True)


def mean_ci(samples: Iterable[np.ndarray]) -> tuple[np.ndarray, dict]:
    """Means of ``samples`` and their t-interval error bars (:func:`tiebias.stats.summarise`)."""
    from tiebias import stats

    s = [stats.summarise(x) for x in samples]
    mean = np.array([x.mean for x in s])
    return mean, ci_bars(mean, np.array([x.ci_low for x in s]), np.array([x.ci_high for x in s]))


def mean_sd(fig: go.Figure, g: Any, name: str, line_color: str, x: Any = None, **kw: Any) -> None:
    """A line of ``g``'s (a grouped column's) mean with ± sd error bars (one seed: no bar); ``x``: its x values (None:
    the groups)."""
    mean, sd = g.mean(), g.std(ddof=1).fillna(0)
    fig.add_scatter(x=mean.index if x is None else x(mean.index.values), y=mean.values, error_y=dict(array=sd.values),
                    mode="lines+markers", name=name, legendgroup=name,
                    line=dict(color=line_color, **kw.pop("line", {})), **kw)
