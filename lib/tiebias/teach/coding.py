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
from tiebias.lens.evaluate import evaluate
from tiebias.lens.evaluate import kl_bits as library_kl_bits
from tiebias.lens.lenses import LN2
from tiebias.models.anatomy import checked_layout
from tiebias.models.build import build
from tiebias.teach.mechanisms import TOY_VOCAB, toy_batch
from tiebias.train.gradients import GradientProvenance

RTOL = 1e-4  # against the library: float32 sums in another order differ by far less
ATOL_SHARE = 1e-5  # absolute tolerance as a share of the reference's largest |value|, for entries near zero
MODEL_K = 5.0


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


def _as_tensor(got: Any, shape: tuple[int, ...], what: str) -> Tensor:
    """The student's tensor or array as a plain, finite, real tensor of at least float32's precision and ``shape``."""
    got = _plain(got)
    if isinstance(got, np.ndarray):
        got = torch.from_numpy(got)
    if not isinstance(got, Tensor):
        raise _Fail(f"returned {type(got).__name__}: return {what}")
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


def _reference_pass(**factors: float) -> dict[str, Any]:
    """A fresh tiny tied model's ids, output-projection input h, W, loss and every gradient (paths, W.grad, the rest)
    under ``GradientProvenance(model, **factors)``, afresh each check: a cache is state a student's code could change."""
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0)
    ids, seen = toy_batch(TOY_VOCAB), {}
    handle = model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: seen.update(h=args[0]))
    try:
        with GradientProvenance(model, **factors) as prov:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            paths = {k: v.detach().clone() for k, v in prov.path_grads().items() if v is not None}
    finally:
        handle.remove()
    W = model.get_input_embeddings().weight
    return {"ids": ids, "h": seen["h"].detach().clone(), "W": W.detach().clone(), "loss": float(loss.detach()), **paths,
            "total": W.grad.detach().clone(),
            "others": {n: p.grad.detach().clone() for n, p in model.named_parameters() if p is not W}}


def _check_output_path(fn: Callable[..., Any]) -> str:
    """01-code: dL/dW through the output projection, from the softmax by hand, against GradientProvenance's."""
    ref = _reference_pass()
    ids, h, W, expected = ref["ids"], ref["h"], ref["W"], ref["output"]
    with _student():
        got = fn(h.clone(), W.clone(), ids.clone())
    got = _as_tensor(got, tuple(expected.shape), "one row per vocabulary entry: (vocab_size, d)")
    if _close(got, expected):
        return (f"output_path_grad matches GradientProvenance's output-path gradient (all {TOY_VOCAB} rows, "
                f"{ids[:, 1:].numel()} predictions)")
    never = torch.ones(TOY_VOCAB, dtype=torch.bool)
    never[ids[:, 1:].flatten()] = False  # tokens that are no position's next token
    if float(got[never].abs().max()) <= _tolerance(expected) < float(got[~never].abs().max()):
        raise _Fail(f"rows of the {int(never.sum())} tokens that are no position's next token are zero: the softmax "
                    "gives every row v a gradient P_v h at every position; dL/dlogits = (softmax - one-hot) / N")
    n, d = ids[:, 1:].numel(), h.shape[-1]
    factor = _factor(got, expected)
    reasons = {-1.0: "the sign is flipped: dL/dlogits = softmax - one-hot (the target's logit is pushed up)",
               float(n): f"you summed over the {n} predictions: the loss is their mean, divide by N = {n}",
               n / ids.numel(): f"you divided by batch x seq = {ids.numel()}: the last position predicts nothing, "
                                f"N = batch x (seq - 1) = {n}"}
    for r, why in reasons.items():
        if factor is not None and abs(factor - r) <= RTOL * abs(r):
            raise _Fail(f"off by a factor {factor:.4g}: {why}")
    flat = h.reshape(-1, d)
    same_position = (torch.softmax(flat @ W.T, -1) - torch.nn.functional.one_hot(ids.flatten(), TOY_VOCAB)).T @ flat
    if _factor(got, same_position) is not None:
        raise _Fail("each position's own token is used as its target: position i predicts input_ids[:, i + 1] (the "
                    "next token), so drop the last position's logits and the first token as a target")
    if factor is not None:
        raise _Fail(f"off by a constant factor {factor:.4g}: dlogits = (softmax - one-hot) / N, N = {n}")
    raise _Fail(f"differs from GradientProvenance's output-path gradient: {_gap(got, expected)}")


