"""The coding exercises, written in the notebooks: every solution passes its check, the stub and known mistakes fail
with a message that says what is wrong, and the notebook's exercise cells run top to bottom."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tiebias.config.paths import NOTEBOOKS, notebooks_dir
from tiebias.teach import CheckResult, check, coding, run_check

IDS = list(coding.CHECKERS)


def cells(exercise_id: str) -> dict[str, dict[str, Any]]:
    """The exercise's cells in its notebook (``NN-code`` lives in notebook NN), by kind: intro, stub, check, ..."""
    name = next(n for n in NOTEBOOKS if n.startswith(exercise_id[:2]))
    nb = json.loads((notebooks_dir() / f"{name}.ipynb").read_text())
    prefix = f"exercise-{exercise_id}-"
    return {c["id"].removeprefix(prefix): c for c in nb["cells"] if c["id"].startswith(prefix)}


def source(exercise_id: str, kind: str) -> str:
    return "".join(cells(exercise_id)[kind]["source"])


def function(exercise_id: str) -> str:
    return coding.CHECKERS[exercise_id][0]


# Wrong answers a student writes, beyond each exercise's own known-wrong one: (exercise, body, message part).
# Each body replaces the stub's `raise NotImplementedError`; the message part is what the check must say.
MISTAKES: list[tuple[str, str, str]] = [
    ("01-code", "    d = grad_at_embeddings.shape[-1]\n"
                "    out = torch.zeros(vocab_size, d).index_add_(0, input_ids.reshape(-1), "
                "grad_at_embeddings.reshape(-1, d))\n"
                "    counts = torch.bincount(input_ids.reshape(-1), minlength=vocab_size)\n"
                "    return out / counts.clamp(min=1)[:, None]\n", "mean of their positions' gradients"),
    ("01-code", "    return grad_at_embeddings.reshape(-1, grad_at_embeddings.shape[-1])\n",
     "returned shape (128, 32) where (64, 32) was expected"),
    ("01-code", "    d = grad_at_embeddings.shape[-1]\n"
                "    out = torch.zeros(vocab_size, d)\n"
                "    return out.index_add_(0, input_ids.reshape(-1), grad_at_embeddings.reshape(-1, d)).T\n",
     "transposed"),
    ("01-code", "    d = grad_at_embeddings.shape[-1]\n"
                "    out = torch.zeros(vocab_size, d)\n"
                "    out.index_add_(0, input_ids.reshape(-1), grad_at_embeddings.reshape(-1, d))\n"
                "    return out / input_ids.numel()\n", "off by a constant factor 0.007812"),
    ("01-code", "    d = grad_at_embeddings.shape[-1]\n"
                "    out = 1e-3 * torch.randn(vocab_size, d)\n"
                "    return out.index_add_(0, input_ids.reshape(-1), grad_at_embeddings.reshape(-1, d))\n",
     "absent from the batch are not zero"),
    ("02-code", "    U, _, Vt = np.linalg.svd((S - S.mean(0)).T @ (T - T.mean(0)))\n"
                "    return Vt.T @ U.T\n", "you returned the transpose"),
    ("02-code", "    return np.linalg.lstsq(S - S.mean(0), T - T.mean(0), rcond=None)[0]\n",
     "W is not orthogonal (this is the least-squares map"),
    ("02-code", "    U, s, Vt = np.linalg.svd((S - S.mean(0)).T @ (T - T.mean(0)))\n"
                "    return U @ np.diag(s) @ Vt\n", "you kept the singular values"),
    ("02-code", "    U, _, Vt = np.linalg.svd((S - S.mean(0)).T @ (T - T.mean(0)))\n"
                "    return (S - S.mean(0)) @ U @ Vt\n", "returned shape (200, 8) where (8, 8) was expected"),
    ("02-code", "    return [[1.0]]\n", "returned list, not a numpy array"),
    ("03-code", "    log_p = torch.log_softmax(p_logits, dim=-1)\n"
                "    log_q = torch.log_softmax(q_logits, dim=-1)\n"
                "    return (log_q.exp() * (log_q - log_p)).sum(-1) / math.log(2)\n", "you computed KL(Q || P):"),
    ("03-code", "    log_p = torch.log_softmax(p_logits, dim=-1)\n"
                "    log_q = torch.log_softmax(q_logits, dim=-1)\n"
                "    return (log_q.exp() * (log_q - log_p)).sum(-1)\n", "KL(Q || P) (and in nats, not bits)"),
    ("03-code", "    p = torch.softmax(p_logits, dim=-1)\n"
                "    q = torch.softmax(q_logits, dim=-1)\n"
                "    return (p * (p.log() - q.log())).sum(-1) / math.log(2)\n", "use log_softmax"),
    ("03-code", "    p = p_logits.double().exp() / p_logits.double().exp().sum(-1, keepdim=True)\n"
                "    q = q_logits.double().exp() / q_logits.double().exp().sum(-1, keepdim=True)\n"
                "    return (p * (p / q).log()).sum(-1) / math.log(2)\n", "returned nan or inf for logits up to"),
    ("03-code", "    log_p = torch.log_softmax(p_logits, dim=-1)\n"
                "    log_q = torch.log_softmax(q_logits, dim=-1)\n"
                "    return (log_p.exp() * (log_p - log_q)).sum(-1).mean() / math.log(2)\n",
     "returned a single number where one KL per position, shape (2, 7)"),
    ("03-code", "    log_p = torch.log_softmax(p_logits, dim=-1)\n"
                "    log_q = torch.log_softmax(q_logits, dim=-1)\n"
                "    return log_p.exp() * (log_p - log_q) / math.log(2)\n", "the logits' shape: sum the terms"),
    ("03-code", "    log_p = torch.log_softmax(p_logits, dim=-1)\n"
                "    log_q = torch.log_softmax(q_logits, dim=-1)\n"
                "    return (log_p.exp() * (log_p - log_q)).sum(-1) / math.log(10)\n", "off by a constant factor 0.301"),
    ("04-code", "    return x.clone()\n", "unchanged (factor 1, not k = 3)"),
    ("04-code", "    return x.detach()\n", "does not require grad"),
    ("04-code", "    return x.detach() * k - x * (k - 1)\n", "multiplied by -2, not by k = 3"),
    ("04-code", "    y = x.clone()\n"
                "    y.register_hook(lambda g: g / k)\n"
                "    return y\n", "multiplied by 0.3333, not by k = 3"),
    ("04-code", "    return x + 0.1\n", "the forward values differ from x"),
]
# Each exercise's most common mistake, as the lesson plan's pairs meet it first.
WRONG = {
    "01-code": ("    d = grad_at_embeddings.shape[-1]\n"
                "    out = torch.zeros(vocab_size, d, dtype=grad_at_embeddings.dtype)\n"
                "    out[input_ids.reshape(-1)] = grad_at_embeddings.reshape(-1, d)\n"
                "    return out\n", "appear more than once"),
    "02-code": ("    U, _, Vt = np.linalg.svd(S.T @ T)\n    return U @ Vt\n", "centre them first"),
    "03-code": ("    log_p = torch.log_softmax(p_logits.float(), dim=-1)\n"
                "    log_q = torch.log_softmax(q_logits.float(), dim=-1)\n"
                "    return (log_p.exp() * (log_p - log_q)).sum(-1)\n", "1/ln 2 = 1.443: you returned nats"),
    "04-code": ("    return x * k\n", "forward pass must return x unchanged"),
}
MISTAKES += [(i, body, message) for i, (body, message) in WRONG.items()]
ALLOWED_IMPORTS = {"torch", "numpy", "math"}


