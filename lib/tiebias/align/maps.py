"""The paper's alignment score (Table 1, Figure 1): centre two matrices, map the source onto the target (identity,
orthogonal or linear; in-sample or k-fold held-out) and score each token by cosine. The fitting sums are accumulated
in float64 over row chunks (no full float64 copy); the map is applied at the inputs' precision."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tiebias.align.embeddings import Embeddings, Which, check_which, match_vocab
from tiebias.align.matrices import F64, Matrix, as_matrix, chunk_rows, cosine_rows, row_blocks, row_blocks_f64
from tiebias.align.neighbours import check_knn_k, knn_overlap
from tiebias.config.checks import is_int
from tiebias.config.choices import METHODS

_EPS64 = torch.finfo(torch.float64).eps
_PIVOT_TOL = 1e-10  # Cholesky pivots below this (relative) fall back to a pseudo-inverse
_POLAR_COND = 1e-12  # smallest eigenvalue ratio of C^T C for the eigh route to the polar factor


@dataclass(repr=False)
class AlignResult:
    """Mean and per-token cosine after mapping source onto target (``heldout``: out-of-fold scores)."""

    method: str
    mean: float
    per_token: Tensor
    n_tokens: int
    heldout: bool
    folds: int = 0

    def __repr__(self) -> str:
        how = f"{self.folds}-fold held-out" if self.heldout else "in-sample"
        return f"AlignResult({self.method}: mean={self.mean:.4f}, n={self.n_tokens}, {how})"


def align(source: Matrix, target: Matrix, method: str, *, heldout_folds: int = 0,
          seed: int = 0) -> AlignResult:
    """Mean cosine between the mapped, centred source rows and the target rows: ``identity`` (equal widths),
    ``orthogonal`` (Procrustes W = U V^T of S_c^T T_c = U S V^T) or ``linear`` (least squares S_c M ~ T_c).
    ``heldout_folds=k >= 2`` fits map and centring on k-1 folds of tokens (seeded) and scores the other, per fold."""
    _check_method(method)
    return align_all(source, target, (method,), heldout_folds=heldout_folds, seed=seed)[method]


def align_all(source: Matrix, target: Matrix, methods: Sequence[str] = METHODS, *, heldout_folds: int = 0,
              seed: int = 0) -> dict[str, AlignResult]:
    """``align`` for several methods at once, sharing the passes over the data (same results)."""
    methods = tuple(dict.fromkeys(methods))
    if not methods:
        raise ValueError(f"methods must name at least one of {METHODS}")
    for m in methods:
        _check_method(m)
    S = as_matrix(source, "source")
    T = as_matrix(target, "target")
    n = S.shape[0]
    if T.shape[0] != n:
        raise ValueError(f"source and target must have the same number of rows (tokens): "
                         f"{n} vs {T.shape[0]}; match the vocabularies first (match_vocab)")
    if n < 2:
        raise ValueError(f"source: need at least 2 tokens to centre and align, got {n}")
    if "identity" in methods and S.shape[1] != T.shape[1]:
        raise ValueError(f"method 'identity' needs equal widths, got source width {S.shape[1]} and target "
                         f"width {T.shape[1]}; use 'orthogonal' or 'linear'")
    k = _check_folds(heldout_folds, n)
    cdt = F64 if F64 in (S.dtype, T.dtype) else torch.float32
    chunk = chunk_rows(max(S.shape[1], T.shape[1]))
    need_cross = "orthogonal" in methods or "linear" in methods
    need_gram = "linear" in methods
    ref_s, ref_t = _column_mean(S, chunk), _column_mean(T, chunk)
    scores = {m: torch.full((n,), math.nan, dtype=F64) for m in methods}

    if k == 0:
        if need_cross:
            st = _accumulate(S, T, None, ref_s, ref_t, need_gram, need_cross, chunk)
        else:  # identity in-sample: the centring is the column mean itself
            st = _Stats(n, torch.zeros_like(ref_s), torch.zeros_like(ref_t), None, None)
        mean_s, mean_t, maps = _fit(st, methods, ref_s, ref_t)
        _score(S, T, None, mean_s, mean_t, maps, cdt, chunk, scores)
    else:
        gen = torch.Generator().manual_seed(int(seed))
        perm = torch.randperm(n, generator=gen)
        folds = [perm[f::k].sort().values for f in range(k)]
        stats = [_accumulate(S, T, rows, ref_s, ref_t, need_gram, need_cross, chunk) for rows in folds]
        for f, rows in enumerate(folds):
            st = _combine([s for g, s in enumerate(stats) if g != f])
            mean_s, mean_t, maps = _fit(st, methods, ref_s, ref_t)
            _score(S, T, rows, mean_s, mean_t, maps, cdt, chunk, scores)
    return {m: AlignResult(method=m, mean=float(scores[m].mean()), per_token=scores[m], n_tokens=n,
                           heldout=k > 0, folds=k) for m in methods}


def _check_method(method: str) -> None:
    """Refuse a method name outside ``METHODS``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _check_folds(k: int, n: int) -> int:
    """The fold count as an int: 0 (in-sample) or 2..n, leaving at least 2 fitting tokens per fold."""
    if not is_int(k, numpy_ok=True):
        raise ValueError(f"heldout_folds must be an int (0 = in-sample, >= 2 = k-fold), got {k!r}")
    k = int(k)
    if k == 0:
        return 0
    if k < 2:
        raise ValueError(f"heldout_folds must be 0 (in-sample) or >= 2, got {k}")
    if k > n:
        raise ValueError(f"heldout_folds={k} exceeds the number of tokens ({n})")
    if n - math.ceil(n / k) < 2:
        raise ValueError(f"heldout_folds={k} leaves fewer than 2 fitting tokens out of {n}")
    return k


