"""The alignment score (Table 1, Figure 1), in the plain form notebook 02 shows and checks against this one, which
streams row chunks (fitting sums in float64, no full float64 copy) and applies the map at the inputs' precision."""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tiebias.config.checks import is_int
from tiebias.config.choices import METHODS

Matrix = Tensor | np.ndarray
F64 = torch.float64


def chunk_rows(width: int) -> int:
    """Rows per streamed chunk of a ``width``-wide matrix: 32 MiB of float64, at least 256."""
    return max(256, (1 << 25) // (8 * width))


def as_matrix(x: Any, name: str) -> Tensor:
    """A 2-D, non-empty, finite floating tensor (numpy arrays are wrapped without a copy; half precision -> float32)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D [tokens, width] matrix, got shape {tuple(x.shape)}")
    x = x.detach()
    if not x.is_floating_point() or x.dtype in (torch.float16, torch.bfloat16):
        x = x.to(torch.float32 if x.is_floating_point() else F64)
    for blk in row_blocks(x, None, chunk_rows(x.shape[1])):  # isfinite on the whole matrix allocates ~1.7x it
        if not math.isfinite(float(blk.sum())) and not bool(torch.isfinite(blk).all()):  # inf sum: check entries
            raise ValueError(f"{name} contains NaN or infinite values")
    return x


def row_blocks(x: Tensor, rows: Tensor | None, chunk: int, dtype: torch.dtype | None = None) -> Iterator[Tensor]:
    """Row blocks of ``x`` (all rows, or the given row indices): views in its own dtype, or fresh ``dtype`` copies."""
    n = x.shape[0] if rows is None else rows.numel()
    for i in range(0, n, chunk):
        blk = x[i:i + chunk] if rows is None else x[rows[i:i + chunk]]
        yield blk if dtype is None else blk.to(dtype, copy=True)


def cosine_rows(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine (sums in the inputs' dtype, returned as float64); a zero row scores 0."""
    dot = (a * b).sum(1).to(F64)
    den = torch.linalg.vector_norm(a, dim=1).to(F64) * torch.linalg.vector_norm(b, dim=1).to(F64)
    return torch.where(den > 0, dot / den.clamp_min(torch.finfo(F64).tiny), torch.zeros_like(dot))


AlignResult = namedtuple("AlignResult", "mean per_token")
"""Mean and per-token (float64) cosine after mapping source onto target."""


def align_all(source: Matrix, target: Matrix, methods: Sequence[str] = METHODS, *, heldout_folds: int = 0,
              seed: int = 0) -> dict[str, AlignResult]:
    """Mean cosine of the mapped, centred source rows and the target rows per method (``identity``, ``orthogonal``,
    ``linear``), in-sample or (``heldout_folds=k >= 2``) fitted on k-1 seeded folds of tokens, scored on the other."""
    methods = tuple(dict.fromkeys(methods))
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ValueError(f"methods: {', '.join(map(repr, bad)) or 'none'} given; each method must be one of {METHODS}")
    S, T = as_matrix(source, "source"), as_matrix(target, "target")
    n = S.shape[0]
    if T.shape[0] != n:
        raise ValueError(f"source and target must have the same number of rows (tokens): {n} vs {T.shape[0]}; "
                         "match the vocabularies first (tokenizers.match_tokens)")
    if n < 2:
        raise ValueError(f"source: need at least 2 tokens to centre and align, got {n}")
    if "identity" in methods and S.shape[1] != T.shape[1]:
        raise ValueError(f"method 'identity' needs equal widths, got source width {S.shape[1]} and target "
                         f"width {T.shape[1]}; use 'orthogonal' or 'linear'")
    k = heldout_folds
    if not is_int(k, numpy_ok=True) or (k != 0 and not (2 <= k <= n and n - math.ceil(n / k) >= 2)):
        raise ValueError(f"heldout_folds: {k!r} is not allowed; need 0 (in-sample) or an int k >= 2 that leaves "
                         f"at least 2 of the {n} tokens to fit each fold's map")
    k = int(k)
    cdt = F64 if F64 in (S.dtype, T.dtype) else torch.float32
    chunk = chunk_rows(max(S.shape[1], T.shape[1]))
    gram, cross = "linear" in methods, "orthogonal" in methods or "linear" in methods
    ref_s, ref_t = _column_mean(S, chunk), _column_mean(T, chunk)
    scores = {m: torch.full((n,), math.nan, dtype=F64) for m in methods}
    if k == 0:
        if cross:
            st = _accumulate(S, T, None, ref_s, ref_t, gram, cross, chunk)
        else:  # identity in-sample: the centring is the column mean itself
            st = [n, torch.zeros_like(ref_s), torch.zeros_like(ref_t), None, None]
        _score(S, T, None, *_fit(st, methods, ref_s, ref_t), cdt, chunk, scores)
    else:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
        folds = [perm[f::k].sort().values for f in range(k)]
        stats = [_accumulate(S, T, rows, ref_s, ref_t, gram, cross, chunk) for rows in folds]
        for f, rows in enumerate(folds):
            parts = [s for g, s in enumerate(stats) if g != f]  # the sums over the other folds' rows
            st = [sum(p[0] for p in parts)] + [None if parts[0][i] is None else
                                               torch.stack([p[i] for p in parts]).sum(0) for i in range(1, 5)]
            _score(S, T, rows, *_fit(st, methods, ref_s, ref_t), cdt, chunk, scores)
    return {m: AlignResult(float(scores[m].mean()), scores[m]) for m in methods}


def _column_mean(x: Tensor, chunk: int) -> Tensor:
    """Column means in float64 over row blocks (the reference point the sums are taken about)."""
    total = torch.zeros(x.shape[1], dtype=F64, device=x.device)
    for blk in row_blocks(x, None, chunk):
        total += blk.sum(0).to(F64)  # native-dtype reduction: a float64 upcast first is 4x slower
    return total / x.shape[0]


def _accumulate(S: Tensor, T: Tensor, rows: Tensor | None, ref_s: Tensor, ref_t: Tensor, need_gram: bool,
                need_cross: bool, chunk: int) -> list[Any]:
    """n and the sums of the given rows (all when None) about ``ref_s``/``ref_t``: s, t, s s^T, s t^T (float64)."""
    ds, dt = S.shape[1], T.shape[1]
    sums: list[Any] = [torch.zeros(*shape, dtype=F64, device=S.device) for shape in ((ds,), (dt,))]
    sums += [torch.zeros(ds, ds, dtype=F64, device=S.device) if need_gram else None,
             torch.zeros(ds, dt, dtype=F64, device=S.device) if need_cross else None]
    for xs, xt in zip(row_blocks(S, rows, chunk, F64), row_blocks(T, rows, chunk, F64), strict=True):
        xs -= ref_s
        xt -= ref_t
        sums[0] += xs.sum(0)
        sums[1] += xt.sum(0)
        if need_gram:
            sums[2].addmm_(xs.T, xs)
        if need_cross:
            sums[3].addmm_(xs.T, xt)
    return [S.shape[0] if rows is None else int(rows.numel()), *sums]


def _fit(st: list[Any], methods: Sequence[str], ref_s: Tensor,
         ref_t: Tensor) -> tuple[Tensor, Tensor, dict[str, Tensor | None]]:
    """Column means and the requested maps, from the sums of the fitting rows."""
    n, sum_s, sum_t, gram, cross = st
    m_s, m_t = sum_s / n, sum_t / n
    cross = None if cross is None else cross - n * torch.outer(m_s, m_t)
    maps: dict[str, Tensor | None] = {}
    for m in methods:
        if m == "orthogonal":
            maps[m] = _procrustes(cross)
        elif m == "linear":
            maps[m] = _least_squares(gram - n * torch.outer(m_s, m_s), cross, n)
        else:
            maps[m] = None
    return ref_s + m_s, ref_t + m_t, maps


@contextmanager
def _one_thread() -> Iterator[None]:
    """Small dense decompositions single-threaded (threaded LAPACK on a d x d matrix is latency-bound, far slower on
    a busy machine); torch's thread count is process-wide, so it is restored right after."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _procrustes(C: Tensor) -> Tensor:
    """The polar factor U V^T of C = U S V^T as C (C^T C)^(-1/2), from an eigh of the smaller Gram matrix (faster than
    an SVD); the SVD where C is (nearly) rank-deficient, so that W is not orthogonal or NaN."""
    if C.shape[0] < C.shape[1]:
        return _procrustes(C.T).T
    with _one_thread():
        lam, V = torch.linalg.eigh(C.T @ C)
    W = ((C @ V) / lam.sqrt()) @ V.T
    if float((W.T @ W - torch.eye(C.shape[1], dtype=C.dtype, device=C.device)).abs().max()) < 1e-9:
        return W
    with _one_thread():
        U, _, Vh = torch.linalg.svd(C, full_matrices=False)
    return U @ Vh


def _least_squares(G: Tensor, C: Tensor, n: int) -> Tensor:
    """Minimum-norm M solving G M = C (normal equations of S_c M ~ T_c): Cholesky when G is comfortably positive
    definite, else an eigh pseudo-inverse dropping numerically zero directions (as ``numpy.linalg.lstsq`` does)."""
    with _one_thread():
        L, info = torch.linalg.cholesky_ex(G)
        if int(info) == 0 and float(L.diagonal().square().min()) > 1e-10 * float(G.diagonal().max()):
            return torch.cholesky_solve(C, L)
        lam, Q = torch.linalg.eigh(G)
    keep = lam > lam[-1] * max(n, G.shape[0]) * torch.finfo(F64).eps * 16
    Qk = Q[:, keep]
    return Qk @ ((Qk.T @ C) / lam[keep].unsqueeze(1))


def _score(S: Tensor, T: Tensor, rows: Tensor | None, mean_s: Tensor, mean_t: Tensor,
           maps: dict[str, Tensor | None], cdt: torch.dtype, chunk: int, out: dict[str, Tensor]) -> None:
    """Per-token cosine of mapped source and target rows at precision ``cdt``, written into ``out[method][rows]``."""
    maps_c = {m: (None if w is None else w.to(cdt)) for m, w in maps.items()}
    ms, mt = mean_s.to(cdt), mean_t.to(cdt)
    start = 0
    for xs, xt in zip(row_blocks(S, rows, chunk), row_blocks(T, rows, chunk), strict=True):
        xs, xt = xs.to(cdt) - ms, xt.to(cdt) - mt
        stop = start + xs.shape[0]
        where = slice(start, stop) if rows is None else rows[start:stop]
        for m, w in maps_c.items():
            out[m][where] = cosine_rows(xs if w is None else xs @ w, xt).cpu()
        start = stop
