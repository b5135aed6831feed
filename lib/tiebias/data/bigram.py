"""The bigram baseline, the best a lens at layer 0 (one token of context) can do: ``p(b | a) = (c(a, b) + alpha
p_uni(b)) / (c(a) + alpha)`` towards the add-one unigram, ``alpha`` chosen on the last tenth of the training stream."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from tiebias.config.checks import is_int

ALPHAS = tuple(float(10 ** (e / 4)) for e in range(-8, 17))
"""The smoothing strengths tried (0.01 to 10,000, four per decade)."""
HOLDOUT = 0.1
"""The share of the training stream (its end) that chooses ``alpha``."""

IdStream = torch.Tensor | np.ndarray | Sequence[int]


def as_ids(ids: IdStream, vocab_size: int, name: str) -> np.ndarray:
    """A token stream as a 1-D int64 array; ids outside [0, vocab_size) are an error naming ``name``."""
    arr = (ids.detach().cpu().reshape(-1).numpy() if isinstance(ids, torch.Tensor) else
           np.asarray(ids).reshape(-1)).astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise ValueError(f"{name}: ids must lie in [0, {vocab_size}), got range [{arr.min()}, {arr.max()}]")
    return arr


def pairs(ids: np.ndarray, seq_len: int | None = None, max_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(current, next) pairs of a stream: every consecutive pair, or those inside the first ``max_tokens // seq_len``
    windows of ``seq_len`` (the positions a model's validation loss scores)."""
    if seq_len is None:
        return ids[:-1], ids[1:]
    if not is_int(seq_len) or seq_len < 2:
        raise ValueError(f"seq_len: {seq_len!r} is not allowed; need None (every pair) or an int >= 2")
    limit = ids.size if max_tokens is None else min(ids.size, max_tokens)
    n = limit // seq_len
    if n == 0:
        raise ValueError(f"seq_len: {seq_len} is longer than the stream's {limit} tokens (max_tokens={max_tokens})")
    w = ids[: n * seq_len].reshape(n, seq_len)
    return w[:, :-1].reshape(-1), w[:, 1:].reshape(-1)


@dataclass(frozen=True)
class Bigram:
    """A fitted bigram model: pair counts (sorted codes ``a * V + b``), context counts, the add-one unigram, ``alpha``."""

    vocab_size: int
    codes: np.ndarray
    counts: np.ndarray
    context: np.ndarray
    unigram: np.ndarray
    alpha: float

    def log_prob(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """log p(b | a), nats, for arrays of current and next tokens."""
        code = a * self.vocab_size + b
        c = np.zeros(code.shape)
        if self.codes.size:
            at = np.searchsorted(self.codes, code).clip(max=self.codes.size - 1)
            c = np.where(self.codes[at] == code, self.counts[at], 0.0)
        return np.log(c + self.alpha * self.unigram[b]) - np.log(self.context[a] + self.alpha)

    def loss(self, ids: IdStream, seq_len: int | None = None, max_tokens: int | None = None) -> float:
        """Cross-entropy (nats per predicted token) on a stream's pairs (:func:`pairs`)."""
        a, b = pairs(as_ids(ids, self.vocab_size, "ids"), seq_len, max_tokens)
        if a.size == 0:
            raise ValueError("ids: fewer than two tokens; a bigram needs at least one pair to score")
        return float(-self.log_prob(a, b).mean())


def _counted(ids: np.ndarray, vocab_size: int, alpha: float) -> Bigram:
    """The bigram model of a stream's counts: sorted pair codes, their counts, the contexts, the add-one unigram."""
    codes, counts = np.unique(ids[:-1] * vocab_size + ids[1:], return_counts=True)
    context = np.bincount(ids[:-1], minlength=vocab_size).astype(np.float64)
    uni = np.bincount(ids, minlength=vocab_size).astype(np.float64)
    return Bigram(vocab_size, codes, counts.astype(np.float64), context, (uni + 1.0) / (uni.sum() + vocab_size), alpha)


def fit(train_ids: IdStream, vocab_size: int, alpha: float | None = None) -> Bigram:
    """The bigram model of a training stream.

    Args:
        train_ids: the training token stream.
        vocab_size: the vocabulary's size.
        alpha: the smoothing strength (None: chosen from :data:`ALPHAS` on the stream's last :data:`HOLDOUT`).

    Returns:
        The fitted :class:`Bigram`.
    """
    if not is_int(vocab_size) or vocab_size < 1:
        raise ValueError(f"vocab_size: {vocab_size!r} is not allowed; need an int >= 1")
    ids = as_ids(train_ids, vocab_size, "train_ids")
    if alpha is None:
        cut = int(ids.size * (1 - HOLDOUT))
        if cut < 2 or ids.size - cut < 2:
            raise ValueError(f"train_ids: {ids.size} tokens are too few to choose alpha on the last {HOLDOUT:.0%}; "
                             "give at least 20 tokens, or alpha")
        head, (a, b) = _counted(ids[:cut], vocab_size, 1.0), pairs(ids[cut:])
        alpha = ALPHAS[int(np.argmin([float(-replace(head, alpha=x).log_prob(a, b).mean()) for x in ALPHAS]))]
    elif isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha: {alpha!r} is not allowed; need a finite number > 0 (or None: chosen on the last "
                         f"{HOLDOUT:.0%} of the training stream)")
    elif ids.size < 2:
        raise ValueError("train_ids: fewer than two tokens; a bigram needs at least one pair")
    return _counted(ids, vocab_size, float(alpha))
