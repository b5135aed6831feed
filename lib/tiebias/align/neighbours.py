"""Cosine nearest neighbours of every token of a matrix (in blocks, memory O(V k)), and how much two matrices'
neighbourhoods agree (Table 5)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from tiebias.align.maps import F64, Matrix, as_matrix
from tiebias.config.checks import is_int


def check_knn_k(knn_k: Any, n_tokens: int | None = None, name: str = "knn_k") -> int | None:
    """Validate a neighbourhood size: None (no KNN column) or an int in 1..n_tokens-1; errors name ``name``."""
    if knn_k is not None and (not is_int(knn_k, numpy_ok=True) or knn_k < 1
                              or (n_tokens is not None and knn_k > n_tokens - 1)):
        top = "n_tokens - 1" if n_tokens is None else n_tokens - 1
        raise ValueError(f"{name}: {knn_k!r} is not allowed; need None (no KNN overlap) or an integer between 1 "
                         f"and {top} (the shared tokens minus one)")
    return None if knn_k is None else int(knn_k)


def knn_overlap(a: Matrix, b: Matrix, k: int = 10, *, chunk: int = 4096) -> tuple[float, Tensor]:
    """Mean and per-token overlap |N_k^A(i) & N_k^B(i)| / k of cosine nearest neighbours (self excluded) of two
    matrices whose rows are the same tokens."""
    check_knn_k(k, len(a), "k")
    return neighbour_overlap(nearest(a, k, chunk=chunk), nearest(b, k, chunk=chunk))


def _fold(vals: Tensor, idx: Tensor, r0: int, sims: Tensor, c0: int) -> None:
    """Fold ``sims[r, c] = cos(r0 + r, c0 + c)`` into the running top-k of rows r0.. (kept sorted, best first)."""
    k = vals.shape[1]
    bv, bi = sims.topk(min(k, sims.shape[1]), dim=1)
    r1 = r0 + sims.shape[0]
    top, pos = torch.cat([vals[r0:r1], bv], 1).topk(k, dim=1)
    idx[r0:r1] = torch.cat([idx[r0:r1], bi + c0], 1).gather(1, pos)
    vals[r0:r1] = top


def nearest(m: Matrix, k: int = 10, *, chunk: int = 4096) -> Tensor:
    """Ids of each row's k (checked by the caller: :func:`check_knn_k`) most cosine-similar other rows, [V, k], order
    within a row not meaningful, from ``chunk x chunk`` blocks of the upper triangle serving their rows and columns."""
    x = as_matrix(m, "m")
    n, k = x.shape[0], int(k)
    norms = torch.linalg.vector_norm(x, dim=1)
    inv = torch.where(norms > 0, 1 / norms.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(norms))
    vals = torch.full((n, k), -math.inf, dtype=x.dtype, device=x.device)
    idx = torch.full((n, k), -1, dtype=torch.long, device=x.device)
    for i0 in range(0, n, chunk):
        xi = x[i0:i0 + chunk] * inv[i0:i0 + chunk, None]
        for j0 in range(i0, n, chunk):
            xj = xi if j0 == i0 else x[j0:j0 + chunk] * inv[j0:j0 + chunk, None]
            sims = xi @ xj.T
            if j0 == i0:
                sims.fill_diagonal_(-math.inf)
            _fold(vals, idx, i0, sims, j0)
            if j0 != i0:  # the block also serves its columns' rows
                _fold(vals, idx, j0, sims.T.contiguous(), i0)  # topk along contiguous rows is ~2x faster
    return idx


def neighbour_overlap(idx_a: Tensor, idx_b: Tensor) -> tuple[float, Tensor]:
    """Mean and per-token fraction of shared ids between two [V, k] neighbour lists."""
    n, k = idx_a.shape
    per = torch.empty(n, dtype=F64)
    step = max(1, (1 << 24) // (k * k))
    for i in range(0, n, step):
        x, y = idx_a[i:i + step], idx_b[i:i + step]
        per[i:i + step] = (x.unsqueeze(2) == y.unsqueeze(1)).any(2).sum(1).to(F64) / k
    return float(per.mean()), per

