"""Shared axis style: log axes ticked at 1, 2, 5, 10, 20 (plotly's own log ticks read "9 1 2 3 ... 10 2") and
labelled reference lines."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go

COLORS = {"tied": "#d62728", "untied": "#1f77b4"}
"""Each variant's colour in every figure."""
MORE_COLORS = ("#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
"""Colours after a figure's own first ones (plotly's qualitative palette less red, blue and grey), cycled."""
MANTISSAS = (1, 2, 5)
MAX_DATA_TICKS = 8  # up to this many distinct values (k factors, lens budgets): tick at the values themselves


def palette(n: int, first: Iterable[str]) -> list[str]:
    """``n`` colours: ``first`` (a figure's own), then :data:`MORE_COLORS` cycled, so no series goes undrawn."""
    out = list(first)[:n]
    return out + [MORE_COLORS[i % len(MORE_COLORS)] for i in range(n - len(out))]


def tick_text(x: float) -> str:
    """A log-axis tick label: 1, 20, 500, 0.05, 2000, 1e+05 (no trailing zeros, no negative zero)."""
    return f"{x + 0.0:.4g}".replace("e+0", "e").replace("e-0", "e-")


def log_ticks(values: Iterable[float]) -> list[float]:
    """Tick values for a log axis holding ``values`` (positive ones only).

    Few distinct values (at most ``MAX_DATA_TICKS``, e.g. the factors k = 1, 2, 5, 10, 20): the values
    themselves. Otherwise the 1-2-5 series (..., 0.5, 1, 2, 5, 10, 20, ...) spanning them, thinned to
    powers of ten when that gives more than 12 ticks.
    """
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], dtype=float)
    if v.size == 0:
        return []
    distinct = np.unique(v)
    if distinct.size <= MAX_DATA_TICKS:
        return [float(x) for x in distinct]
    lo, hi = math.floor(math.log10(distinct[0])), math.ceil(math.log10(distinct[-1]))
    series = [m * 10.0 ** e for e in range(lo, hi + 1) for m in MANTISSAS]
    inside = [t for t in series if distinct[0] / 1.0001 <= t <= distinct[-1] * 1.0001]
    if len(inside) > 12:
        inside = [t for t in inside if math.isclose(math.log10(t), round(math.log10(t)), abs_tol=1e-9)]
    return [float(t) for t in inside]


def log_axis(fig: go.Figure, values: Iterable[float], axis: str = "x", **where: int) -> go.Figure:
    """Make an axis (``axis`` "x" or "y"; ``where`` row= / col= of a subplot) logarithmic, ticked by :func:`log_ticks`."""
    if axis not in ("x", "y"):
        raise ValueError(f"axis: must be 'x' or 'y', got {axis!r}")
    ticks = log_ticks(values)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", tickmode="array", tickvals=ticks, ticktext=[tick_text(t) for t in ticks],
           minor=dict(showgrid=False), **where)
    return fig


def reference_line(fig: go.Figure, y: float, label: str, **where: int) -> go.Figure:
    """A dashed horizontal line at ``y`` with ``label`` written on it (right end, above the line)."""
    fig.add_hline(y=y, line=dict(dash="dash", color="gray", width=1), annotation_text=label,
                  annotation_position="top right", annotation_font=dict(size=11, color="#555555"), **where)
    return fig
