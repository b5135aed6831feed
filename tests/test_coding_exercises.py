"""The coding exercises: every solution passes its check, the stub and known mistakes fail with a message that says
what is wrong, and the rendered notebook cells run top to bottom."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tiebias.config.paths import NOTEBOOKS
from tiebias.teach import CheckResult, check, coding, run_check

EXERCISES = coding.EXERCISES
IDS = list(EXERCISES)

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
ALLOWED_IMPORTS = {"torch", "numpy", "math"}


def _define(ex: coding.CodingExercise, source: str) -> Callable[..., Any]:
    """The exercise's function as defined by a source text."""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{ex.id}>", "exec"), namespace)
    return namespace[ex.function]


def _with_body(ex: coding.CodingExercise, body: str) -> Callable[..., Any]:
    return _define(ex, ex.stub.replace("    raise NotImplementedError\n", body))


@pytest.mark.parametrize("exercise_id", IDS)
def test_solution_passes(exercise_id: str) -> None:
    ex = EXERCISES[exercise_id]
    result = check(exercise_id, _define(ex, ex.solution))
    assert isinstance(result, CheckResult)
    assert result.ok, result.message
    assert str(result).startswith("✓ ") and result.message.startswith(f"{exercise_id} passed")


@pytest.mark.parametrize("exercise_id", IDS)
def test_stub_fails_asking_for_a_body(exercise_id: str) -> None:
    ex = EXERCISES[exercise_id]
    result = check(exercise_id, _define(ex, ex.stub))
    assert not result.ok
    assert "your function raised NotImplementedError: write its body (see the hints)" in result.message
    assert str(result).startswith("✗ ")


@pytest.mark.parametrize("exercise_id", IDS)
def test_known_wrong_answer_fails_with_its_message(exercise_id: str) -> None:
    ex = EXERCISES[exercise_id]
    result = check(exercise_id, _define(ex, ex.wrong))
    assert not result.ok
    assert ex.expected_message in result.message, result.message


@pytest.mark.parametrize(("exercise_id", "body", "expected"), MISTAKES,
                         ids=[f"{m[0]}-{i}" for i, m in enumerate(MISTAKES)])
def test_common_mistakes_are_named(exercise_id: str, body: str, expected: str) -> None:
    result = check(exercise_id, _with_body(EXERCISES[exercise_id], body))
    assert not result.ok
    assert expected in result.message, result.message


def test_every_exercise_has_at_least_two_further_mistakes() -> None:
    counts = {i: sum(m[0] == i for m in MISTAKES) for i in IDS}
    assert min(counts.values()) >= 2, counts


@pytest.mark.parametrize("exercise_id", IDS)
def test_student_errors_never_raise(exercise_id: str) -> None:
    def broken(*_args: Any) -> Any:
        raise IndexError("index 99 is out of bounds")

    result = check(exercise_id, broken)
    assert not result.ok and "your function raised IndexError: index 99 is out of bounds" in result.message
    assert not check(exercise_id, lambda *_args: "a string").ok
    assert not check(exercise_id, None).ok  # type: ignore[arg-type]


def test_unknown_exercise_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'05-code' is not a coding exercise"):
        check("05-code", print)


@pytest.mark.parametrize("exercise_id", IDS)
def test_run_check_prints_and_strict_raises_only_when_wrong(exercise_id: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    ex = EXERCISES[exercise_id]
    assert run_check(exercise_id, _define(ex, ex.solution), strict=True).ok
    assert capsys.readouterr().out.startswith("✓ ")
    assert not run_check(exercise_id, _define(ex, ex.wrong)).ok
    assert capsys.readouterr().out.startswith("✗ ")
    with pytest.raises(AssertionError, match=ex.expected_message.replace("(", r"\(").replace(")", r"\)")):
        run_check(exercise_id, _define(ex, ex.wrong), strict=True)


@pytest.mark.parametrize("exercise_id", IDS)
def test_registry_entries_are_complete(exercise_id: str) -> None:
    ex = EXERCISES[exercise_id]
    assert ex.id == exercise_id and ex.notebook in NOTEBOOKS
    assert 1 <= ex.difficulty <= 3 and 1 <= ex.importance <= 3 and ex.minutes > 0
    assert len(ex.hints) >= 2 and ex.prompt and ex.expected_message
    assert f"{ex.function}(" in ex.prompt  # the prompt gives the signature
    for source in (ex.stub, ex.solution, ex.wrong):
        tree = ast.parse(source)
        assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == [ex.function]
        modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert modules <= ALLOWED_IMPORTS | set(sys.stdlib_module_names), modules
    assert "raise NotImplementedError" in ex.stub and "NotImplementedError" not in ex.solution
    assert ast.get_docstring(next(n for n in ast.parse(ex.stub).body if isinstance(n, ast.FunctionDef)))


def test_marks_line() -> None:
    ex = EXERCISES["01-code"]
    assert ex.marks() == "Difficulty: 🔴🔴⚪ · Importance: 🔵🔵🔵 · Spend up to 15 minutes"


def test_one_exercise_per_notebook() -> None:
    assert sorted(e.notebook for e in EXERCISES.values()) == sorted(NOTEBOOKS)
    with pytest.raises(ValueError, match="not one of"):
        coding.cells("05_other")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_cells_order_ids_and_folding(notebook: str) -> None:
    cells = coding.cells(notebook)
    (ex,) = [e for e in EXERCISES.values() if e.notebook == notebook]
    kinds = ["intro", "stub", "check", "solution-note", "solution"]
    assert [c["id"] for c in cells] == [f"exercise-{ex.id}-{k}" for k in kinds]
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "code", "markdown", "code"]
    intro, stub, check_cell, note, solution = ("".join(c["source"]) for c in cells)
    assert intro.startswith(f"### Coding exercise {ex.id} · {ex.title}\n\n{ex.marks()}\n\n")
    assert intro.count("<details><summary>Hint ") == len(ex.hints) and "<details><summary>Hint 1</summary>" in intro
    assert "<details>" not in note and note == "**Solution** (folded: click the bar on the left to open it)"
    assert "from tiebias.teach import run_check" in check_cell and f'run_check("{ex.id}", {ex.function});' in check_cell
    assert solution.rstrip().endswith(f'run_check("{ex.id}", {ex.function}, strict=True);')
    assert cells[4]["metadata"] == {"jupyter": {"source_hidden": True}}
    for c in cells[1:3]:
        assert c["metadata"] == {}
    for c in cells:
        assert isinstance(c["source"], list) and all(isinstance(line, str) for line in c["source"])
        if c["cell_type"] == "code":
            assert c["execution_count"] is None and c["outputs"] == []


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_cells_run_top_to_bottom(notebook: str, capsys: pytest.CaptureFixture[str]) -> None:
    cells = coding.cells(notebook)
    namespace: dict[str, Any] = {}
    for c in cells[1:3]:
        exec(compile("".join(c["source"]), c["id"], "exec"), namespace)
    assert capsys.readouterr().out.startswith("✗ ")  # the stub's check prints a cross, without raising
    exec(compile("".join(cells[4]["source"]), cells[4]["id"], "exec"), namespace)  # strict: raises if wrong
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
    assert check("04-code", _define(EXERCISES["04-code"], EXERCISES["04-code"].solution)).ok

    def nan_backward(x: Any, k: float) -> Any:
        y = x.clone()
        y.register_hook(lambda g: g * float("nan"))
        return y

    result = check("04-code", nan_backward)
    assert not result.ok and "nan" in result.message and "atol" not in result.message, result.message
