"""What every metric does first (check a ``[tokens, width]`` argument, stream its rows in chunks, row-wise cosine), in
one place so alignment, neighbours and token statistics agree on validation and precision."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

Matrix = Tensor | np.ndarray

F64 = torch.float64
CHUNK_BYTES = 1 << 25  # 32 MiB of float64 per streamed row chunk


def chunk_rows(width: int) -> int:
    """Rows per streamed chunk of a ``width``-wide matrix: CHUNK_BYTES of float64, at least 256."""
    return max(256, CHUNK_BYTES // (8 * width))


def as_matrix(x: Any, name: str) -> Tensor:
    """A 2-D, non-empty, finite floating tensor (numpy arrays are wrapped without a copy)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [tokens, width] matrix, got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)})")
    x = x.detach()
    if not x.is_floating_point() or x.dtype in (torch.float16, torch.bfloat16):
        x = x.to(torch.float32 if x.is_floating_point() else F64)
    step = max(1, CHUNK_BYTES // (8 * x.shape[1]))  # isfinite on the whole matrix allocates ~1.7x it
    for blk in row_blocks(x, None, step):
        # a NaN/inf entry makes the block sum non-finite; only then (or on overflow) check entrywise
        if not math.isfinite(float(blk.sum())) and not bool(torch.isfinite(blk).all()):
            raise ValueError(f"{name} contains NaN or infinite values")
    return x


def row_blocks(x: Tensor, rows: Tensor | None, chunk: int) -> Iterator[Tensor]:
    """Row blocks of ``x`` (all rows, or the given row indices) in its own dtype; may be views."""
    if rows is None:
        for i in range(0, x.shape[0], chunk):
            yield x[i:i + chunk]
    else:
        for i in range(0, rows.numel(), chunk):
            yield x[rows[i:i + chunk]]


def row_blocks_f64(x: Tensor, rows: Tensor | None, chunk: int) -> Iterator[Tensor]:
    """Row blocks as fresh float64 tensors (safe to modify in place)."""
    for blk in row_blocks(x, rows, chunk):
        yield blk.to(F64, copy=True)


def cosine_rows(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine (sums in the inputs' dtype, returned as float64); a zero row scores 0."""
    dot = (a * b).sum(1).to(F64)
    den = torch.linalg.vector_norm(a, dim=1).to(F64) * torch.linalg.vector_norm(b, dim=1).to(F64)
    return torch.where(den > 0, dot / den.clamp_min(torch.finfo(F64).tiny), torch.zeros_like(dot))

