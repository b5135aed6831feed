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


def _fold_dense(vals: Tensor, idx: Tensor, r0: int, sims: Tensor, c0: int) -> None:
    """Fold ``sims[r, c] = cos(r0 + r, c0 + c)`` into the running top-k of rows r0.. (kept sorted, best first)."""
    k = vals.shape[1]
    bv, bi = sims.topk(min(k, sims.shape[1]), dim=1)
    r1 = r0 + sims.shape[0]
    top, pos = torch.cat([vals[r0:r1], bv], 1).topk(k, dim=1)
    idx[r0:r1] = torch.cat([idx[r0:r1], bi + c0], 1).gather(1, pos)
    vals[r0:r1] = top


def _fold_candidates(vals: Tensor, idx: Tensor, rows: Tensor, ids: Tensor, v: Tensor) -> None:
    """Fold a few candidates (row ``rows[i]`` gets neighbour ``ids[i]`` at cosine ``v[i]``; rows sorted) into the top-k."""
    if rows.numel() == 0:
        return
    k = vals.shape[1]
    touched, counts = torch.unique_consecutive(rows, return_counts=True)
    first = torch.cumsum(counts, 0) - counts
    slot = torch.repeat_interleave(torch.arange(touched.numel(), device=rows.device), counts)
    pos = torch.arange(rows.numel(), device=rows.device) - first[slot]
    width = int(counts.max())
    pv = torch.full((touched.numel(), width), -math.inf, dtype=vals.dtype, device=vals.device)
    pi = torch.full((touched.numel(), width), -1, dtype=torch.long, device=vals.device)
    pv[slot, pos] = v
    pi[slot, pos] = ids
    top, p = torch.cat([vals[touched], pv], 1).topk(k, dim=1)
    idx[touched] = torch.cat([idx[touched], pi], 1).gather(1, p)
    vals[touched] = top


def _fold_block(vals: Tensor, idx: Tensor, i0: int, j0: int, sims: Tensor) -> None:
    """Fold one block of similarities into the top-k of its rows (and, off the diagonal, of its columns): once rows
    have k neighbours only the few entries above their k-th best are folded (ties keep the earlier neighbour)."""
    ri, rj = slice(i0, i0 + sims.shape[0]), slice(j0, j0 + sims.shape[1])
    thr_r = vals[ri, -1]
    if bool(torch.isfinite(thr_r).all()):
        r, c = (sims > thr_r[:, None]).nonzero(as_tuple=True)
        _fold_candidates(vals, idx, r + i0, c + j0, sims[r, c])
    else:
        _fold_dense(vals, idx, i0, sims, j0)
    if i0 == j0:
        return
    thr_c = vals[rj, -1]
    if bool(torch.isfinite(thr_c).all()):
        r, c = (sims > thr_c[None, :]).nonzero(as_tuple=True)
        order = torch.argsort(c, stable=True)
        r, c = r[order], c[order]
        _fold_candidates(vals, idx, c + j0, r + i0, sims[r, c])
    else:
        _fold_dense(vals, idx, j0, sims.T.contiguous(), i0)  # topk along contiguous rows is ~2x faster


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
            _fold_block(vals, idx, i0, j0, sims)
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

