"""Toy problems for the notebooks' "how it works" cells and the coding exercises: a batch of token ids drawn as in
text (01) and an alignment pair whose maps are written out in numpy (02)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from tiebias.align import maps
from tiebias.config.checks import is_int

TOY_VOCAB = 64
"""Toy vocabulary: small enough that a batch of 128 Zipf-distributed tokens leaves many tokens unseen."""


def toy_batch(vocab: int = TOY_VOCAB, shape: tuple[int, int] = (4, 32), seed: int = 0) -> torch.Tensor:
    """Token ids drawn from a Zipf-like law (p ~ 1/rank), as in text: a few frequent tokens, many rare ones.

    Args:
        vocab: the vocabulary size. shape: (batch, sequence). seed: the generator's seed.

    Returns:
        A long tensor of token ids of that shape.
    """
    if not is_int(vocab) or vocab < 2:
        raise ValueError(f"vocab: {vocab!r} is not a vocabulary size; need an int >= 2")
    p = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(p / p.sum(), shape[0] * shape[1], replacement=True, generator=gen).view(shape)


def toy_alignment(n: int = 200, d: int = 8, noise: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray,
                                                                                        np.ndarray]:
    """A source S, a target T = S Q + noise (Q a random rotation plus a stretch of one axis), and Q."""
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, d)) + rng.standard_normal(d)  # a shared offset that centring removes
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    stretch = np.ones(d)
    stretch[0] = 3.0  # a non-orthogonal part that only the linear map can undo
    T = (S * stretch) @ Q + noise * rng.standard_normal((n, d))
    return S, T, Q


def _mean_cosine(A: np.ndarray, B: np.ndarray) -> float:
    """Mean over rows of the cosine between A's and B's rows."""
    num = (A * B).sum(1)
    return float((num / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))).mean())


def map_formulas(S: np.ndarray, T: np.ndarray) -> dict[str, np.ndarray]:
    """The identity, orthogonal (U V^T from the SVD of S_c^T T_c) and least-squares maps, written out in numpy."""
    Sc, Tc = S - S.mean(0), T - T.mean(0)
    U, _, Vt = np.linalg.svd(Sc.T @ Tc)
    return {"identity": np.eye(S.shape[1]), "orthogonal": U @ Vt, "linear": np.linalg.lstsq(Sc, Tc, rcond=None)[0]}


def map_check(n: int = 200, d: int = 8, noise: float = 0.3, seed: int = 0) -> pd.DataFrame:
    """Mean cosine of each map computed from the formulas and by ``tiebias.align.maps.align_all``: they must agree.

    Args:
        n, d, noise, seed: the toy problem's rows, width, noise level and seed (:func:`toy_alignment`).

    Returns:
        One row per map: ``formula``, ``tiebias.align.maps`` (the two mean cosines), ``max |W^T W - I|``.
    """
    S, T, _ = toy_alignment(n, d, noise, seed)
    formulas = map_formulas(S, T)
    Sc, Tc = S - S.mean(0), T - T.mean(0)
    out = {}
    for method, W in formulas.items():
        lib = maps.align_all(torch.from_numpy(S), torch.from_numpy(T), [method])[method].mean
        out[method] = {"formula": _mean_cosine(Sc @ W, Tc), "tiebias.align.maps": lib,
                       "max |W^T W - I|": float(np.abs(W.T @ W - np.eye(d)).max())}
    return pd.DataFrame(out).T.rename_axis("map")