def _define(exercise_id: str, text: str) -> Callable[..., Any]:
    """The exercise's function as defined by a source text."""
    namespace: dict[str, Any] = {}
    exec(compile(text, f"<{exercise_id}>", "exec"), namespace)
    return namespace[function(exercise_id)]


def _with_body(exercise_id: str, body: str) -> Callable[..., Any]:
    return _define(exercise_id, source(exercise_id, "stub").replace("    raise NotImplementedError", body))


def _solution(exercise_id: str) -> Callable[..., Any]:
    """The folded solution's function (the cell without its own strict check)."""
    return _define(exercise_id, source(exercise_id, "solution").split("from tiebias.teach import run_check")[0])


@pytest.mark.parametrize("exercise_id", IDS)
def test_solution_passes(exercise_id: str) -> None:
    result = check(exercise_id, _solution(exercise_id))
    assert isinstance(result, CheckResult)
    assert result.ok, result.message
    assert str(result).startswith("✓ ") and result.message.startswith(f"{exercise_id} passed")


@pytest.mark.parametrize("exercise_id", IDS)
def test_stub_fails_asking_for_a_body(exercise_id: str) -> None:
    result = check(exercise_id, _define(exercise_id, source(exercise_id, "stub")))
    assert not result.ok
    assert "your function raised NotImplementedError: write its body (see the hints)" in result.message
    assert str(result).startswith("✗ ")


