"""Per-token statistics of one embedding matrix: row norm against corpus frequency (Figure 5), any per-token score in
frequency bins, and drift over training (Figure 3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr
from torch import Tensor

from tiebias.align.maps import F64, Matrix, as_matrix, cosine_rows
from tiebias.config.checks import is_int


def _counts(counts: Any, vocab_size: int) -> np.ndarray:
    """Token counts (array-like, one per token id, finite and non-negative) as int64."""
    arr = counts.detach().cpu().numpy() if isinstance(counts, Tensor) else np.asarray(counts)
    arr = arr.astype(np.float64, copy=False).reshape(-1)
    if arr.shape[0] != vocab_size:
        raise ValueError(f"counts has {arr.shape[0]} entries, expected one per token ({vocab_size})")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError("counts must be finite and non-negative")
    return arr.astype(np.int64)


@dataclass
class NormFrequency:
    """Per-token norm against log10 count (``table``) and their Spearman correlation over the seen tokens."""

    table: pd.DataFrame
    spearman: float
    n_seen: int
    n_unseen: int


def norm_frequency(emb_matrix: Matrix, counts: Any, *, tokens: Sequence[str] | None = None) -> NormFrequency:
    """Row norm (float64) and log10 corpus count of every token (Figure 5), with their rank correlation.

    Args:
        emb_matrix: the matrix, one row per token.
        counts: corpus count per token id.
        tokens: token strings, one per row (None: no ``token`` column).

    Returns:
        A :class:`NormFrequency`.
    """
    x = as_matrix(emb_matrix, "emb_matrix")
    norms = torch.linalg.vector_norm(x.to(F64), dim=1).cpu().numpy()
    c = _counts(counts, norms.shape[0])
    seen = c > 0
    with np.errstate(divide="ignore"):
        logf = np.where(seen, np.log10(np.maximum(c, 1)), np.nan)
    table = pd.DataFrame({"id": np.arange(norms.shape[0]), "count": c, "log10_freq": logf, "norm": norms,
                          "seen": seen})
    if tokens is not None:
        if len(tokens) != norms.shape[0]:
            raise ValueError(f"tokens has {len(tokens)} entries, expected {norms.shape[0]}")
        table.insert(1, "token", list(tokens))
    rho = spearmanr(logf[seen], norms[seen])[0] if seen.sum() > 2 else math.nan
    return NormFrequency(table, float(rho), int(seen.sum()), int((~seen).sum()))


def by_frequency(per_token_scores: Any, counts: Any, bins: int = 5) -> pd.DataFrame:
    """Count, mean, std and sem of a per-token score (NaN ignored) per bin: ``unseen``, then ``q1`` (rarest) upwards,
    quantile bins of the seen tokens' counts (ties together, so bins may be fewer or uneven).

    Args:
        per_token_scores: one score per token id.
        counts: corpus count per token id.
        bins: quantile bins of the seen tokens.

    Returns:
        One row per bin: ``bin``, ``count_min``, ``count_max``, ``n``, ``mean``, ``std``, ``sem``.
    """
    s = per_token_scores.detach().cpu().numpy() if isinstance(per_token_scores, Tensor) \
        else np.asarray(per_token_scores)
    s = s.astype(np.float64).reshape(-1)
    if not is_int(bins, numpy_ok=True) or bins < 1:
        raise ValueError(f"bins must be a positive int, got {bins!r}")
    c = _counts(counts, s.shape[0])
    seen = c > 0
    labels = np.full(s.shape[0], "unseen", dtype=object)
    if seen.any():
        ranks = pd.Series(c[seen]).rank(method="average")
        codes = pd.qcut(ranks, q=min(bins, int(seen.sum())), labels=False, duplicates="drop").to_numpy()
        labels[seen] = [f"q{int(q) + 1}" for q in codes]
    df = pd.DataFrame({"bin": labels, "count": c, "score": s})
    rows = []
    for b in ["unseen"] + sorted({x for x in labels if x != "unseen"}, key=lambda q: int(q[1:])):
        g = df[df["bin"] == b]
        if g.empty:
            continue
        sc = g["score"].dropna()
        rows.append({"bin": b, "count_min": int(g["count"].min()), "count_max": int(g["count"].max()),
                     "n": int(sc.size), "mean": float(sc.mean()) if sc.size else math.nan,
                     "std": float(sc.std(ddof=1)) if sc.size > 1 else math.nan})
    out = pd.DataFrame(rows)
    out["sem"] = out["std"] / np.sqrt(out["n"].clip(lower=1))
    return out


def evolution(checkpoints: Sequence[tuple[int, Matrix]]) -> pd.DataFrame:
    """Drift of one matrix over training (Figure 3), per checkpoint: mean per-token cosine to the earliest
    (``cos_to_init``) and previous one, ||W_t|| / ||W_0|| - 1 (``norm_change``) and ||W_t - W_0|| / ||W_0||."""
    items = sorted(((int(s), as_matrix(m, f"checkpoints[step={s}]")) for s, m in checkpoints), key=lambda t: t[0])
    steps = [s for s, _ in items]
    if not items or len(set(steps)) != len(steps):
        raise ValueError(f"checkpoints: need one matrix per step, got steps {steps}")
    for s, m in items:
        if m.shape != items[0][1].shape:
            raise ValueError(f"checkpoints: step {s} has shape {tuple(m.shape)}, step {steps[0]} has "
                             f"{tuple(items[0][1].shape)}")
    cdt = F64 if any(m.dtype == F64 for _, m in items) else torch.float32
    w0 = items[0][1].to(cdt)
    norm0 = math.sqrt(float(torch.linalg.vector_norm(w0, dim=1).to(F64).square().sum()))
    rows = []
    prev: Tensor | None = None
    for s, m in items:  # row reductions at the input precision, summed over rows in float64
        xm, n = m.to(cdt), m.shape[0]
        sq = float(torch.linalg.vector_norm(xm, dim=1).to(F64).square().sum())
        sqd = float(torch.linalg.vector_norm(xm - w0, dim=1).to(F64).square().sum())
        rows.append({"step": s, "cos_to_init": float(cosine_rows(xm, w0).sum()) / n,
                     "cos_to_prev": math.nan if prev is None else float(cosine_rows(xm, prev).sum()) / n,
                     "norm_change": math.sqrt(sq) / norm0 - 1 if norm0 > 0 else math.nan,
                     "dist_to_init": math.sqrt(sqd) / norm0 if norm0 > 0 else math.nan})
        prev = xm
    return pd.DataFrame(rows)
