"""Intervals and seed summaries every claim uses (tiebias.stats)."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from tiebias import stats


def test_summarise_t_interval() -> None:
    v = [0.216, 0.222, 0.219, 0.214, 0.225]
    s = stats.summarise(v)
    lo, hi = student_t.interval(0.95, df=4, loc=np.mean(v), scale=np.std(v, ddof=1) / np.sqrt(5))
    assert (s.n, s.mean, s.std) == (5, pytest.approx(np.mean(v)), pytest.approx(np.std(v, ddof=1)))
    assert s.ci_low == pytest.approx(lo) and s.ci_high == pytest.approx(hi)
    one = stats.summarise([0.3])
    assert one.n == 1 and np.isnan(one.std) and np.isnan(one.ci_low)
    with pytest.raises(ValueError, match="NaN"):
        stats.summarise([0.1, np.nan])
    with pytest.raises(ValueError, match="values is empty"):
        stats.summarise([])


def test_t_interval_and_p_value() -> None:
    x = np.array([0.1, 0.3, 0.2, 0.25])
    lo, hi = student_t.interval(0.9, df=3, loc=x.mean(), scale=x.std(ddof=1) / 2)
    assert stats.t_interval(float(x.mean()), float(x.std(ddof=1)), 4, 0.9) == pytest.approx((lo, hi, (hi - lo) / 2))
    assert math.isnan(stats.t_interval(0.0, 0.1, 1)[2]) and math.isnan(stats.t_interval(0.0, math.nan, 5)[2])
    assert 0.01 < stats.one_sample_p(x) < 0.02 and math.isnan(stats.one_sample_p(np.ones(3)))


def test_over_seeds() -> None:
    df = pd.DataFrame({"k": [1, 1, 5, 5, 5], "seed": [0, 1, 0, 1, 2], "x": [0.1, 0.3, 0.5, 0.7, 0.9]})
    s = stats.over_seeds(df, ["x"], ["k"])
    assert list(s.columns) == [("x", "mean"), ("x", "sd"), ("x", "n")]
    assert s.loc[5, ("x", "mean")] == pytest.approx(0.7) and s.loc[1, ("x", "sd")] == pytest.approx(math.sqrt(0.02))
    assert list(s[("x", "n")]) == [2, 3]


def test_bootstrap_mean_matches_the_normal_interval() -> None:
    x = np.random.default_rng(1).normal(0.3, 2.0, 4000)
    ci = stats.bootstrap_mean(x, n_boot=1000, seed=0)
    half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert ci.mean == pytest.approx(x.mean()) and ci.n == 4000 and ci.n_boot == 1000
    assert ci.ci_low < ci.mean < ci.ci_high
    assert (ci.ci_high - ci.ci_low) / 2 == pytest.approx(half, rel=0.15)
    assert stats.bootstrap_mean(x, n_boot=1000, seed=0) == ci  # deterministic for a seed
    narrow = stats.bootstrap_mean(x, n_boot=1000, level=0.5, seed=0)
    assert ci.ci_low < narrow.ci_low < narrow.ci_high < ci.ci_high


@pytest.mark.parametrize(("values", "kw", "match"), [
    ([1.0], {}, "at least 2 items"),
    ([1.0, math.nan], {}, "NaN"),
    ([1.0, 2.0], {"level": 1.0}, "level must be in"),
    ([1.0, 2.0], {"n_boot": 10}, "n_boot: must be an int >= 100"),
])
def test_bootstrap_mean_bad_input(values, kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        stats.bootstrap_mean(values, **kw)


def test_bootstrap_ci() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    mean, lo, hi = stats.bootstrap_diff(a, b, paired=False)
    assert lo < 1.0 < hi and mean == pytest.approx(a.mean() - b.mean())
    assert (hi - lo) == pytest.approx(2 * 1.96 * math.sqrt(2 / 400), rel=0.15)
    shared = rng.normal(0.0, 5.0, 400)
    pa, pb = shared + 0.1 + rng.normal(0, 0.05, 400), shared
    _, plo, phi = stats.bootstrap_diff(pa, pb, paired=True)
    _, ulo, uhi = stats.bootstrap_diff(pa, pb, paired=False)
    assert plo > 0 and phi < 0.2 and ulo < 0 < uhi  # pairing removes the shared per-sequence variation
    with pytest.raises(ValueError, match="at least 2 evaluation sequences"):
        stats.bootstrap_diff(a[:1], b[:1], paired=True)
    with pytest.raises(ValueError, match="paired"):
        stats.bootstrap_diff(a[:5], b[:6], paired=True)


def test_ci_against_zero_at_its_edges() -> None:
    tiny = 1e-6  # just off 0: far larger than rounding
    assert stats.excludes_zero(tiny, 1.0) and stats.lies_above_zero(tiny)
    assert not any(stats.lies_above_zero(lo) for lo in (0.0, -tiny, math.nan))
    assert stats.excludes_zero(-1.0, -tiny) and not stats.lies_above_zero(-1.0)
    for lo, hi in ((0.0, 1.0), (-1.0, 0.0), (-tiny, tiny), (math.nan, math.nan), (math.nan, 1.0)):
        assert not stats.excludes_zero(lo, hi), (lo, hi)


def test_t_interval_is_the_summary_interval_and_pooled_sd_the_rms() -> None:
    x = np.array([0.5, 0.75, 1.25])
    s = stats.summarise(x)
    lo, hi, half = stats.t_interval(float(x.mean()), float(x.std(ddof=1)), 3)
    assert (lo, hi) == (s.ci_low, s.ci_high) and half > 0 and (hi - lo) / 2 == pytest.approx(half, rel=1e-12)
    assert all(math.isnan(v) for v in stats.t_interval(1.0, 0.25, 1))  # one value: no interval
    assert stats.pooled_sd([0.25, 0.75, math.nan]) == math.sqrt((0.25**2 + 0.75**2) / 2)
