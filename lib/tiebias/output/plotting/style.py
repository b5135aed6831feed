"""The shared look: variant colours, log axes ticked at 1, 2, 5, 10, labelled reference lines, error bars."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import plotly.graph_objects as go

COLORS = {"tied": "#d62728", "untied": "#1f77b4"}
MORE_COLORS = ("#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
ZERO = dict(color="black", width=1)  # the y = 0 line of a gap figure


def color(variant: Any) -> str:
    return COLORS.get(str(variant), "#7f7f7f")


def palette(n: int, first: Iterable[str]) -> list[str]:
    """``n`` colours: ``first``, then the other :data:`MORE_COLORS` cycled, so no series goes undrawn."""
    out = list(first)[:n]
    more = [c for c in MORE_COLORS if c not in out]
    return out + [more[i % len(more)] for i in range(n - len(out))]


def tick_text(x: float) -> str:
    """A log-axis tick label: 1, 20, 0.05, 2000, 1e5 (no trailing zeros, no negative zero)."""
    return f"{x + 0.0:.4g}".replace("e+0", "e").replace("e-0", "e-")


def log_ticks(values: Iterable[float]) -> list[float]:
    """Up to 8 distinct positive values tick themselves; more get the 1-2-5 series (powers of ten beyond 12 ticks);
    plotly's own log ticks read "9 1 2 3 ... 10 2"."""
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
    """Axis ``axis`` ("x" or "y"; ``where``: a subplot's row= / col=) logarithmic, ticked by :func:`log_ticks`."""
    ticks = log_ticks(values)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    return update(type="log", tickmode="array", tickvals=ticks, ticktext=[tick_text(t) for t in ticks],
                  minor=dict(showgrid=False), **where)


def reference_line(fig: go.Figure, y: float, label: str, **where: int) -> go.Figure:
    """A dashed horizontal line at ``y`` labelled at its right end."""
    return fig.add_hline(y=y, line=dict(dash="dash", color="gray", width=1), annotation_text=label,
                         annotation_position="top right", annotation_font=dict(size=11, color="#555555"), **where)


def ci_bars(t: Any, mean: str = "gap", low: str = "ci_low", high: str = "ci_high") -> dict:
    """Asymmetric error bars from column ``low`` to ``high`` around ``mean`` of table ``t``; none where one is missing.

    Args: t: a table (or dict of arrays); mean, low, high: its columns.
    Returns: plotly's ``error_y`` / ``error_x`` settings."""
    up, down = np.asarray(t[high] - t[mean], dtype=float), np.asarray(t[mean] - t[low], dtype=float)
    return dict(type="data", symmetric=False, array=np.nan_to_num(up), arrayminus=np.nan_to_num(down))


def mean_ci(samples: Iterable[np.ndarray]) -> tuple[np.ndarray, dict]:
    """Means of ``samples`` and their t-interval error bars (:func:`tiebias.stats.summarise`)."""
    from tiebias import stats

    s = [stats.summarise(x) for x in samples]
    t = {"mean": np.array([x.mean for x in s]), "ci_low": np.array([x.ci_low for x in s]),
         "ci_high": np.array([x.ci_high for x in s])}
    return t["mean"], ci_bars(t, "mean")


def mean_sd(fig: go.Figure, g: Any, name: str, line_color: str, x: Any = None, **kw: Any) -> None:
    """A line of ``g``'s (a grouped column's) mean with ± sd error bars (one seed: none); ``x``: maps the groups."""
    mean, sd = g.mean(), g.std(ddof=1).fillna(0)
    fig.add_scatter(x=mean.index if x is None else x(mean.index.values), y=mean.values, error_y=dict(array=sd.values),
                    mode="lines+markers", name=name, legendgroup=name,
                    line=dict(color=line_color, **kw.pop("line", {})), **kw)
