"""Coding exercises, one per study notebook: the student writes a small function, a checker compares it with the
library's own version and says in plain words what is wrong.

Each exercise is defined once here (prompt, stub, hints, solution and a known-wrong answer for the tests), and
:func:`cells` renders it as notebook cells: the prompt, the stub the student edits, a check cell, and the folded
solution, whose strict check fails the notebook run if the solution or the library drifts.
"""

from __future__ import annotations

import ast
import html
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tiebias.align import maps
from tiebias.config.paths import NOTEBOOKS
from tiebias.lens.evaluate import kl_bits as library_kl_bits
from tiebias.models.build import build
from tiebias.teach.mechanisms import TOY_VOCAB, _mean_cosine, map_formulas, toy_alignment, toy_batch
from tiebias.train.gradients import GradientProvenance

CELL_PREFIX = "exercise-"
"""Cell ids of rendered exercise cells start with this, like those of :mod:`tiebias.teach.exercises`."""
RTOL = 1e-4
"""Relative tolerance of a comparison with the library: float32 sums in another order differ by far less."""
ATOL_SHARE = 1e-5
"""Absolute tolerance as a share of the reference's largest |value|, for entries near zero."""
TOY_K = 3.0
"""Factor of the toy backward-scaling check (04-code)."""
MODEL_K = 5.0
"""Factor of the tiny-model backward-scaling check (04-code), as in ``mechanisms.factor_effect``."""
BIG_LOGITS = 500.0
"""Scale of the large logits in the KL check: exp overflows and softmax underflows to 0, in float32 and float64."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of checking a student's function: passed or not, and a message saying what is wrong."""

    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'✓' if self.ok else '✗'} {self.message}"

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.ok else "#cf222e"
        return f'<div style="color:{colour}">{html.escape(str(self))}</div>'


@dataclass(frozen=True)
class CodingExercise:
    """One coding exercise: where it appears, how hard and important it is, its texts and its sources."""

    id: str
    notebook: str
    title: str
    difficulty: int
    importance: int
    minutes: int
    prompt: str
    stub: str
    hints: tuple[str, ...]
    solution: str
    wrong: str
    expected_message: str

    @property
    def function(self) -> str:
        """Name of the function the student writes (the stub's first ``def``)."""
        return next(n.name for n in ast.parse(self.stub).body if isinstance(n, ast.FunctionDef))

    def marks(self) -> str:
        """The line under the heading: difficulty and importance as 1-3 marks, and the time to spend."""
        return (f"Difficulty: {'🔴' * self.difficulty}{'⚪' * (3 - self.difficulty)} · "
                f"Importance: {'🔵' * self.importance}{'⚪' * (3 - self.importance)} · "
                f"Spend up to {self.minutes} minutes")


class _Fail(Exception):
    """A student mistake found by a checker; its text is the message shown."""