def _heldout(S: np.ndarray, T: np.ndarray, fold: np.ndarray, centre: str) -> float:
    """The held-out linear score, each held-out fold centred on the fitting rows' means ("fit") or its own ("own")."""
    cos = np.empty(len(S))
    for f in np.unique(fold):
        fit, test = fold != f, fold == f
        ms, mt = S[fit].mean(0), T[fit].mean(0)
        M = np.linalg.lstsq(S[fit] - ms, T[fit] - mt, rcond=None)[0]
        if centre == "own":
            ms, mt = S[test].mean(0), T[test].mean(0)
        a, b = (S[test] - ms) @ M, T[test] - mt
        cos[test] = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.mean())


def _check_heldout(fn: Callable[..., Any]) -> str:
    """02-code: the linear map's held-out mean cosine against the library's, on S with an offset and
    T = (S stretched along one axis) Q + noise + another offset, Q a rotation, in folds of unequal size."""
    rng, n, d, k = np.random.default_rng(0), 34, 8, 3
    S = rng.standard_normal((n, d)) + rng.standard_normal(d)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    T = (S * np.r_[3.0, np.ones(d - 1)]) @ Q + rng.standard_normal((n, d)) + 5.0 * rng.standard_normal(d)
    fold = np.empty(n, dtype=np.int64)  # align_all's folds (seed 0): fold f holds perm[f::k]
    fold[torch.randperm(n, generator=torch.Generator().manual_seed(0)).numpy()] = np.arange(n) % k
    with _student():
        got = _plain(fn(S.copy(), T.copy(), fold.copy()))
    got = np.asarray(got) if isinstance(got, float | int | complex | np.generic) else got
    got = float(_as_tensor(got, (), f"the mean of all {n} tokens' held-out cosines, one float"))
    St, Tt = torch.from_numpy(S), torch.from_numpy(T)
    lib = maps.align_all(St, Tt, ["linear", "orthogonal"], heldout_folds=k, seed=0)
    expected, in_sample = lib["linear"].mean, maps.align_all(St, Tt, ["linear"])["linear"].mean
    if abs(got - expected) <= RTOL:  # a cosine's scale is 1
        return (f"heldout_cosine gives the library's held-out linear score on a toy pair: {expected:.4f} (in-sample "
                f"{in_sample:.4f})")
    per_token = lib["linear"].per_token.numpy()
    mistakes = {
        in_sample: "this is the in-sample score: fit each fold's map on the other folds' tokens only",
        lib["orthogonal"].mean: "this is the orthogonal map's held-out score: fit the linear (least-squares) map",
        _heldout(S, T, fold, "own"): "you centred each held-out fold on its own column means: centre it on the means "
        "of the tokens the map was fitted on (the fold's own means use the tokens being predicted)",
        float(np.mean([per_token[fold == f].mean() for f in range(k)])): "you averaged the folds' means: the folds "
        f"differ in size ({n} tokens in {k} folds), average over the tokens"}
    for value, why in mistakes.items():
        if abs(got - value) <= RTOL:
            raise _Fail(f"mean cosine {got:.4f} where the library gets {expected:.4f}: {why}")
    raise _Fail(f"mean cosine {got:.4f} where the library gets {expected:.4f} (in-sample it is {in_sample:.4f})")


def _check_logit_lens(fn: Callable[..., Any]) -> str:
    """03-code: the logit lens's KL per layer against ``evaluate`` on a tiny model whose final norm has large random
    gains (gains of 1 would hide a second norm; an untrained model's small logits, every KL)."""
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0).eval()
    norm, W, ids = checked_layout(model).final_norm, model.get_output_embeddings().weight, toy_batch(TOY_VOCAB)
    with torch.no_grad():
        norm.weight.mul_(30.0 + 15.0 * torch.randn(norm.weight.shape, generator=torch.Generator().manual_seed(0)))
        out = model(input_ids=ids, output_hidden_states=True)
        hidden, final = [x.clone() for x in out.hidden_states], out.logits.clone()
        with _student():
            got = _plain(fn(tuple(x.clone() for x in hidden), norm, W.detach().clone(), final.clone()))
        n_rows = len(hidden)
        got = _as_tensor(got, (n_rows,), f"one KL per layer, its mean over the positions: shape ({n_rows},)")
        expected = torch.tensor(evaluate(model, ids.flatten(), seq_len=ids.shape[1], max_tokens=ids.numel(),
                                         batch_size=ids.shape[0], num_threads=None).kl_logit_bits.to_numpy())
        if _close(got, expected):
            return ("logit_lens_kl matches the logit-lens KL of tiebias.lens.evaluate on a tiny model, layer by "
                    f"layer ({n_rows} rows, in bits)")
        twice = library_kl_bits(final, norm(hidden[-1]) @ W.T).mean()
        if _close(got[:-1], expected[:-1]) and _close(got[-1:], twice[None]):
            raise _Fail("the last row is off: hidden_states[-1] has already been through the final norm (the model "
                        "returns it normed), so it is the model's own output and its KL is 0; do not norm it again")
        if _close(got[:-1], torch.stack([library_kl_bits(final, h @ W.T).mean() for h in hidden[:-1]])):
            raise _Fail("you applied W to the raw hidden states: the logit lens is the model's own head, the final "
                        "norm first, then W")
        if _close(got, expected * LN2):
            raise _Fail(f"off by a factor 1/ln 2 = {1 / LN2:.3f}: you returned nats; divide by ln 2 for bits")
        reverse = torch.stack([library_kl_bits(norm(h) @ W.T, final).mean() for h in hidden[:-1]])
        if _close(got[:-1], reverse) or _close(got[:-1], reverse * LN2):
            raise _Fail("you computed KL(lens || final): the lens tables measure KL(P || Q), the expectation under P, "
                        "the model's final distribution")
        factor = _factor(got, expected)
        if factor is not None and abs(factor - ids.numel()) <= RTOL * ids.numel():
            raise _Fail(f"off by a factor {factor:.4g}: you summed over the {ids.numel()} positions; take their mean")
        raise _Fail(f"differs from the logit lens's KL per layer: {_gap(got, expected)}")


