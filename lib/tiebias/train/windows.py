"""Claim 2 taken apart: the output path's mean share per training window (relative to the run's warmup) under each
way of measuring it (:data:`METRICS`: the exact weight-gradient split or the paper's proxy, with L2, squared L2 or L1)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from tiebias import stats
from tiebias.config.checks import check_int
from tiebias.stats import LEVEL

METRICS = {"exact l2": ("input_norm", "output_norm", 1), "exact squared l2": ("input_norm", "output_norm", 2),
           "exact l1": ("input_l1", "output_l1", 1), "proxy l2": ("proxy_input_norm", "output_norm", 1),
           "proxy squared l2": ("proxy_input_norm", "output_norm", 2), "proxy l1": ("proxy_input_l1", "output_l1", 1)}
"""Each metric: (input column, output column, power): share = out^p / (in^p + out^p) per step, then the mean."""


def window_bounds(steps: int, warmup: int) -> dict[str, tuple[int, int]]:
    """Each window's first and last step (1-based, inclusive); empty windows are left out."""
    check_int("steps", steps, "an integer > 0", minimum=1)
    check_int("warmup", warmup, f"an integer 0 <= warmup < steps ({steps})", maximum=steps - 1)
    out = {"first 100 steps": (1, min(100, steps)), "warmup": (1, warmup), "first 1000 steps": (1, min(1000, steps)),
           "after warmup": (warmup + 1, steps)}
    return {k: v for k, v in out.items() if v[0] <= v[1]}


def step_shares(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per-step shares under every metric whose columns the log has (a log written before the proxy existed has
    only the exact L2 ones); a column of NaN for the others."""
    out = pd.DataFrame({"step": metrics.step})
    for name, (col_in, col_out, power) in METRICS.items():
        if col_in not in metrics or col_out not in metrics:
            out[name] = math.nan
            continue
        a, b = metrics[col_in].astype(float) ** power, metrics[col_out].astype(float) ** power
        out[name] = b / (a + b)
    return out


def window_shares(logs: Mapping[str, pd.DataFrame], steps: int, warmup: int, *, level: float = LEVEL) -> pd.DataFrame:
    """Per window and metric: each model's mean share over the window's steps (``share_<key>``) and a t-interval over
    the models (``mean``, ``ci_low``, ``ci_high``, ``n_seeds``).

    Args:
        logs: model key -> its training log.
        steps, warmup: the recipe's steps, which place the windows.
        level: the intervals' confidence level.

    Returns:
        One row per window and metric.
    """
    if not logs:
        raise ValueError("logs: no model's metrics given")
    per_model = {key: step_shares(m) for key, m in logs.items()}
    rows = []
    for window, (lo, hi) in window_bounds(steps, warmup).items():
        for metric in METRICS:
            vals = {key: float(s[(s.step >= lo) & (s.step <= hi)][metric].mean()) for key, s in per_model.items()}
            finite = [v for v in vals.values() if math.isfinite(v)]
            sm = stats.summarise(finite, level=level) if finite else None
            mean, low, high = (sm.mean, sm.ci_low, sm.ci_high) if sm is not None else (math.nan,) * 3
            rows.append({"window": window, "first_step": lo, "last_step": hi, "metric": metric, "mean": mean,
                         "ci_low": low, "ci_high": high, "n_seeds": len(finite),
                         **{f"share_{key}": v for key, v in vals.items()}})
    return pd.DataFrame(rows)


def record_details(table: pd.DataFrame) -> dict[str, Any]:
    """The per-window shares for the claim-2 record: {metric: {window: mean}}, rounded, non-finite ones left out.

    Args:
        table: the :func:`window_shares` table.

    Returns:
        ``{metric: {window: mean}}``.
    """
    return {m: {r.window: round(float(r.mean), 4) for r in g.itertuples() if math.isfinite(r.mean)}
            for m, g in table.groupby("metric", sort=False)}