def _column_mean(x: Tensor, chunk: int) -> Tensor:
    """Column means in float64, streamed over row blocks (the reference point the sums are taken about)."""
    total = torch.zeros(x.shape[1], dtype=F64, device=x.device)
    for blk in row_blocks(x, None, chunk):
        total += blk.sum(0).to(F64)  # native-dtype reduction: a float64 upcast first is 4x slower
    return total / x.shape[0]


@dataclass
class _Stats:
    """Sums about a fixed reference point: n, sum(s-r), sum(t-r), sum(s-r)(s-r)^T, sum(s-r)(t-r)^T."""

    n: int
    sum_s: Tensor
    sum_t: Tensor
    gram: Tensor | None
    cross: Tensor | None


def _accumulate(S: Tensor, T: Tensor, rows: Tensor | None, ref_s: Tensor, ref_t: Tensor, need_gram: bool,
                need_cross: bool, chunk: int) -> _Stats:
    """Sums of the given rows (all when ``rows`` is None) about ``ref_s``/``ref_t``, in float64 blocks."""
    ds, dt = S.shape[1], T.shape[1]
    dev = S.device
    sum_s = torch.zeros(ds, dtype=F64, device=dev)
    sum_t = torch.zeros(dt, dtype=F64, device=dev)
    gram = torch.zeros(ds, ds, dtype=F64, device=dev) if need_gram else None
    cross = torch.zeros(ds, dt, dtype=F64, device=dev) if need_cross else None
    for xs, xt in zip(row_blocks_f64(S, rows, chunk), row_blocks_f64(T, rows, chunk), strict=True):
        xs -= ref_s
        xt -= ref_t
        sum_s += xs.sum(0)
        sum_t += xt.sum(0)
        if gram is not None:
            gram.addmm_(xs.T, xs)
        if cross is not None:
            cross.addmm_(xs.T, xt)
    n = S.shape[0] if rows is None else int(rows.numel())
    return _Stats(n, sum_s, sum_t, gram, cross)


def _combine(parts: list[_Stats]) -> _Stats:
    """Sums over several folds' rows: the fitting set of one held-out fold."""
    def total(xs: list[Tensor | None]) -> Tensor | None:
        """Sum of optional matrices (None when they were not accumulated)."""
        return None if xs[0] is None else torch.stack(xs).sum(0)  # type: ignore[arg-type]

    return _Stats(sum(p.n for p in parts), torch.stack([p.sum_s for p in parts]).sum(0),
                  torch.stack([p.sum_t for p in parts]).sum(0), total([p.gram for p in parts]),
                  total([p.cross for p in parts]))


def _fit(st: _Stats, methods: Sequence[str], ref_s: Tensor,
         ref_t: Tensor) -> tuple[Tensor, Tensor, dict[str, Tensor | None]]:
    """Column means and the requested maps, from the sums of the fitting rows."""
    m_s, m_t = st.sum_s / st.n, st.sum_t / st.n
    maps: dict[str, Tensor | None] = {}
    cross = None if st.cross is None else st.cross - st.n * torch.outer(m_s, m_t)
    for m in methods:
        if m == "identity":
            maps[m] = None
        elif m == "orthogonal":
            assert cross is not None
            maps[m] = _procrustes(cross)
        else:
            assert st.gram is not None and cross is not None
            gram = st.gram - st.n * torch.outer(m_s, m_s)
            maps[m] = _least_squares(gram, cross, st.n)
    return ref_s + m_s, ref_t + m_t, maps


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run small dense decompositions single-threaded (threaded LAPACK on a d x d matrix is latency-bound and far
    slower on a busy machine); torch's thread count is process-wide, so it is restored right after."""
    old = torch.get_num_threads()
    if old == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _procrustes(C: Tensor) -> Tensor:
    """Semi-orthogonal W maximising trace(W^T C): the polar factor U V^T of C = U S V^T, as C (C^T C)^(-1/2) from an
    eigendecomposition of the smaller Gram matrix (faster than an SVD), the SVD when C is (nearly) rank-deficient."""
    ds, dt = C.shape
    if ds < dt:
        return _procrustes(C.T).T
    with _one_thread():
        lam, V = torch.linalg.eigh(C.T @ C)
    if lam[-1] > 0 and lam[0] > _POLAR_COND * lam[-1]:
        W = ((C @ V) / lam.sqrt()) @ V.T
        eye = torch.eye(dt, dtype=C.dtype, device=C.device)
        if float((W.T @ W - eye).abs().max()) < 1e-9:
            return W
    with _one_thread():
        U, _, Vh = torch.linalg.svd(C, full_matrices=False)
    return U @ Vh