def _check_output_hook(fn: Callable[..., Any]) -> str:
    """04-code: the student's hook on a tiny tied model: loss unchanged, W.grad = g_in + k g_out from
    ``GradientProvenance``'s path gradients, every other gradient unchanged, and gone after ``remove()``."""
    model = build("tiny", vocab_size=TOY_VOCAB, seed=0)
    with _student():
        handle = fn(model, MODEL_K)
    if not callable(getattr(handle, "remove", None)):
        raise _Fail(f"returned {type(handle).__name__}, not the hook's handle: return what register_forward_hook "
                    "returns (it has .remove(), which takes the hook off)")
    base, W = _reference_pass(), model.get_input_embeddings().weight
    ids = base["ids"]
    with _student("the forward and backward pass with your hook"):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    if abs(float(loss.detach()) - base["loss"]) > RTOL * abs(base["loss"]):
        raise _Fail(f"the loss is {float(loss.detach()):.6g} with your hook, {base['loss']:.6g} without: the forward pass "
                    "must stay the same; only the gradient is scaled")
    if W.grad is None or not bool(torch.isfinite(W.grad).all()):
        raise _Fail("W.grad is missing or has nan or inf values: the output projection must still read W")
    others = {n: p.grad for n, p in model.named_parameters() if p is not W}
    changed = [n for n, g in others.items() if g is None or not _close(g, base["others"][n])]
    if changed:
        if all(g is not None and _close(g, MODEL_K * base["others"][n]) for n, g in others.items()):
            raise _Fail(f"every parameter's gradient is multiplied by k = {MODEL_K:g}: you scaled the gradient at the "
                        "logits (or at h), which flows back into the whole network; scale only what reaches W")
        raise _Fail(f"the gradient of {changed[0]} changed ({len(changed)} parameters in all): only W's "
                    "output-path gradient may change")
    got, g_in, g_out = W.grad.detach(), base["input"], base["output"]
    wrong = {"is k g_in + g_out: the factor is on the input path (the lookup); put it on the output projection":
             MODEL_K * g_in + g_out, "is g_in + g_out: the output path is not scaled": g_in + g_out,
             "is g_in + g_out / k: divide by nothing, multiply by k": g_in + g_out / MODEL_K,
             "is k (g_in + g_out): you scaled all of W's gradient, not only the output path's": MODEL_K * base["total"]}
    if not _close(got, g_in + MODEL_K * g_out):
        why = next((w for w, v in wrong.items() if _close(got, v)), f"differs: {_gap(got, g_in + MODEL_K * g_out)}")
        raise _Fail(f"W.grad {why} (k = {MODEL_K:g}; expected g_in + k g_out)")
    handle.remove()
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    if not _close(W.grad, base["total"]):
        raise _Fail("after handle.remove() W.grad is still scaled: the hook must come off with its handle")
    return (f"scale_output_path keeps the loss, gives W.grad = g_in + k g_out (k = {MODEL_K:g}, the paths as "
            "GradientProvenance splits them), leaves every other gradient alone, and comes off with its handle")


CHECKERS: dict[str, tuple[str, Callable[[Callable[..., Any]], str]]] = {
    "01-code": ("output_path_grad", _check_output_path), "02-code": ("heldout_cosine", _check_heldout),
    "03-code": ("logit_lens_kl", _check_logit_lens), "04-code": ("scale_output_path", _check_output_hook)}
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