@pytest.mark.parametrize(("exercise_id", "body", "expected"), MISTAKES,
                         ids=[f"{m[0]}-{i}" for i, m in enumerate(MISTAKES)])
def test_common_mistakes_are_named(exercise_id: str, body: str, expected: str) -> None:
    result = check(exercise_id, _with_body(exercise_id, body))
    assert not result.ok
    assert expected in result.message, result.message


def test_every_exercise_has_at_least_three_known_mistakes() -> None:
    counts = {i: sum(m[0] == i for m in MISTAKES) for i in IDS}
    assert min(counts.values()) >= 3, counts


@pytest.mark.parametrize("exercise_id", IDS)
def test_student_errors_never_raise(exercise_id: str) -> None:
    def broken(*_args: Any) -> Any:
        raise IndexError("index 99 is out of bounds")

    result = check(exercise_id, broken)
    assert not result.ok and "your function raised IndexError: index 99 is out of bounds" in result.message
    assert not check(exercise_id, lambda *_args: "a string").ok
    result = check(exercise_id, None)  # type: ignore[arg-type]
    assert not result.ok and f"expected the function {function(exercise_id)}, got NoneType" in result.message


def test_unknown_exercise_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'05-code' is not a coding exercise"):
        check("05-code", print)


@pytest.mark.parametrize("exercise_id", IDS)
def test_run_check_prints_and_strict_raises_only_when_wrong(exercise_id: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    body, message = WRONG[exercise_id]
    assert run_check(exercise_id, _solution(exercise_id), strict=True).ok
    assert capsys.readouterr().out.startswith("✓ ")
    assert not run_check(exercise_id, _with_body(exercise_id, body)).ok
    assert capsys.readouterr().out.startswith("✗ ")
    with pytest.raises(AssertionError, match=re.escape(message)):
        run_check(exercise_id, _with_body(exercise_id, body), strict=True)


@pytest.mark.parametrize("exercise_id", IDS)
def test_each_notebook_holds_its_exercise_in_order_folded_and_complete(exercise_id: str) -> None:
    """Intro (heading, marks, the signature, folded hints), stub, check, solution note, folded solution; the stub and
    solution define only the function, with a docstring, importing only torch, numpy, math and the standard library."""
    mine = cells(exercise_id)
    assert list(mine) == ["intro", "stub", "check", "solution-note", "solution"]
    assert [c["cell_type"] for c in mine.values()] == ["markdown", "code", "code", "markdown", "code"]
    intro, name = source(exercise_id, "intro"), function(exercise_id)
    assert re.match(rf"### Coding exercise {exercise_id} · .+\n\nDifficulty: [🔴⚪]{{3}} · Importance: [🔵⚪]{{3}} · "
                    r"Spend up to \d+ minutes\n\n", intro), intro[:200]
    assert intro.count("<details><summary>Hint ") >= 2 and f"`{name}(" in intro  # the prompt gives the signature
    assert source(exercise_id, "solution-note") == "**Solution** (folded: click the bar on the left to open it)"
    assert source(exercise_id, "check").endswith(f'run_check("{exercise_id}", {name});')
    assert source(exercise_id, "solution").rstrip().endswith(f'run_check("{exercise_id}", {name}, strict=True);')
    assert mine["solution"]["metadata"] == {"jupyter": {"source_hidden": True}}
    assert mine["stub"]["metadata"] == mine["check"]["metadata"] == {}
    for text in (source(exercise_id, "stub"), source(exercise_id, "solution").split("from tiebias.teach")[0]):
        tree = ast.parse(text)
        assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == [name]
        modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert modules <= ALLOWED_IMPORTS | set(sys.stdlib_module_names), modules
        assert ast.get_docstring(next(n for n in tree.body if isinstance(n, ast.FunctionDef)))
    assert "raise NotImplementedError" in source(exercise_id, "stub")
    assert "NotImplementedError" not in source(exercise_id, "solution")


def test_one_coding_exercise_per_notebook() -> None:
    assert [i[:2] for i in IDS] == [n[:2] for n in NOTEBOOKS]


@pytest.mark.parametrize("exercise_id", IDS)
def test_cells_run_top_to_bottom(exercise_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {}
    for kind in ("stub", "check"):
        exec(compile(source(exercise_id, kind), kind, "exec"), namespace)
    assert capsys.readouterr().out.startswith("✗ ")  # the stub's check prints a cross, without raising
    exec(compile(source(exercise_id, "solution"), "solution", "exec"), namespace)  # strict: raises if wrong
    assert capsys.readouterr().out.startswith("✓ ")


def _input_path(grad_at_embeddings: Any, input_ids: Any, vocab_size: int) -> Any:
    import torch

    d = grad_at_embeddings.shape[-1]
    return torch.zeros(vocab_size, d).index_add_(0, input_ids.reshape(-1), grad_at_embeddings.reshape(-1, d))


def test_answers_that_are_not_real_float32_tensors_are_named_not_passed() -> None:
    """Defect 14: float16 failed with only a largest difference, an int cast read "off by a constant factor 0", a
    complex tensor with a random imaginary part and a Tensor whose allclose says True passed a wrong answer."""
    import torch

    class Agreeable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            if func in (torch.allclose, torch.Tensor.allclose, torch.isclose, torch.equal):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    cases = {"float16": (lambda *a: _input_path(*a).half(), ["torch.float16", "float32"]),
             "int": (lambda *a: _input_path(*a).long(), ["integer", "torch.int64", "float32"]),
             "complex": (lambda *a: _input_path(*a) + 1j * torch.randn(_input_path(*a).shape),
                         ["complex", "real"]),
             "subclass": (lambda *a: torch.zeros_like(_input_path(*a)).as_subclass(Agreeable), ["differs"])}
    for name, (fn, words) in cases.items():
        result = check("01-code", fn)
        assert not result.ok and all(w in result.message for w in words), (name, result.message)
        assert "constant factor 0" not in result.message, (name, result.message)
    assert check("01-code", _input_path).ok
    assert check("01-code", lambda *a: _input_path(*a).double()).ok  # more precision than asked is fine
    m = np.linalg.qr(np.random.default_rng(0).standard_normal((8, 8)))[0]
    result = check("02-code", lambda S, T: m + 1j * np.ones_like(m))
    assert not result.ok and "complex" in result.message, result.message


def test_the_reference_is_computed_afresh_and_nan_is_named() -> None:
    """Defect 14: zeroing the cached reference passed a wrong answer (zeros), then failed every correct one until the
    kernel restarted; a NaN backward read "atol must be greater than or equal to zero, but got -nan"."""
    import torch

    def zeroing(grad_at_embeddings: Any, input_ids: Any, vocab_size: int) -> Any:
        for k in (1.0, coding.MODEL_K):
            for t in getattr(coding, "_reference_pass", lambda _k: {})(k).values():
                t.zero_()
        return torch.zeros(vocab_size, grad_at_embeddings.shape[-1])

    assert not check("01-code", zeroing).ok
    assert check("01-code", _input_path).ok
    assert check("04-code", _solution("04-code")).ok

    def nan_backward(x: Any, k: float) -> Any:
        y = x.clone()
        y.register_hook(lambda g: g * float("nan"))
        return y

    result = check("04-code", nan_backward)
    assert not result.ok and "nan" in result.message and "atol" not in result.message, result.message
