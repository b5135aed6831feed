"""Every interval the claims use: t-intervals over seeds, line fits, bootstraps, an interval against 0.

Written out rather than ``scipy.stats.t.interval`` / ``linregress``: those differ in the last bits and the recorded
claims must not move."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as _scipy
from torch import Tensor

from tiebias.config.checks import is_int

LEVEL = 0.95
"""The confidence level of every interval the kit reports, unless a caller gives another."""


class Summary(NamedTuple):
    """Mean, sample std, n and a two-sided t confidence interval for the mean."""

    mean: float
    std: float
    n: int
    ci_low: float
    ci_high: float


def _floats(values: Any, what: str = "values", finite: bool = True, level: float = LEVEL) -> np.ndarray:
    """A flat float64 array, checked: finite entries (``finite``) and a level in (0, 1)."""
    v = values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values, dtype=np.float64)
    v = v.astype(np.float64).reshape(-1)
    if finite and not np.isfinite(v).all():
        raise ValueError(f"{what} contains NaN or infinite entries")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return v


def _t(level: float, df: int) -> float:
    return float(_scipy.t.ppf(0.5 + level / 2, df=df))


def t_interval(mean: float, sd: float, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """``(low, high, half_width)`` of the two-sided t-interval around ``mean`` (NaN for n < 2 or a non-finite sd)."""
    half = _t(level, n - 1) * sd / math.sqrt(n) if n >= 2 and math.isfinite(sd) else math.nan
    return mean - half, mean + half, half


def lies_above_zero(low: float) -> bool:
    """Whether an interval lies wholly above 0 (a NaN end does not): "the CI is above 0".

    Args:
        low: the interval's low end.

    Returns:
        True when it is above 0."""
    return bool(low > 0)


def excludes_zero(low: float, high: float) -> bool:
    """Whether an interval lies wholly above or wholly below 0 (a NaN end does not): "significant" in a gap table."""
    return bool(low > 0 or high < 0)


def pooled_sd(sds: Any) -> float:
    """Pooled sd of groups of equal size: root mean square of their sds (NaN groups left out)."""
    return float(np.sqrt(np.nanmean(np.asarray(sds) ** 2)))


def summarise(values: Any, *, level: float = LEVEL) -> Summary:
    """Mean +- t-interval of repeated measurements (e.g. one score over seeds)."""
    v = _floats(values, level=level)
    if v.size == 0:
        raise ValueError("values is empty")
    if v.size == 1:
        return Summary(float(v.mean()), math.nan, 1, math.nan, math.nan)
    mean, std = float(v.mean()), float(v.std(ddof=1))
    low, high, _ = t_interval(mean, std, int(v.size), level)
    return Summary(mean, std, int(v.size), low, high)


def one_sample_p(x: np.ndarray) -> float:
    """Two-sided p-value of a one-sample t-test of mean 0 (NaN with fewer than 2 values or zero spread)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2 or not float(x.std(ddof=1)) > 0:
        return math.nan
    return float(_scipy.ttest_1samp(x, 0.0).pvalue)


def over_seeds(df: pd.DataFrame, value_cols: Sequence[str], by: Sequence[str], *, sd_name: str = "sd") -> pd.DataFrame:
    """Mean, sample sd (NaN for one seed) and n of each value column over seeds.

    Args:
        df: one row per seed; value_cols: the columns summarised; by: the grouping columns (in order of appearance);
        sd_name: the sd statistic's name.

    Returns:
        Indexed by ``by``, columns (value column, ``mean`` / ``sd_name`` / ``n``)."""
    res = df.groupby(list(by), sort=False)[list(value_cols)].agg(["mean", "std", "count"])
    return res.rename(columns={"std": sd_name, "count": "n"}, level=1)


class Slope(NamedTuple):
    """Least-squares slope of y on x with a two-sided t-interval (n - 2 degrees of freedom)."""

    slope: float
    ci_low: float
    ci_high: float
    n: int


