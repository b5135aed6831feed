"""Toy problems for the notebooks' "how it works" cells: the project's own code (``GradientProvenance``,
``align.maps``) on a few dozen tokens, in under a second."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch

from tiebias.align import maps
from tiebias.config.checks import is_int
from tiebias.config.training import check_factor
from tiebias.models.build import build
from tiebias.train.gradients import GradientProvenance

TOY_VOCAB = 64
"""Toy vocabulary: small enough that a batch of 128 Zipf-distributed tokens leaves many tokens unseen."""


def toy_batch(vocab: int = TOY_VOCAB, shape: tuple[int, int] = (4, 32), seed: int = 0) -> torch.Tensor:
    """Token ids drawn from a Zipf-like law (p ~ 1/rank), as in text: a few frequent tokens, many rare ones."""
    if not is_int(vocab) or vocab < 2:
        raise ValueError(f"vocab: {vocab!r} is not a vocabulary size; need an int >= 2")
    p = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(p / p.sum(), shape[0] * shape[1], replacement=True, generator=gen).view(shape)


def _path_grads(input_factor: float = 1.0, vocab: int = TOY_VOCAB, seed: int = 0) -> tuple[dict[str, torch.Tensor],
                                                                                            torch.Tensor, Any]:
    """One backward pass of a fresh tiny tied model on the toy batch: per-path gradients, batch, PathStats."""
    model = build("tiny", vocab_size=vocab, seed=seed)
    x = toy_batch(vocab, seed=seed)
    with GradientProvenance(model, input_factor=input_factor) as prov:
        model(input_ids=x, labels=x).loss.backward()
        grads = {k: v.detach().clone() for k, v in prov.path_grads().items() if v is not None}
        stats = prov.pop()
    grads["total"] = model.get_input_embeddings().weight.grad.detach().clone()
    return grads, x, stats


def gradient_split(vocab: int = TOY_VOCAB, seed: int = 0) -> pd.DataFrame:
    """Per-token L2 norm of the shared matrix's gradient through each path, for one toy batch.

    Args:
        vocab: the toy vocabulary size (an int >= 2).
        seed: seeds the tiny model's initialisation and the toy batch (:func:`toy_batch`).

    Returns:
        One row per occurrence group (index ``occurrences in the batch``): ``tokens`` (rows in the group), and the
        mean ``input-path row norm`` and ``output-path row norm``.

    Rows are tokens grouped by how often they occur in the batch (0, 1-2, 3-9, 10+): the input lookup
    only reaches rows of tokens present, the output projection reaches every row through the softmax.
    """
    grads, x, _ = _path_grads(vocab=vocab, seed=seed)
    counts = torch.bincount(x.flatten(), minlength=vocab).numpy()
    rows = pd.DataFrame({"count in batch": counts,
                         "input-path row norm": grads["input"].norm(dim=1).numpy(),
                         "output-path row norm": grads["output"].norm(dim=1).numpy()})
    group = pd.cut(rows["count in batch"], [-1, 0, 2, 9, np.inf], labels=["0 (absent)", "1-2", "3-9", "10+"])
    table = rows.groupby(group, observed=True).agg(
        tokens=("count in batch", "size"), **{c: (c, "mean") for c in rows.columns[1:]})
    return table.rename_axis("occurrences in the batch")


def gradient_split_summary(vocab: int = TOY_VOCAB, seed: int = 0) -> dict[str, float]:
    """Whole-matrix numbers of the toy split: rows each path reaches, path norms, output share, exactness.

    Args:
        vocab, seed: as in :func:`gradient_split` (the same toy model and batch).

    Returns:
        A dict: ``vocabulary``, ``tokens in batch``, ``distinct tokens in batch``, ``rows reached by input path``,
        ``rows reached by output path``, ``input-path norm``, ``output-path norm``, ``output share`` and
        ``max |input + output - W.grad|`` (how exactly the two paths add up to the gradient).
    """
    grads, x, stats = _path_grads(vocab=vocab, seed=seed)
    gap = (grads["input"] + grads["output"] - grads["total"]).abs().max().item()
    return {"vocabulary": vocab, "tokens in batch": x.numel(), "distinct tokens in batch": int(x.unique().numel()),
            "rows reached by input path": stats.input_rows,
            "rows reached by output path": int((grads["output"].abs().sum(1) > 0).sum()),
            "input-path norm": stats.input_norm, "output-path norm": stats.output_norm,
            "output share": stats.output_share, "max |input + output - W.grad|": gap}


def factor_effect(factors: tuple[float, ...] = (1.0, 5.0), vocab: int = TOY_VOCAB, seed: int = 0) -> pd.DataFrame:
    """Path norms after one backward pass with the input path multiplied by each k (same model, same batch).

    Args:
        factors: the input-path factors k (each checked as a gradient factor).
        vocab, seed: as in :func:`gradient_split`.

    Returns:
        One row per k (index ``k``): ``input-path norm``, ``output-path norm``, ``output share`` and
        ``max |W.grad - (k g_in + g_out)|``.

    The input-path norm grows exactly k-fold, the output path is untouched, and W.grad = k g_in + g_out.
    """
    rows = {}
    base, _, _ = _path_grads(1.0, vocab, seed)
    for k in factors:
        check_factor("factors", k)
        grads, _, stats = _path_grads(k, vocab, seed)
        expected = k * base["input"] + base["output"]
        rows[k] = {"input-path norm": stats.input_norm, "output-path norm": stats.output_norm,
                   "output share": stats.output_share,
                   "max |W.grad - (k g_in + g_out)|": (grads["total"] - expected).abs().max().item()}
    return pd.DataFrame(rows).T.rename_axis("k")


def source_of(obj: Callable[..., Any]) -> str:
    """The source text of a function or method (:func:`inspect.getsource`).

    Args:
        obj: the function or method.

    Returns:
        Its source code.
    """
    return inspect.getsource(obj)


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
    """Mean cosine of each map computed from the formulas and by ``tiebias.align.maps.align``: they must agree.

    Args:
        n, d, noise, seed: the toy problem's rows, width, noise level and seed (:func:`toy_alignment`).

    Returns:
        One row per map (index ``map``: ``identity``, ``orthogonal``, ``linear``): ``formula``, ``tiebias.align.maps``
        (the two mean cosines) and ``max |W^T W - I|``.

    The last column reports how far the fitted map is from orthogonal (0 up to rounding for the orthogonal map).
    """
    S, T, _ = toy_alignment(n, d, noise, seed)
    formulas = map_formulas(S, T)
    Sc, Tc = S - S.mean(0), T - T.mean(0)
    out = {}
    for method, W in formulas.items():
        lib = maps.align(torch.from_numpy(S), torch.from_numpy(T), method).mean
        out[method] = {"formula": _mean_cosine(Sc @ W, Tc), "tiebias.align.maps": lib,
                       "max |W^T W - I|": float(np.abs(W.T @ W - np.eye(d)).max())}
    return pd.DataFrame(out).T.rename_axis("map")
