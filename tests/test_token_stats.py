"""Row norms against token frequency, frequency-binned scores and drift over checkpoints."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from _embedding_helpers import cos_rows

from tiebias.align.token_stats import by_frequency, evolution, norm_frequency


def test_norm_frequency_and_counts() -> None:
    rng = np.random.default_rng(18)
    counts = np.array([0, 0, 5, 1, 100, 20, 3, 1000, 7, 0])
    m = rng.standard_normal((10, 4)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    m *= (1 + np.log1p(counts))[:, None]  # norm grows with frequency
    nf = norm_frequency(torch.from_numpy(m), torch.from_numpy(counts), tokens=[f"t{i}" for i in range(10)])
    assert nf.spearman == pytest.approx(1.0) and nf.n_seen == 7 and nf.n_unseen == 3
    tab = nf.table
    np.testing.assert_allclose(tab["norm"], np.linalg.norm(m.astype(np.float64), axis=1), rtol=1e-15)  # in float64
    assert tab["log10_freq"].isna().sum() == 3 and tab.loc[7, "log10_freq"] == pytest.approx(3.0)
    assert list(tab.columns) == ["id", "token", "count", "log10_freq", "norm", "seen"]
    with pytest.raises(ValueError, match="tokens has 3 entries, expected 10"):
        norm_frequency(m, counts, tokens=["a", "b", "c"])


def test_by_frequency_bins() -> None:
    counts = np.array([0, 0] + list(range(1, 11)))
    scores = np.array([9.0, 7.0] + [float(c) for c in range(1, 11)])
    df = by_frequency(torch.from_numpy(scores), counts, bins=5)
    assert list(df["bin"]) == ["unseen", "q1", "q2", "q3", "q4", "q5"]
    assert list(df["n"]) == [2, 2, 2, 2, 2, 2]
    np.testing.assert_allclose(df["mean"], [8.0, 1.5, 3.5, 5.5, 7.5, 9.5])
    assert df.loc[1, "count_min"] == 1 and df.loc[5, "count_max"] == 10
    np.testing.assert_allclose(df["std"], [np.std([9, 7], ddof=1)] + [np.std([1, 2], ddof=1)] * 5)
    ties = by_frequency(np.arange(6.0), np.array([1, 1, 1, 1, 2, 3]), bins=3)
    assert ties["n"].sum() == 6 and "unseen" not in set(ties["bin"])


def test_evolution_values() -> None:
    rng = np.random.default_rng(19)
    w0 = rng.standard_normal((50, 8))
    w1 = 2 * w0
    w2 = w1 + rng.standard_normal((50, 8))
    df = evolution([(20, w2), (0, w0), (10, torch.from_numpy(w1))])
    assert list(df["step"]) == [0, 10, 20]
    assert df["cos_to_init"].iloc[1] == pytest.approx(1.0) and np.isnan(df["cos_to_prev"].iloc[0])
    assert df["norm_change"].iloc[1] == pytest.approx(1.0) and df["dist_to_init"].iloc[1] == pytest.approx(1.0)
    assert df["cos_to_init"].iloc[2] == pytest.approx(cos_rows(w2, w0).mean())
    assert df["cos_to_prev"].iloc[2] == pytest.approx(cos_rows(w2, w1).mean())
    assert df["dist_to_init"].iloc[2] == pytest.approx(np.linalg.norm(w2 - w0) / np.linalg.norm(w0))


# ------------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda s, t: by_frequency(s[:, 0], np.ones(3)), "counts has 3 entries"),
    (lambda s, t: by_frequency(s[:, 0], np.ones(20), bins=0), "bins"),
    (lambda s, t: norm_frequency(s, -np.ones(20)), "non-negative"),
    (lambda s, t: evolution([]), "checkpoints: need one matrix per step"),
    (lambda s, t: evolution([(0, s), (0, t)]), r"checkpoints: need one matrix per step, got steps \[0, 0\]"),
    (lambda s, t: evolution([(0, s), (1, t[:, :3])]), "shape"),
])
def test_bad_inputs_raise(call: Callable[[np.ndarray, np.ndarray], object], pattern: str) -> None:
    rng = np.random.default_rng(17)
    s, t = rng.standard_normal((20, 6)), rng.standard_normal((20, 6))
    with pytest.raises(ValueError, match=pattern):
        call(s, t)