def _fit(x: Any, y: Any, level: float) -> tuple[np.ndarray, float, float, float]:
    """The checked x, the deviations of x from its mean, the least-squares slope and the residual variance."""
    xv, yv = _floats(x, finite=False, level=level), _floats(y, finite=False)
    if xv.size != yv.size:
        raise ValueError(f"x and y: need the same length, got {xv.size} and {yv.size}")
    if not (np.isfinite(xv).all() and np.isfinite(yv).all()):
        raise ValueError("x and y: NaN or infinite entries")
    if xv.size < 2 or np.ptp(xv) == 0:
        raise ValueError("x: need at least two distinct values")
    dx = xv - xv.mean()
    b = float((dx * (yv - yv.mean())).sum() / (dx**2).sum())
    resid = yv - yv.mean() - b * dx
    return xv, yv.mean(), b, float((resid**2).sum()) / (xv.size - 2) if xv.size > 2 else math.nan


def slope(x: Any, y: Any, *, level: float = LEVEL) -> Slope:
    """Slope of a straight-line fit of ``y`` on ``x`` and its t-interval (NaN interval with fewer than 3 points)."""
    xv, _, b, sigma2 = _fit(x, y, level)
    if xv.size < 3:
        return Slope(b, math.nan, math.nan, int(xv.size))
    half = _t(level, xv.size - 2) * math.sqrt(sigma2 / float(((xv - xv.mean()) ** 2).sum()))
    return Slope(b, b - half, b + half, int(xv.size))


def line_at(x: Any, y: Any, x0: float, *, level: float = LEVEL,
            prediction: bool = False) -> tuple[float, float, float]:
    """The line fitted to ``y`` on ``x`` at ``x0`` with the t-interval of that mean, or with ``prediction`` of one new
    observation there (three or more points; far outside ``x`` the line is an assumption)."""
    xv, y_mean, b, sigma2 = _fit(x, y, level)
    if xv.size < 3:
        raise ValueError("x: need at least three points for an interval")
    fit = float(y_mean + b * (x0 - xv.mean()))
    se = math.sqrt(sigma2 * (int(prediction) + 1 / xv.size + (x0 - xv.mean()) ** 2 / float(((xv - xv.mean()) ** 2).sum())))
    half = _t(level, xv.size - 2) * se
    return fit, fit - half, fit + half


class BootstrapCI(NamedTuple):
    """Mean of per-item values with a percentile bootstrap confidence interval (items resampled)."""

    mean: float
    ci_low: float
    ci_high: float
    n: int
    n_boot: int
    level: float


def bootstrap_mean(values: Any, *, n_boot: int = 2000, level: float = LEVEL, seed: int = 0) -> BootstrapCI:
    """Percentile bootstrap CI for the mean of per-item values (e.g. one pair's per-token differences); deterministic
    for ``seed``, resampled in chunks to bound memory."""
    v = _floats(values, finite=False)
    if v.size < 2:
        raise ValueError(f"values: need at least 2 items to bootstrap, got {v.size}")
    v = _floats(v, level=level)
    if not is_int(n_boot) or n_boot < 100:
        raise ValueError(f"n_boot: must be an int >= 100, got {n_boot!r}")
    rng = np.random.default_rng(seed)
    per_chunk = max(1, (1 << 22) // v.size)
    means = np.empty(n_boot)
    for start in range(0, n_boot, per_chunk):
        b = min(per_chunk, n_boot - start)
        means[start:start + b] = v[rng.integers(0, v.size, (b, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return BootstrapCI(float(v.mean()), float(lo), float(hi), int(v.size), n_boot, float(level))


def bootstrap_diff(a: np.ndarray, b: np.ndarray, *, paired: bool, n_boot: int = 2000, level: float = LEVEL,
                   seed: int = 0) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): percentile bootstrap over evaluation sequences, resampled jointly when
    ``paired`` (the same texts), else each side on its own (two tokenizers)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"sequences: a bootstrap needs at least 2 evaluation sequences per model, got "
                         f"{len(a)} and {len(b)}; raise lens_eval_tokens")
    if paired and len(a) != len(b):
        raise ValueError(f"paired: sequences differ in number ({len(a)} vs {len(b)}); pass paired=False")
    rng = np.random.default_rng(seed)
    if paired:
        boot = (a - b)[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
    else:
        boot = (a[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
                - b[rng.integers(0, len(b), (n_boot, len(b)))].mean(1))
    lo, hi = np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2])
    return float(a.mean() - b.mean()), float(lo), float(hi)
