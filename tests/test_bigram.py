"""The bigram baseline (tiebias.data.bigram) on token streams small enough to compute by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tiebias.data import bigram, tokens


def test_bigram_probability_by_hand() -> None:
    # train 0 1 0 1 0: pairs 01, 10, 01, 10 -> c(0,1) = c(1,0) = 2, c(0) = c(1) = 2 as contexts;
    # unigram counts 0: 3, 1: 2 -> add-one 4/7, 3/7; alpha = 1: p(1|0) = (2 + 3/7) / (2 + 1) = 17/21
    m = bigram.fit([0, 1, 0, 1, 0], 2, alpha=1.0)
    assert m.loss([0, 1]) == pytest.approx(-math.log(17 / 21), rel=1e-12)
    # p(0|0) = (0 + 4/7) / 3 = 4/21: a pair never seen keeps the unigram's share
    assert m.loss([0, 0]) == pytest.approx(-math.log(4 / 21), rel=1e-12)
    assert m.loss(np.array([0, 1, 0])) == pytest.approx(-(math.log(17 / 21) + math.log((2 + 4 / 7) / 3)) / 2, rel=1e-12)


def test_a_deterministic_stream_is_nearly_free_for_the_bigram_and_log2_for_the_unigram() -> None:
    train = [0, 1] * 500  # each token fixes the next
    m = bigram.fit(train, 2)  # alpha chosen on the last tenth: the smallest on the grid
    assert m.alpha == min(bigram.ALPHAS)
    ce = m.loss(torch.tensor([0, 1] * 50))
    assert ce < 1e-4
    uni = tokens.unigram_loss(np.bincount(train, minlength=2), [0, 1] * 50)
    assert uni == pytest.approx(math.log(2), rel=1e-3)


def test_a_stream_without_context_chooses_a_large_alpha_and_matches_the_unigram() -> None:
    rng = np.random.default_rng(0)
    train = rng.integers(0, 8, 20_000)  # independent tokens: pair counts are noise, the unigram is right
    m = bigram.fit(train, 8)
    assert m.alpha >= 100
    val = rng.integers(0, 8, 5_000)
    # within 0.01 nats of the unigram baseline: far below the 2-3 nats a context model gains on text
    assert m.loss(val) == pytest.approx(tokens.unigram_loss(np.bincount(train, minlength=8), val[1:]), abs=0.01)


def test_windows_score_only_the_pairs_inside_them() -> None:
    m = bigram.fit([0, 1, 2, 0, 1, 2, 0], 3, alpha=0.5)
    ids = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    a, b = bigram.pairs(ids, seq_len=3, max_tokens=7)  # two windows 012 | 012: pairs 01 12 01 12, not 20
    assert a.tolist() == [0, 1, 0, 1] and b.tolist() == [1, 2, 1, 2]
    assert m.loss(ids, seq_len=3, max_tokens=7) == pytest.approx(m.loss([0, 1, 2]), rel=1e-12)
    assert m.loss(ids) != pytest.approx(m.loss([0, 1, 2]))


@pytest.mark.parametrize(("call", "match"), [
    (lambda: bigram.fit([0, 1, 5], 3, alpha=1.0), r"^train_ids: ids must lie in \[0, 3\)"),
    (lambda: bigram.fit([0, 1, 0], 2, alpha=0.0), r"^alpha: 0.0 is not allowed"),
    (lambda: bigram.fit([0, 1, 0], 2), r"^train_ids: 3 tokens are too few to choose alpha"),
    (lambda: bigram.fit([0, 1, 0], 0, alpha=1.0), r"^vocab_size: 0 is not allowed"),
    (lambda: bigram.fit([0, 1, 0], 2, alpha=1.0).loss([1]), r"^ids: fewer than two tokens"),
    (lambda: bigram.fit([0, 1, 0], 2, alpha=1.0).loss([0, 1, 0], seq_len=1), r"^seq_len: 1 is not allowed"),
    (lambda: bigram.fit([0, 1, 0], 2, alpha=1.0).loss([0, 1, 0], seq_len=4), r"^seq_len: 4 is longer than"),
])
def test_bad_values_are_named(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