@contextmanager
def _student(what: str = "your function") -> Iterator[None]:
    """Run student code: any exception it raises becomes a plain-words failure instead of a traceback."""
    try:
        yield
    except NotImplementedError:
        raise _Fail(f"{what} raised NotImplementedError: write its body (see the hints)") from None
    except _Fail:
        raise
    except Exception as e:  # whatever the student's code raises is reported, not raised
        raise _Fail(f"{what} raised {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- comparisons


def _tolerance(ref: Tensor) -> float:
    """Absolute tolerance scaled to the reference's size (at least a tiny floor for an all-zero reference; a
    reference with NaN in it gets the floor, and the comparison then fails on the NaN)."""
    size = float(ref.abs().max()) if ref.numel() else 0.0
    return ATOL_SHARE * (max(size, 1e-30) if math.isfinite(size) else 1e-30)


def _close(got: Tensor, ref: Tensor, rtol: float = RTOL) -> bool:
    """Same shape and values as the reference, within RTOL plus an absolute tolerance scaled to the reference."""
    got, ref = got.detach().double(), ref.detach().double()
    return got.shape == ref.shape and bool(torch.allclose(got, ref, rtol=rtol, atol=_tolerance(ref)))


def _gap(got: Tensor, ref: Tensor) -> str:
    """'largest difference X (largest |reference| Y)' for a failure message."""
    diff = float((got.detach().double() - ref.double()).abs().max())
    return f"largest difference {diff:.3g} (largest |expected value| {float(ref.abs().max()):.3g})"


def _factor(got: Tensor, ref: Tensor) -> float | None:
    """The constant r with got = r * ref, if there is one (least squares, then checked), else None (also for r = 0:
    an answer of zeros is not "off by a constant factor")."""
    got, ref = got.detach().double(), ref.double()
    denom = float((ref * ref).sum())
    if denom == 0.0:
        return None
    r = float((got * ref).sum()) / denom
    if not (math.isfinite(denom) and math.isfinite(r)) or abs(r) <= RTOL:  # all zeros is no factor of the answer
        return None
    return r if _close(got, r * ref) else None


def _plain(got: Any) -> Any:
    """A student's tensor or array as a plain ``torch.Tensor`` / ``numpy.ndarray`` copy (anything else as it is): a
    subclass's own methods (an ``allclose`` that always agrees) and ``__torch_function__`` never run in a check."""
    if isinstance(got, Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return Tensor.clone(Tensor.as_subclass(Tensor.detach(got), Tensor))
    if isinstance(got, np.ndarray):
        return np.array(np.ndarray.view(got, np.ndarray), copy=True)
    return got


def _real_float(got: Tensor, what: str) -> Tensor:
    """A plain tensor checked to be real floating point of at least float32's precision, else a failure naming its
    dtype and what to return instead (the library computes in float32)."""
    if got.is_complex():
        raise _Fail(f"returned a complex tensor ({got.dtype}) where real values ({what}) were expected: return a "
                    "real float32 tensor (the imaginary parts are not part of the answer)")
    if not got.is_floating_point():
        raise _Fail(f"returned an integer tensor ({got.dtype}) where float32 values ({what}) were expected: an "
                    "integer dtype cuts every value to a whole number; return a float32 tensor")
    if torch.finfo(got.dtype).eps > torch.finfo(torch.float32).eps:
        raise _Fail(f"returned {got.dtype}, which keeps about {torch.finfo(got.dtype).resolution:g} relative "
                    f"precision, where float32 values ({what}) were expected: the check compares with the library's "
                    f"float32 result at relative {RTOL:g}; compute and return float32")
    return got


def _as_tensor(got: Any, shape: tuple[int, ...], what: str) -> Tensor:
    """The student's result as a plain real float tensor of the expected shape (:func:`_plain`,
    :func:`_real_float`), or a failure naming what came back instead."""
    got = _plain(got)
    if isinstance(got, np.ndarray):
        got = torch.from_numpy(got)
    if not isinstance(got, Tensor):
        raise _Fail(f"returned {type(got).__name__}, not a torch.Tensor: return {what}")
    got = _real_float(got, what)
    if tuple(got.shape) != shape:
        if tuple(got.shape) == shape[::-1] and len(shape) == 2:
            raise _Fail(f"returned shape {tuple(got.shape)} where {shape} was expected: the result is transposed")
        raise _Fail(f"returned shape {tuple(got.shape)} where {shape} was expected ({what})")
    if not bool(torch.isfinite(got.detach()).all()):
        raise _Fail(f"returned nan or inf values where {what} was expected")
    return got.detach()


def _as_matrix(got: Any, shape: tuple[int, int]) -> np.ndarray:
    """The student's map as a plain real float64 array of the expected shape, or a failure naming what came back."""
    got = _plain(got)
    if isinstance(got, Tensor):
        got = got.cpu().numpy()
    if not isinstance(got, np.ndarray):
        raise _Fail(f"returned {type(got).__name__}, not a numpy array: return the d x d matrix W")
    if np.iscomplexobj(got):
        raise _Fail(f"returned a complex array ({got.dtype}): return the real d x d matrix W (float64)")
    if not np.issubdtype(got.dtype, np.number):
        raise _Fail(f"returned an array of {got.dtype}, not numbers: return the d x d matrix W (float64)")
    if got.shape != shape:
        raise _Fail(f"returned shape {got.shape} where {shape} was expected (W is d x d, with d the number of "
                    "columns of S)")
    if not np.isfinite(got).all():
        raise _Fail("returned nan or inf values in W")
    return got.astype(np.float64)


# --------------------------------------------------------------------------- the tiny tied model


def _reference_pass(input_factor: float) -> dict[str, Tensor]:
    """One backward pass of a fresh tiny tied model on the toy batch under ``GradientProvenance``.

    Returns the token ids, the gradient at the embedding output, the per-path gradients and W.grad, computed afresh
    at every check (never cached: a cache is state a student's code could change, passing a wrong answer and failing
    every right one after it).
    """
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0)
    ids = toy_batch(TOY_VOCAB)
    emb = model.get_input_embeddings()
    seen: dict[str, Tensor] = {}

    def keep(_module: torch.nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:
        out.register_hook(lambda grad: seen.__setitem__("at_embeddings", grad.detach().clone()))

    handle = emb.register_forward_hook(keep)
    try:
        with GradientProvenance(model, input_factor=input_factor) as prov:
            model(input_ids=ids, labels=ids).loss.backward()
            paths = {k: v.detach().clone() for k, v in prov.path_grads().items() if v is not None}
    finally:
        handle.remove()
    return {"ids": ids, "at_embeddings": seen["at_embeddings"], **paths, "total": emb.weight.grad.detach().clone()}


def _grad_with_hook(fn: Callable[..., Any], k: float) -> Tensor:
    """W.grad of the same tiny tied model and batch, with ``fn(output, k)`` applied to the embedding output."""
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0)
    ids = toy_batch(TOY_VOCAB)
    emb = model.get_input_embeddings()
    handle = emb.register_forward_hook(lambda _m, _args, out: fn(out, k))
    try:
        with _student("your function, used as a hook on the embedding output,"):
            model(input_ids=ids, labels=ids).loss.backward()
    finally:
        handle.remove()
    if emb.weight.grad is None:
        raise _Fail("no gradient reached W: the hook's result is detached from the embedding lookup")
    if not bool(torch.isfinite(emb.weight.grad).all()):
        raise _Fail("W.grad has nan or inf values with your function as a hook on the embedding output: the "
                    f"backward pass must multiply the gradient by k = {MODEL_K:g}, nothing else")
    return emb.weight.grad.detach()


# --------------------------------------------------------------------------- 01-code


def _check_input_path(fn: Callable[..., Any]) -> str:
    """Compare the student's scatter of the embedding-output gradient with GradientProvenance's input path."""
    ref = _reference_pass(1.0)
    ids, expected = ref["ids"], ref["input"]
    with _student():
        got = fn(ref["at_embeddings"].clone(), ids.clone(), TOY_VOCAB)
    got = _as_tensor(got, tuple(expected.shape), "one row per vocabulary entry: (vocab_size, d)")
    if _close(got, expected):
        return (f"input_path_grad matches GradientProvenance's input-path gradient ({ids.numel()} positions "
                f"scattered into {TOY_VOCAB} rows)")
    raise _Fail(_input_path_mistake(got, expected, ids))


def _input_path_mistake(got: Tensor, expected: Tensor, ids: Tensor) -> str:
    """Name what is wrong with an input-path gradient: absent rows, repeated tokens, a constant factor."""
    counts = torch.bincount(ids.flatten(), minlength=TOY_VOCAB)
    absent, once, repeated = counts == 0, counts == 1, counts > 1
    tol = _tolerance(expected)
    stray = float(got[absent].abs().max()) if bool(absent.any()) else 0.0
    if stray > tol:
        return (f"rows of the {int(absent.sum())} tokens absent from the batch are not zero (largest |value| "
                f"{stray:.3g}): the lookup reads only the rows of tokens present, so only "
                "those rows get gradient through it")
    factor = _factor(got, expected)
    if factor is not None:
        return (f"off by a constant factor {factor:.4g}: sum the position gradients as they are (no averaging "
                "over positions or tokens, no extra scaling)")
    if _close(got[once], expected[once]) and not _close(got[repeated], expected[repeated]):
        if _close(got[repeated], expected[repeated] / counts[repeated, None]):
            return ("rows of tokens that appear more than once are the mean of their positions' gradients: the "
                    "gradient of W[t] is their sum (each use of the row adds its gradient)")
        return ("rows of tokens that appear more than once in the batch are wrong (rows of tokens seen once are "
                "right): sum every occurrence's gradient with index_add_; indexed assignment out[ids] = ... keeps "
                "only one of them")
    return f"differs from GradientProvenance's input-path gradient: {_gap(got, expected)}"


# --------------------------------------------------------------------------- 02-code


def _alignment_pair() -> tuple[np.ndarray, np.ndarray]:
    """The toy source and target, the target shifted by an offset of its own so that forgetting to centre shows."""
    S, T, _ = toy_alignment()
    offset = 5.0 * np.random.default_rng(1).standard_normal(S.shape[1])
    return S, T + offset


def _check_orthogonal_map(fn: Callable[..., Any]) -> str:
    """Check shape, orthogonality and the mean cosine of the student's Procrustes map against the library."""
    S, T = _alignment_pair()
    d = S.shape[1]
    with _student():
        got = fn(S.copy(), T.copy())
    W = _as_matrix(got, (d, d))
    formulas = map_formulas(S, T)
    off = float(np.abs(W.T @ W - np.eye(d)).max())
    if off > ATOL_SHARE:  # the identity's entries are 1: this is relative to the reference's size
        raise _Fail(_not_orthogonal(W, off, S, T, formulas))
    Sc, Tc = S - S.mean(0), T - T.mean(0)
    mine = _mean_cosine(Sc @ W, Tc)
    lib = maps.align(torch.from_numpy(S), torch.from_numpy(T), "orthogonal").mean
    if abs(mine - lib) <= RTOL:  # a cosine's scale is 1
        return f"orthogonal_map is orthogonal and gives the library's mean cosine ({lib:.4f}) on a toy pair"
    reason = "your W is orthogonal but not the best one"
    U, _, Vt = np.linalg.svd(S.T @ T)
    if np.allclose(W, formulas["orthogonal"].T, rtol=0, atol=ATOL_SHARE):
        reason = ("you returned the transpose V U^T: with U Σ V^T the SVD of S_c^T T_c, the map with S_c W ≈ T_c "
                  "is U V^T")
    elif np.allclose(W, U @ Vt, rtol=0, atol=ATOL_SHARE):
        reason = ("you fitted on S and T as given: centre them first (subtract each column's mean), as the "
                  "library does")
    raise _Fail(f"mean cosine {mine:.4f} where the library gets {lib:.4f}: {reason}")


def _not_orthogonal(W: np.ndarray, off: float, S: np.ndarray, T: np.ndarray, maps: dict[str, np.ndarray]) -> str:
    """The failure message for a W with W^T W != I, naming the least-squares map or a kept Σ when it is one."""
    msg = f"W^T W differs from the identity by {off:.2g}: W is not orthogonal"
    Sc, Tc = S - S.mean(0), T - T.mean(0)
    U, sigma, Vt = np.linalg.svd(Sc.T @ Tc)
    if np.allclose(W, maps["linear"], rtol=RTOL, atol=ATOL_SHARE * np.abs(maps["linear"]).max()):
        return msg + " (this is the least-squares map; Procrustes keeps only the rotation U V^T)"
    kept = U @ np.diag(sigma) @ Vt
    if np.allclose(W, kept, rtol=RTOL, atol=ATOL_SHARE * np.abs(kept).max()):
        return msg + " (you kept the singular values: U Σ V^T stretches; the map is U V^T)"
    return msg


# --------------------------------------------------------------------------- 03-code


def _kl_inputs(scale: float) -> tuple[Tensor, Tensor]:
    """Random final-layer and lens logits of shape (2, 7, 50), at the given scale."""
    gen = torch.Generator().manual_seed(0)
    return (scale * torch.randn(2, 7, 50, generator=gen), scale * torch.randn(2, 7, 50, generator=gen))


def _kl_result(fn: Callable[..., Any], p: Tensor, q: Tensor) -> Tensor:
    """The student's KL on (p, q), checked for type and shape (one value per position)."""
    with _student():
        got = _plain(fn(p.clone(), q.clone()))
    if isinstance(got, Tensor) and got.dim() == 0:
        raise _Fail(f"returned a single number where one KL per position, shape {tuple(p.shape[:-1])}, was "
                    "expected: sum over the vocabulary (last axis) only, do not sum or average over positions")
    if isinstance(got, Tensor) and tuple(got.shape) == tuple(p.shape):
        raise _Fail(f"returned shape {tuple(got.shape)}, the logits' shape: sum the terms over the vocabulary (the "
                    "last axis) to get one KL per position")
    if isinstance(got, Tensor) and got.is_floating_point() and not bool(torch.isfinite(got).all()):
        scale = float(p.abs().max())
        raise _Fail(f"returned nan or inf for logits up to {scale:.0f} in size: exp overflows and softmax underflows "
                    "to 0 (then log 0 = -inf); use log_softmax, which is stable")
    return _as_tensor(got, tuple(p.shape[:-1]), f"one KL per position, shape {tuple(p.shape[:-1])}")


def _check_kl_bits(fn: Callable[..., Any]) -> str:
    """Compare the student's KL with the lens's on ordinary and on large logits, naming the usual mistakes."""
    for scale in (2.0, BIG_LOGITS):
        p, q = _kl_inputs(scale)
        expected = library_kl_bits(p, q)
        got = _kl_result(fn, p, q)
        if not _close(got, expected):
            raise _Fail(_kl_mistake(got, expected, p, q))
    return "kl_bits matches tiebias.lens.evaluate.kl_bits, in bits, on ordinary and on large logits"


def _kl_mistake(got: Tensor, expected: Tensor, p: Tensor, q: Tensor) -> str:
    """Name what is wrong with a KL: nats, the reversed direction, or a constant factor."""
    ln2 = math.log(2.0)
    reversed_ = library_kl_bits(q, p)
    if _close(got, expected * ln2):
        return (f"off by a factor 1/ln 2 = {1 / ln2:.3f}: you returned nats, the lens reports bits (divide by "
                "ln 2)")
    if _close(got, reversed_) or _close(got, reversed_ * ln2):
        unit = "" if _close(got, reversed_) else " (and in nats, not bits)"
        return ("you computed KL(Q || P)" + unit + ": the lens measures KL(P || Q), the expectation under P, the "
                "model's final distribution (first argument)")
    factor = _factor(got, expected)
    if factor is not None:
        return f"off by a constant factor {factor:.4g}: KL in bits is sum_v P_v (log P_v - log Q_v) / ln 2"
    return f"differs from the lens's KL in bits: {_gap(got, expected)}"


# --------------------------------------------------------------------------- 04-code


def _check_scale_backward(fn: Callable[..., Any]) -> str:
    """Check the student's hook on a toy tensor (forward unchanged, gradient times k), then on a tiny tied model."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=gen).requires_grad_()
    w = torch.randn(3, 4, generator=gen)
    with _student():
        y = fn(x, TOY_K)
    _check_forward(y, x)
    with _student("the backward pass through your function"):
        (y * w).sum().backward()
    if x.grad is None:
        raise _Fail("no gradient reached x: the result is detached from x")
    if not bool(torch.isfinite(x.grad).all()):
        raise _Fail("the gradient reaching x has nan or inf values: the backward pass must multiply the incoming "
                    f"gradient by k = {TOY_K:g} (a finite number), nothing else")
    if not _close(x.grad, TOY_K * w):
        factor = _factor(x.grad, w)
        if factor is not None and abs(factor - 1.0) <= RTOL:
            raise _Fail(f"the gradient reaching x is unchanged (factor 1, not k = {TOY_K:g}): the backward pass "
                        "is not scaled")
        if factor is not None:
            raise _Fail(f"the gradient reaching x is multiplied by {factor:.4g}, not by k = {TOY_K:g}")
        raise _Fail(f"the gradient reaching x is not k times the incoming one: {_gap(x.grad, TOY_K * w)}")
    base, scaled = _reference_pass(1.0), _reference_pass(MODEL_K)
    got = _grad_with_hook(fn, MODEL_K)
    expected = MODEL_K * base["input"] + base["output"]
    if not (_close(got, expected) and _close(got, scaled["total"])):
        raise _Fail(f"as a hook on the tiny tied model's embedding output, W.grad is not k g_in + g_out "
                    f"(k = {MODEL_K:g}) as with GradientProvenance(model, input_factor={MODEL_K:g}): "
                    f"{_gap(got, expected)}")
    return (f"scale_backward keeps the forward values, multiplies the gradient by k, and on a tiny tied model gives "
            f"W.grad = k g_in + g_out as GradientProvenance(model, input_factor={MODEL_K:g}) does")


def _check_forward(y: Any, x: Tensor) -> None:
    """Fail unless y is a tensor with x's values that still depends on x in the graph."""
    y_values = _as_tensor(y, tuple(x.shape), "a tensor with x's shape")
    if not _close(y_values, x.detach(), rtol=1e-5):
        if _close(y_values, TOY_K * x.detach(), rtol=1e-5):
            raise _Fail(f"the forward values are k x (k = {TOY_K:g}): the forward pass must return x unchanged; "
                        "only the gradient is scaled")
        raise _Fail(f"the forward values differ from x: {_gap(y_values, x.detach())}; the forward pass must return "
                    "x unchanged")
    if not (isinstance(y, Tensor) and y.requires_grad):
        raise _Fail("the result does not require grad: it is detached from x, so no gradient reaches x")


# --------------------------------------------------------------------------- registry


_INPUT_PATH_STUB = '''import torch


def input_path_grad(grad_at_embeddings: torch.Tensor, input_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The gradient reaching the shared matrix W through the input lookup E = W[input_ids].

    grad_at_embeddings: (batch, seq, d), the loss's gradient at the lookup's output; input_ids: (batch, seq).
    Returns a (vocab_size, d) tensor whose row t sums the gradients of the positions holding token t.
    """
    raise NotImplementedError
'''

_ORTHOGONAL_STUB = '''import numpy as np


def orthogonal_map(S: np.ndarray, T: np.ndarray) -> np.ndarray:
    """The d x d orthogonal W minimising ||S_c W - T_c|| (S_c, T_c: S and T with column means removed).

    S, T: (n, d) arrays, one row per token, not centred.
    """
    raise NotImplementedError
'''

_KL_STUB = '''import math

import torch


def kl_bits(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) in bits at each position, P = softmax(p_logits), Q = softmax(q_logits) over the last axis.

    p_logits, q_logits: (..., vocab) logits. Returns a (...) tensor: one KL per position.
    """
    raise NotImplementedError
'''

_SCALE_STUB = '''import torch


def scale_backward(x: torch.Tensor, k: float) -> torch.Tensor:
    """x in the forward pass; in the backward pass the gradient reaching x is multiplied by k."""
    raise NotImplementedError
'''


def _solution(stub: str, body: str) -> str:
    """A stub with its ``raise NotImplementedError`` replaced by a body (indented four spaces)."""
    return stub.replace("    raise NotImplementedError\n", body)


EXERCISES: dict[str, CodingExercise] = {e.id: e for e in (
    CodingExercise(
        id="01-code", notebook="01_train", title="The input path's gradient", difficulty=2, importance=3,
        minutes=15,
        prompt=(
            "In a tied model one matrix $W$ (vocabulary × width) is both the input lookup `E = W[input_ids]` and "
            "the output projection `logits = h W^T`. Autograd adds the two paths' gradients into `W.grad`; "
            "`GradientProvenance` keeps them apart. Write the input path's share yourself.\n\n"
            "`input_path_grad(grad_at_embeddings, input_ids, vocab_size)` receives the loss's gradient at the "
            "lookup's output (`(batch, seq, d)`, one vector per token position), the token ids (`(batch, seq)`) "
            "and the vocabulary size. It returns the gradient reaching $W$ through the lookup: a "
            "`(vocab_size, d)` tensor whose row $t$ is the sum of the gradients of all positions holding token "
            "$t$, and zero for tokens absent from the batch.\n\n"
            "**Why it matters:** this is why the input path reaches only the rows of tokens in the batch while "
            "the output path reaches every row through the softmax, and why the output path dominates the "
            "shared matrix's gradient (claim 2).\n\n"
            "The check runs one backward pass of a tiny tied model (64 tokens), hands your function the real "
            "gradient at the embedding output, and compares your result with `GradientProvenance`'s input-path "
            "gradient."),
        stub=_INPUT_PATH_STUB,
        hints=(
            "Flatten: `grad_at_embeddings.reshape(-1, d)` is one row per position, `input_ids.reshape(-1)` the "
            "token of each row.",
            "A token seen at several positions gets the **sum** of their gradients. `out[ids] = rows` keeps only "
            "one of them; `torch.zeros(vocab_size, d).index_add_(0, ids, rows)` adds them all.",
            "Why a sum: the lookup is `E = onehot(ids) @ W`, so `dL/dW = onehot(ids)^T @ dL/dE`.",
        ),
        solution=_solution(_INPUT_PATH_STUB, (
            "    d = grad_at_embeddings.shape[-1]\n"
            "    rows = grad_at_embeddings.reshape(-1, d)\n"
            "    out = torch.zeros(vocab_size, d, dtype=rows.dtype, device=rows.device)\n"
            "    return out.index_add_(0, input_ids.reshape(-1), rows)\n")),
        wrong=_solution(_INPUT_PATH_STUB, (
            "    d = grad_at_embeddings.shape[-1]\n"
            "    out = torch.zeros(vocab_size, d, dtype=grad_at_embeddings.dtype)\n"
            "    out[input_ids.reshape(-1)] = grad_at_embeddings.reshape(-1, d)\n"
            "    return out\n")),
        expected_message="appear more than once",
    ),
    CodingExercise(
        id="02-code", notebook="02_align", title="The orthogonal map", difficulty=2, importance=2, minutes=10,
        prompt=(
            "Claim 1 compares two embedding matrices up to a rotation: after an orthogonal map $W$ the source "
            "rows should point where the target rows do. `tiebias.align.maps.align(S, T, \"orthogonal\")` fits "
            "that $W$ by Procrustes.\n\n"
            "Write `orthogonal_map(S, T)`. `S` and `T` are numpy arrays of shape `(n, d)` (one row per token), "
            "**not centred**: centre both first (subtract each column's mean, as the library does), then return "
            "the `(d, d)` orthogonal matrix $W$ minimising $\\lVert S_c W - T_c \\rVert_F$.\n\n"
            "**Why it matters:** an orthogonal map keeps lengths and angles, so a high cosine after it says the "
            "two spaces share their geometry, not merely that a free linear map can bend one onto the other.\n\n"
            "The check fits your map on a toy pair (the target is a rotated, stretched, noisy source plus an "
            "offset), and checks its shape, that $W^T W = I$, and that the mean cosine between the rows of "
            "$S_c W$ and $T_c$ equals the library's."),
        stub=_ORTHOGONAL_STUB,
        hints=(
            "Centre: `Sc = S - S.mean(axis=0)`, and the same for `T`.",
            "Take the SVD of the d × d cross-covariance: `U, sigma, Vt = np.linalg.svd(Sc.T @ Tc)`.",
            "The minimiser is `U @ Vt`: drop the singular values (keeping them stretches), and mind the order "
            "(`Vt.T @ U.T` maps the target onto the source).",
        ),
        solution=_solution(_ORTHOGONAL_STUB, (
            "    Sc = S - S.mean(axis=0)\n"
            "    Tc = T - T.mean(axis=0)\n"
            "    U, _, Vt = np.linalg.svd(Sc.T @ Tc)\n"
            "    return U @ Vt\n")),
        wrong=_solution(_ORTHOGONAL_STUB, (
            "    U, _, Vt = np.linalg.svd(S.T @ T)\n"
            "    return U @ Vt\n")),
        expected_message="centre them first",
    ),
    CodingExercise(
        id="03-code", notebook="03_lens", title="KL per position in bits", difficulty=1, importance=2, minutes=10,
        prompt=(
            "The lens tables say how far a lens's reading of a layer is from the model's own prediction: at each "
            "token position, KL(P ‖ Q) in bits, with P the softmax of the model's final logits and Q the softmax "
            "of the lens's logits.\n\n"
            "Write `kl_bits(p_logits, q_logits)`: both are tensors of shape `(..., vocab)` holding logits (not "
            "probabilities); return a tensor of shape `(...)`, one value per position, "
            "$\\mathrm{KL}(P \\| Q) = \\sum_v P_v (\\log P_v - \\log Q_v) / \\ln 2$. It must stay finite for "
            "logits in the hundreds, which a lens on an early layer can produce.\n\n"
            "**Why it matters:** claim 3 is read off these numbers. The direction matters: KL(P ‖ Q) weighs the "
            "lens's errors by what the model actually predicts.\n\n"
            "The check compares your function with `tiebias.lens.evaluate.kl_bits` on random logits, ordinary "
            "and large."),
        stub=_KL_STUB,
        hints=(
            "`torch.log_softmax(x, dim=-1)` gives log-probabilities without overflow; `torch.softmax(x, -1).log()` "
            "turns probabilities that underflow to 0 into -inf.",
            "KL(P ‖ Q) = Σ_v P_v (log P_v − log Q_v): the expectation is under P, the model's final distribution "
            "(the first argument).",
            "Natural logarithms give nats: divide by `math.log(2)` for bits. Sum over the last axis only.",
        ),
        solution=_solution(_KL_STUB, (
            "    log_p = torch.log_softmax(p_logits.float(), dim=-1)\n"
            "    log_q = torch.log_softmax(q_logits.float(), dim=-1)\n"
            "    return (log_p.exp() * (log_p - log_q)).sum(-1) / math.log(2)\n")),
        wrong=_solution(_KL_STUB, (
            "    log_p = torch.log_softmax(p_logits.float(), dim=-1)\n"
            "    log_q = torch.log_softmax(q_logits.float(), dim=-1)\n"
            "    return (log_p.exp() * (log_p - log_q)).sum(-1)\n")),
        expected_message="1/ln 2 = 1.443: you returned nats",
    ),
    CodingExercise(
        id="04-code", notebook="04_ablate", title="The k scaling hook", difficulty=2, importance=3, minutes=15,
        prompt=(
            "The ablation multiplies the input path's gradient by $k$ and leaves the forward pass alone: the "
            "model computes the same loss, but the shared matrix receives $k\\,g_{in} + g_{out}$. The library "
            "scales on the weight (`GradientProvenance(model, input_factor=k)`); an equivalent place is the "
            "embedding output, where the gradient flowing back into the lookup can be multiplied by $k$.\n\n"
            "Write `scale_backward(x, k)`: it returns a tensor equal to `x` in the forward pass whose gradient, "
            "in the backward pass, is multiplied by `k` before it reaches `x`.\n\n"
            "**Why it matters:** claim 4's dose-response rests on this intervention changing nothing but the "
            "input path's update. The lookup's backward is linear, so scaling the gradient at its output scales "
            "the input-path rows of `W.grad` by the same $k$.\n\n"
            "The check runs your function on a toy tensor (same values, gradient times k), then as a hook on a "
            "tiny tied model's embedding output, where `W.grad` must equal $k\\,g_{in} + g_{out}$ as with "
            "`GradientProvenance(model, input_factor=k)`."),
        stub=_SCALE_STUB,
        hints=(
            "`x.detach()` has x's values but passes no gradient. Combine `x` and `x.detach()` so that the values "
            "add up to x while the part that carries gradient is multiplied by k.",
            "`x * k - x.detach() * (k - 1)`: forward x·k − x·(k − 1) = x; backward only the first term counts.",
            "Other ways: `y = x.clone(); y.register_hook(lambda g: g * k)`, or a `torch.autograd.Function` whose "
            "backward returns `grad * k`.",
        ),
        solution=_solution(_SCALE_STUB, "    return x * k - x.detach() * (k - 1)\n"),
        wrong=_solution(_SCALE_STUB, "    return x * k\n"),
        expected_message="forward pass must return x unchanged",
    ),
)}

_CHECKERS: dict[str, Callable[[Callable[..., Any]], str]] = {
    "01-code": _check_input_path, "02-code": _check_orthogonal_map, "03-code": _check_kl_bits,
    "04-code": _check_scale_backward}


# --------------------------------------------------------------------------- checking


def _exercise(exercise_id: str) -> CodingExercise:
    """The exercise of that id, or a ValueError listing the ids there are."""
    if exercise_id not in EXERCISES:
        raise ValueError(f"exercise_id: {exercise_id!r} is not a coding exercise; one of {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]


def check(exercise_id: str, fn: Callable[..., Any]) -> CheckResult:
    """Test a student's function against the library's own version; a mistake gives ok=False, never an exception.

    An unknown ``exercise_id`` raises ValueError (that is a typo in the notebook, not a wrong answer).
    """
    ex = _exercise(exercise_id)
    if not callable(fn):
        return CheckResult(False, f"{ex.id}: expected the function {ex.function}, got {type(fn).__name__}")
    try:
        return CheckResult(True, f"{ex.id} passed: {_CHECKERS[ex.id](fn)}")
    except _Fail as e:
        return CheckResult(False, f"{ex.id}: {e}")
    except Exception as e:  # a result the checks cannot even compare is still a wrong answer
        return CheckResult(False, f"{ex.id}: the check could not use your result ({type(e).__name__}: {e})")


def run_check(exercise_id: str, fn: Callable[..., Any], *, strict: bool = False) -> CheckResult:
    """Check, print the ✓/✗ line and return the result; ``strict`` raises AssertionError when it is not ok.

    Args:
        exercise_id: the exercise's id (an unknown one raises ValueError: a typo, not a wrong answer).
        fn: the student's function (anything else is a failed check).
        strict: raise AssertionError with the message when the check fails.

    Returns:
        The :class:`CheckResult` (``ok``, ``message``), also printed.

    The solution cells use ``strict=True``, so a notebook run fails if the solution or the library drifts.
    """
    result = check(exercise_id, fn)
    print(result)
    if strict and not result.ok:
        raise AssertionError(result.message)
    return result


# --------------------------------------------------------------------------- notebook cells


def intro_markdown(ex: CodingExercise) -> str:
    """The exercise's first cell: heading, marks line, prompt and the hints, each folded."""
    hints = "\n\n".join(f"<details><summary>Hint {i}</summary>\n\n{h}\n\n</details>"
                        for i, h in enumerate(ex.hints, 1))
    return f"### Coding exercise {ex.id} · {ex.title}\n\n{ex.marks()}\n\n{ex.prompt}\n\n{hints}"


def cells(notebook: str) -> list[dict[str, Any]]:
    """The notebook's coding-exercise cells (nbformat 4): intro, stub, check, solution note, folded solution."""
    if notebook not in NOTEBOOKS:
        raise ValueError(f"notebook: {notebook!r} is not one of {', '.join(NOTEBOOKS)}")
    out: list[dict[str, Any]] = []
    for ex in (e for e in EXERCISES.values() if e.notebook == notebook):
        call = f'run_check("{ex.id}", {ex.function}'
        check_src = f"from tiebias.teach import run_check\n\n{call});\n"
        solution_src = f"{ex.solution}\n\nfrom tiebias.teach import run_check\n\n{call}, strict=True);\n"
        prefix = f"{CELL_PREFIX}{ex.id}"
        out += [_markdown(f"{prefix}-intro", intro_markdown(ex)),
                _code(f"{prefix}-stub", ex.stub),
                _code(f"{prefix}-check", check_src),
                _markdown(f"{prefix}-solution-note", "**Solution** (folded: click the bar on the left to open it)"),
                _code(f"{prefix}-solution", solution_src, {"jupyter": {"source_hidden": True}})]
    return out


def _lines(text: str) -> list[str]:
    """Notebook JSON's list-of-lines form of a cell source (no trailing newline on the last line)."""
    return text.rstrip("\n").splitlines(keepends=True)


def _markdown(cell_id: str, text: str) -> dict[str, Any]:
    """An nbformat-4 markdown cell."""
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": _lines(text)}


def _code(cell_id: str, text: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """An nbformat-4 code cell, not yet run."""
    return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": metadata or {},
            "outputs": [], "source": _lines(text)}