def _least_squares(G: Tensor, C: Tensor, n: int) -> Tensor:
    """Minimum-norm M solving G M = C (normal equations of S_c M ~ T_c): Cholesky when G is comfortably positive
    definite, else an eigh pseudo-inverse dropping numerically zero directions (as ``numpy.linalg.lstsq`` does)."""
    d = G.shape[0]
    scale = float(G.diagonal().max())
    if scale <= 0:
        return torch.zeros_like(C)
    with _one_thread():
        L, info = torch.linalg.cholesky_ex(G)
        if int(info) == 0 and float(L.diagonal().square().min()) > _PIVOT_TOL * scale:
            return torch.cholesky_solve(C, L)
        lam, Q = torch.linalg.eigh(G)
    keep = lam > lam[-1] * max(n, d) * _EPS64 * 16
    Qk = Q[:, keep]
    return Qk @ ((Qk.T @ C) / lam[keep].unsqueeze(1))


def _score(S: Tensor, T: Tensor, rows: Tensor | None, mean_s: Tensor, mean_t: Tensor,
           maps: dict[str, Tensor | None], cdt: torch.dtype, chunk: int, out: dict[str, Tensor]) -> None:
    """Per-token cosine of mapped source and target rows at precision ``cdt``, written into ``out[method][rows]``."""
    maps_c = {m: (None if w is None else w.to(cdt)) for m, w in maps.items()}
    ms, mt = mean_s.to(cdt), mean_t.to(cdt)
    start = 0
    for xs, xt in zip(row_blocks(S, rows, chunk), row_blocks(T, rows, chunk), strict=True):
        xs = xs.to(cdt) - ms
        xt = xt.to(cdt) - mt
        stop = start + xs.shape[0]
        where = slice(start, stop) if rows is None else rows[start:stop]
        for m, w in maps_c.items():
            mapped = xs if w is None else xs @ w
            out[m][where] = cosine_rows(mapped, xt).cpu()
        start = stop



def compare(a: Embeddings, b: Embeddings, which_a: Which, which_b: Which, methods: Sequence[str] = METHODS,
            heldout_folds: int = 0, *, seed: int = 0, allow_vocab_mismatch: bool = True,
            knn_k: int | None = None, return_scores: bool = False) -> dict[str, Any]:
    """One Table-1 row: ``a.<which_a>`` mapped onto ``b.<which_b>`` on their shared tokens (``identity`` NaN when the
    widths differ); ``knn_k`` adds ``knn@k``, ``return_scores`` adds ``per_token`` and ``token_ids`` (rows of ``a``)."""
    check_which(which_a, "which_a")
    check_which(which_b, "which_b")
    methods = tuple(dict.fromkeys(methods))
    for m in methods:
        _check_method(m)
    check_knn_k(knn_k)
    ia, ib, _ = match_vocab(a, b, allow=allow_vocab_mismatch)
    check_knn_k(knn_k, int(ia.numel()))
    S = a.matrix(which_a)
    T = b.matrix(which_b)
    if ia.numel() != S.shape[0] or not bool((ia == torch.arange(S.shape[0])).all()):
        S = S[ia]
    if ib.numel() != T.shape[0] or not bool((ib == torch.arange(T.shape[0])).all()):
        T = T[ib]
    run = [m for m in methods if not (m == "identity" and S.shape[1] != T.shape[1])]
    res = align_all(S, T, run, heldout_folds=heldout_folds, seed=seed) if run else {}
    row: dict[str, Any] = {"source": a.source, "source_matrix": which_a, "target": b.source,
                           "target_matrix": which_b, "source_tied": a.tied, "target_tied": b.tied,
                           "n_tokens": int(ia.numel()), "vocab_source": a.vocab_size,
                           "vocab_target": b.vocab_size, "heldout_folds": int(heldout_folds)}
    for m in methods:
        row[m] = res[m].mean if m in res else math.nan
    if knn_k is not None:
        row[f"knn@{knn_k}"] = knn_overlap(S, T, knn_k)[0]
    if return_scores:
        row["per_token"] = {m: r.per_token for m, r in res.items()}
        row["token_ids"] = ia
    return row

