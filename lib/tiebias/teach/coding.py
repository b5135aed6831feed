"""The checkers of the coding exercises, whose cells live in the study notebooks: each compares a student's function
with the library's own and names what is wrong in plain words."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tiebias.align import maps
from tiebias.lens.evaluate import kl_bits as library_kl_bits
from tiebias.models.build import build
from tiebias.teach.mechanisms import TOY_VOCAB, toy_batch
from tiebias.train.gradients import GradientProvenance

RTOL = 1e-4  # against the library: float32 sums in another order differ by far less
ATOL_SHARE = 1e-5  # absolute tolerance as a share of the reference's largest |value|, for entries near zero
TOY_K = 3.0
MODEL_K = 5.0
BIG_LOGITS = 500.0  # exp overflows and softmax underflows to 0


@dataclass(frozen=True)
class CheckResult:
    """Passed or not, and a message saying what is wrong."""

    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'✓' if self.ok else '✗'} {self.message}"


class _Fail(Exception):
    """A student mistake found by a checker; its text is the message shown."""


@contextmanager
def _student(what: str = "your function") -> Iterator[None]:
    """Whatever student code raises becomes a plain-words failure instead of a traceback."""
    try:
        yield
    except NotImplementedError:
        raise _Fail(f"{what} raised NotImplementedError: write its body (see the hints)") from None
    except _Fail:
        raise
    except Exception as e:  # whatever the student's code raises is reported, not raised
        raise _Fail(f"{what} raised {type(e).__name__}: {e}") from None


def _tolerance(ref: Tensor) -> float:
    """Absolute tolerance scaled to the reference (a floor for an all-zero or NaN one)."""
    size = float(ref.abs().max()) if ref.numel() else 0.0
    return ATOL_SHARE * (max(size, 1e-30) if math.isfinite(size) else 1e-30)


def _close(got: Tensor, ref: Tensor, rtol: float = RTOL) -> bool:
    got, ref = got.detach().double(), ref.detach().double()
    return got.shape == ref.shape and bool(torch.allclose(got, ref, rtol=rtol, atol=_tolerance(ref)))


def _gap(got: Tensor, ref: Tensor) -> str:
    diff = float((got.detach().double() - ref.double()).abs().max())
    return f"largest difference {diff:.3g} (largest |expected value| {float(ref.abs().max()):.3g})"


def _factor(got: Tensor, ref: Tensor) -> float | None:
    """The constant r with got = r * ref, if there is one (an answer of zeros has none)."""
    got, ref = got.detach().double(), ref.double()
    denom = float((ref * ref).sum())
    if denom == 0.0:
        return None
    r = float((got * ref).sum()) / denom
    if not (math.isfinite(denom) and math.isfinite(r)) or abs(r) <= RTOL:
        return None
    return r if _close(got, r * ref) else None


def _plain(got: Any) -> Any:
    """A plain copy of a student's tensor or array: a subclass's ``allclose`` or ``__torch_function__`` never runs."""
    if isinstance(got, Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return Tensor.clone(Tensor.as_subclass(Tensor.detach(got), Tensor))
    if isinstance(got, np.ndarray):
        return np.array(np.ndarray.view(got, np.ndarray), copy=True)
    return got


def _as_tensor(got: Any, shape: tuple[int, ...], what: str, kind: str = "a torch.Tensor") -> Tensor:
    """The student's tensor or array as a plain, finite, real tensor of at least float32's precision and ``shape``."""
    got = _plain(got)
    if isinstance(got, np.ndarray):
        got = torch.from_numpy(got)
    if not isinstance(got, Tensor):
        raise _Fail(f"returned {type(got).__name__}, not {kind}: return {what}")
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
    if tuple(got.shape) != shape:
        if tuple(got.shape) == shape[::-1] and len(shape) == 2:
            raise _Fail(f"returned shape {tuple(got.shape)} where {shape} was expected: the result is transposed")
        raise _Fail(f"returned shape {tuple(got.shape)} where {shape} was expected ({what})")
    if not bool(torch.isfinite(got).all()):
        raise _Fail(f"returned nan or inf values where {what} was expected")
    return got


def _reference_pass(input_factor: float) -> dict[str, Tensor]:
    """Token ids, the gradient at the embedding output, the path gradients and W.grad of a fresh tiny tied model under
    ``GradientProvenance`` (afresh at every check: a cache is state a student's code could change)."""
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0)
    ids = toy_batch(TOY_VOCAB)
    emb = model.get_input_embeddings()
    seen: dict[str, Tensor] = {}

    def keep(_module: torch.nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:  # returns None: output unchanged
        out.register_hook(lambda grad: seen.__setitem__("at_embeddings", grad.detach().clone()))

    handle = emb.register_forward_hook(keep)
    try:
        with GradientProvenance(model, input_factor=input_factor) as prov:
            model(input_ids=ids, labels=ids).loss.backward()
            paths = {k: v.detach().clone() for k, v in prov.path_grads().items() if v is not None}
    finally:
        handle.remove()
    return {"ids": ids, "at_embeddings": seen["at_embeddings"], **paths, "total": emb.weight.grad.detach().clone()}


def _check_input_path(fn: Callable[..., Any]) -> str:
    """01-code: the scatter of the embedding-output gradient against GradientProvenance's input path."""
    ref = _reference_pass(1.0)
    ids, expected = ref["ids"], ref["input"]
    with _student():
        got = fn(ref["at_embeddings"].clone(), ids.clone(), TOY_VOCAB)
    got = _as_tensor(got, tuple(expected.shape), "one row per vocabulary entry: (vocab_size, d)")
    if _close(got, expected):
        return (f"input_path_grad matches GradientProvenance's input-path gradient ({ids.numel()} positions "
                f"scattered into {TOY_VOCAB} rows)")
    counts = torch.bincount(ids.flatten(), minlength=TOY_VOCAB)
    absent, once, repeated = counts == 0, counts == 1, counts > 1
    stray = float(got[absent].abs().max()) if bool(absent.any()) else 0.0
    if stray > _tolerance(expected):
        raise _Fail(f"rows of the {int(absent.sum())} tokens absent from the batch are not zero (largest |value| "
                    f"{stray:.3g}): the lookup reads only the rows of tokens present, so only those rows get "
                    "gradient through it")
    factor = _factor(got, expected)
    if factor is not None:
        raise _Fail(f"off by a constant factor {factor:.4g}: sum the position gradients as they are (no averaging "
                    "over positions or tokens, no extra scaling)")
    if _close(got[once], expected[once]) and not _close(got[repeated], expected[repeated]):
        if _close(got[repeated], expected[repeated] / counts[repeated, None]):
            raise _Fail("rows of tokens that appear more than once are the mean of their positions' gradients: the "
                        "gradient of W[t] is their sum (each use of the row adds its gradient)")
        raise _Fail("rows of tokens that appear more than once in the batch are wrong (rows of tokens seen once are "
                    "right): sum every occurrence's gradient with index_add_; indexed assignment out[ids] = ... "
                    "keeps only one of them")
    raise _Fail(f"differs from GradientProvenance's input-path gradient: {_gap(got, expected)}")


def _check_orthogonal_map(fn: Callable[..., Any]) -> str:
    """02-code: shape, orthogonality and the mean cosine of the student's Procrustes map against the library's, on
    S with an offset and T = (S stretched along one axis) Q + noise + another offset, Q a rotation."""
    rng, d = np.random.default_rng(0), 8
    S = rng.standard_normal((200, d)) + rng.standard_normal(d)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    stretch = np.ones(d)
    stretch[0] = 3.0  # a non-orthogonal part that only the linear map can undo
    T = (S * stretch) @ Q + 0.3 * rng.standard_normal((200, d))
    T = T + 5.0 * np.random.default_rng(1).standard_normal(d)  # an offset: forgetting to centre shows
    with _student():
        got = fn(S.copy(), T.copy())
    W = _as_tensor(got, (d, d), "the d x d matrix W", "a numpy array").double().numpy()
    Sc, Tc = S - S.mean(0), T - T.mean(0)
    U, sigma, Vt = np.linalg.svd(Sc.T @ Tc)
    off = float(np.abs(W.T @ W - np.eye(d)).max())
    if off > ATOL_SHARE:  # the identity's entries are 1: this is relative to the reference's size
        msg = f"W^T W differs from the identity by {off:.2g}: W is not orthogonal"
        for other, why in ((np.linalg.lstsq(Sc, Tc, rcond=None)[0],
                            " (this is the least-squares map; Procrustes keeps only the rotation U V^T)"),
                           (U @ np.diag(sigma) @ Vt, " (you kept the singular values: U Σ V^T stretches; the map is U V^T)")):
            if np.allclose(W, other, rtol=RTOL, atol=ATOL_SHARE * np.abs(other).max()):
                msg += why
                break
        raise _Fail(msg)
    mapped = Sc @ W
    mine = float(((mapped * Tc).sum(1) / (np.linalg.norm(mapped, axis=1) * np.linalg.norm(Tc, axis=1))).mean())
    lib = maps.align_all(torch.from_numpy(S), torch.from_numpy(T), ["orthogonal"])["orthogonal"].mean
    if abs(mine - lib) <= RTOL:  # a cosine's scale is 1
        return f"orthogonal_map is orthogonal and gives the library's mean cosine ({lib:.4f}) on a toy pair"
    reason = "your W is orthogonal but not the best one"
    orthogonal = U @ Vt
    U, _, Vt = np.linalg.svd(S.T @ T)
    if np.allclose(W, orthogonal.T, rtol=0, atol=ATOL_SHARE):
        reason = ("you returned the transpose V U^T: with U Σ V^T the SVD of S_c^T T_c, the map with S_c W ≈ T_c "
                  "is U V^T")
    elif np.allclose(W, U @ Vt, rtol=0, atol=ATOL_SHARE):
        reason = "you fitted on S and T as given: centre them first (subtract each column's mean), as the library does"
    raise _Fail(f"mean cosine {mine:.4f} where the library gets {lib:.4f}: {reason}")


def _check_kl_bits(fn: Callable[..., Any]) -> str:
    """03-code: the student's KL against the lens's on ordinary and on large logits."""
    ln2 = math.log(2.0)
    for scale in (2.0, BIG_LOGITS):
        gen = torch.Generator().manual_seed(0)
        p, q = scale * torch.randn(2, 7, 50, generator=gen), scale * torch.randn(2, 7, 50, generator=gen)
        expected, reverse = library_kl_bits(p, q), library_kl_bits(q, p)
        with _student():
            got = _plain(fn(p.clone(), q.clone()))
        if isinstance(got, Tensor) and got.dim() == 0:
            raise _Fail(f"returned a single number where one KL per position, shape {tuple(p.shape[:-1])}, was "
                        "expected: sum over the vocabulary (last axis) only, do not sum or average over positions")
        if isinstance(got, Tensor) and tuple(got.shape) == tuple(p.shape):
            raise _Fail(f"returned shape {tuple(got.shape)}, the logits' shape: sum the terms over the vocabulary "
                        "(the last axis) to get one KL per position")
        if isinstance(got, Tensor) and got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise _Fail(f"returned nan or inf for logits up to {float(p.abs().max()):.0f} in size: exp overflows "
                        "and softmax underflows to 0 (then log 0 = -inf); use log_softmax, which is stable")
        got = _as_tensor(got, tuple(p.shape[:-1]), f"one KL per position, shape {tuple(p.shape[:-1])}")
        if _close(got, expected):
            continue
        if _close(got, expected * ln2):
            raise _Fail(f"off by a factor 1/ln 2 = {1 / ln2:.3f}: you returned nats, the lens reports bits (divide "
                        "by ln 2)")
        if _close(got, reverse) or _close(got, reverse * ln2):
            unit = "" if _close(got, reverse) else " (and in nats, not bits)"
            raise _Fail(f"you computed KL(Q || P){unit}: the lens measures KL(P || Q), the expectation under P, the "
                        "model's final distribution (first argument)")
        factor = _factor(got, expected)
        if factor is not None:
            raise _Fail(f"off by a constant factor {factor:.4g}: KL in bits is sum_v P_v (log P_v - log Q_v) / ln 2")
        raise _Fail(f"differs from the lens's KL in bits: {_gap(got, expected)}")
    return "kl_bits matches tiebias.lens.evaluate.kl_bits, in bits, on ordinary and on large logits"


def _check_scale_backward(fn: Callable[..., Any]) -> str:
    """04-code: the hook on a toy tensor (forward unchanged, gradient times k), then on a tiny tied model."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=gen).requires_grad_()
    w = torch.randn(3, 4, generator=gen)
    with _student():
        y = fn(x, TOY_K)
    values = _as_tensor(y, tuple(x.shape), "a tensor with x's shape")
    if not _close(values, x.detach(), rtol=1e-5):
        if _close(values, TOY_K * x.detach(), rtol=1e-5):
            raise _Fail(f"the forward values are k x (k = {TOY_K:g}): the forward pass must return x unchanged; "
                        "only the gradient is scaled")
        raise _Fail(f"the forward values differ from x: {_gap(values, x.detach())}; the forward pass must return "
                    "x unchanged")
    if not (isinstance(y, Tensor) and y.requires_grad):
        raise _Fail("the result does not require grad: it is detached from x, so no gradient reaches x")
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
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0)  # the same model and batch, fn as a hook on the lookup
    ids, emb = toy_batch(TOY_VOCAB), model.get_input_embeddings()
    handle = emb.register_forward_hook(lambda _m, _args, out: fn(out, MODEL_K))
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
    got = emb.weight.grad.detach()
    expected = MODEL_K * base["input"] + base["output"]
    if not (_close(got, expected) and _close(got, scaled["total"])):
        raise _Fail(f"as a hook on the tiny tied model's embedding output, W.grad is not k g_in + g_out "
                    f"(k = {MODEL_K:g}) as with GradientProvenance(model, input_factor={MODEL_K:g}): "
                    f"{_gap(got, expected)}")
    return (f"scale_backward keeps the forward values, multiplies the gradient by k, and on a tiny tied model gives "
            f"W.grad = k g_in + g_out as GradientProvenance(model, input_factor={MODEL_K:g}) does")


CHECKERS: dict[str, tuple[str, Callable[[Callable[..., Any]], str]]] = {
    "01-code": ("input_path_grad", _check_input_path), "02-code": ("orthogonal_map", _check_orthogonal_map),
    "03-code": ("kl_bits", _check_kl_bits), "04-code": ("scale_backward", _check_scale_backward)}
"""Each coding exercise's id (``NN-code``, in notebook NN): the student's function and its checker."""


def check(exercise_id: str, fn: Callable[..., Any]) -> CheckResult:
    """A student's function against the library's: a mistake gives ok=False, never an exception (an unknown
    ``exercise_id`` raises ValueError: a typo, not a wrong answer)."""
    if exercise_id not in CHECKERS:
        raise ValueError(f"exercise_id: {exercise_id!r} is not a coding exercise; one of {', '.join(CHECKERS)}")
    name, checker = CHECKERS[exercise_id]
    if not callable(fn):
        return CheckResult(False, f"{exercise_id}: expected the function {name}, got {type(fn).__name__}")
    try:
        return CheckResult(True, f"{exercise_id} passed: {checker(fn)}")
    except _Fail as e:
        return CheckResult(False, f"{exercise_id}: {e}")
    except Exception as e:  # a result the checks cannot even compare is still a wrong answer
        return CheckResult(False, f"{exercise_id}: the check could not use your result ({type(e).__name__}: {e})")


def run_check(exercise_id: str, fn: Callable[..., Any], *, strict: bool = False) -> CheckResult:
    """Check, print the ✓/✗ line and return the result.

    Args:
        exercise_id, fn: the exercise's id and the student's function.
        strict: raise AssertionError when the check fails (the solution cells: a study fails if they drift).

    Returns:
        The :class:`CheckResult`, also printed.
    """
    result = check(exercise_id, fn)
    print(result)
    if strict and not result.ok:
        raise AssertionError(result.message)
    return result
