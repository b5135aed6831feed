"""The coding exercises, written in the notebooks: every solution passes its check, the stub and known mistakes fail
with a message that says what is wrong, and the notebook's exercise cells run top to bottom."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Callable
from typing import Any

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
    ("01-code", "    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])\n"
                "    t = input_ids[:, 1:].reshape(-1)\n"
                "    d = torch.softmax(h @ W.T, -1)\n"
                "    d[torch.arange(len(t)), t] -= 1\n"
                "    return h.T @ (d / len(t))\n", "the result is transposed"),
    ("01-code", "    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])\n"
                "    t = input_ids[:, 1:].reshape(-1)\n"
                "    return -torch.nn.functional.one_hot(t, W.shape[0]).float().T @ h / len(t)\n",
     "no position's next token are zero: the softmax gives every row"),
    ("01-code", "    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])\n"
                "    t = input_ids[:, 1:].reshape(-1)\n"
                "    d = torch.softmax(h @ W.T, -1)\n"
                "    d[torch.arange(len(t)), t] -= 1\n"
                "    return d.T @ h\n", "you summed over the 124 predictions"),
    ("01-code", "    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])\n"
                "    t = input_ids[:, 1:].reshape(-1)\n"
                "    d = torch.softmax(h @ W.T, -1)\n"
                "    d[torch.arange(len(t)), t] -= 1\n"
                "    return d.T @ h / input_ids.numel()\n", "the last position predicts nothing"),
    ("01-code", "    h = hidden.reshape(-1, hidden.shape[-1])\n"
                "    t = input_ids.reshape(-1)\n"
                "    d = torch.softmax(h @ W.T, -1)\n"
                "    d[torch.arange(len(t)), t] -= 1\n"
                "    return d.T @ h / len(t)\n", "position i predicts input_ids[:, i + 1]"),
    ("01-code", "    return W.clone()\n", "differs from GradientProvenance's output-path gradient"),
    ("02-code", "    Sc, Tc = S - S.mean(0), T - T.mean(0)\n"
                "    a = Sc @ np.linalg.lstsq(Sc, Tc, rcond=None)[0]\n"
                "    return float(((a * Tc).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(Tc, axis=1)).mean())\n",
     "this is the in-sample score"),
    ("02-code", "    cos = np.empty(len(S))\n"
                "    for f in np.unique(fold):\n"
                "        a, b = S[fold != f] - S[fold != f].mean(0), T[fold != f] - T[fold != f].mean(0)\n"
                "        U, _, Vt = np.linalg.svd(a.T @ b)\n"
                "        x = (S[fold == f] - S[fold != f].mean(0)) @ U @ Vt\n"
                "        y = T[fold == f] - T[fold != f].mean(0)\n"
                "        cos[fold == f] = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)\n"
                "    return float(cos.mean())\n", "the orthogonal map's held-out score"),
    ("02-code", "    means = []\n"
                "    for f in np.unique(fold):\n"
                "        ms, mt = S[fold != f].mean(0), T[fold != f].mean(0)\n"
                "        M = np.linalg.lstsq(S[fold != f] - ms, T[fold != f] - mt, rcond=None)[0]\n"
                "        x, y = (S[fold == f] - ms) @ M, T[fold == f] - mt\n"
                "        means.append(((x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)).mean())\n"
                "    return float(np.mean(means))\n", "you averaged the folds' means"),
    ("02-code", "    cos = np.empty(len(S))\n"
                "    for f in np.unique(fold):\n"
                "        ms, mt = S[fold != f].mean(0), T[fold != f].mean(0)\n"
                "        M = np.linalg.lstsq(S[fold != f] - ms, T[fold != f] - mt, rcond=None)[0]\n"
                "        x, y = (S[fold == f] - ms) @ M, T[fold == f] - mt\n"
                "        cos[fold == f] = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)\n"
                "    return cos\n", "returned shape (34,) where () was expected"),
    ("02-code", "    return 'high'\n", "returned str: return the mean of all 34"),
    ("03-code", "    log_p = torch.log_softmax(final_logits, -1)\n"
                "    rows = [torch.log_softmax(final_norm(h) @ W.T, -1) for h in hidden_states]\n"
                "    return torch.stack([(log_p.exp() * (log_p - q)).sum(-1).mean() / math.log(2) for q in rows])\n",
     "do not norm it again"),
    ("03-code", "    log_p = torch.log_softmax(final_logits, -1)\n"
                "    rows = [torch.log_softmax(h @ W.T, -1) for h in hidden_states[:-1]] + [log_p]\n"
                "    return torch.stack([(log_p.exp() * (log_p - q)).sum(-1).mean() / math.log(2) for q in rows])\n",
     "the final norm first, then W"),
    ("03-code", "    log_p = torch.log_softmax(final_logits, -1)\n"
                "    rows = [torch.log_softmax(final_norm(h) @ W.T, -1) for h in hidden_states[:-1]] + [log_p]\n"
                "    return torch.stack([(q.exp() * (q - log_p)).sum(-1).mean() / math.log(2) for q in rows])\n",
     "you computed KL(lens || final)"),
    ("03-code", "    log_p = torch.log_softmax(final_logits, -1)\n"
                "    rows = [torch.log_softmax(final_norm(h) @ W.T, -1) for h in hidden_states[:-1]] + [log_p]\n"
                "    return torch.stack([(log_p.exp() * (log_p - q)).sum(-1).sum() / math.log(2) for q in rows])\n",
     "you summed over the 128 positions"),
    ("03-code", "    log_p = torch.log_softmax(final_logits, -1)\n"
                "    rows = [torch.log_softmax(final_norm(h) @ W.T, -1) for h in hidden_states[:-1]] + [log_p]\n"
                "    return torch.stack([(log_p.exp() * (log_p - q)).sum(-1) / math.log(2) for q in rows])\n",
     "returned shape (3, 4, 32) where (3,) was expected"),
    ("04-code", "    def scale(module, args, output):\n"
                "        w = module.weight.view_as(module.weight)\n"
                "        w.register_hook(lambda g: g * k)\n"
                "        return torch.nn.functional.embedding(args[0], w)\n"
                "    return model.get_input_embeddings().register_forward_hook(scale)\n",
     "the factor is on the input path"),
    ("04-code", "    def scale(module, args, output):\n"
                "        output.register_hook(lambda g: g * k)\n"
                "    return model.get_output_embeddings().register_forward_hook(scale)\n",
     "you scaled the gradient at the logits"),
    ("04-code", "    return model.get_output_embeddings().weight.register_hook(lambda g: g * k)\n",
     "you scaled all of W's gradient"),
    ("04-code", "    def scale(module, args, output):\n"
                "        return output * 2\n"
                "    return model.get_output_embeddings().register_forward_hook(scale)\n", "the forward pass must stay"),
    ("04-code", "    def scale(module, args, output):\n"
                "        w = module.weight.view_as(module.weight)\n"
                "        w.register_hook(lambda g: g * k)\n"
                "        return torch.nn.functional.linear(args[0], w)\n"
                "    model.get_output_embeddings().register_forward_hook(scale)\n",
     "returned NoneType, not the hook's handle"),
]
# Each exercise's most common mistake, as the lesson plan's pairs meet it first.
WRONG = {
    "01-code": ("    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])\n"
                "    t = input_ids[:, 1:].reshape(-1)\n"
                "    d = torch.softmax(h @ W.T, -1)\n"
                "    d[torch.arange(len(t)), t] -= 1\n"
                "    return -d.T @ h / len(t)\n", "the sign is flipped"),
    "02-code": ("    cos = np.empty(len(S))\n"
                "    for f in np.unique(fold):\n"
                "        a, b = S[fold != f] - S[fold != f].mean(0), T[fold != f] - T[fold != f].mean(0)\n"
                "        M = np.linalg.lstsq(a, b, rcond=None)[0]\n"
                "        x = (S[fold == f] - S[fold == f].mean(0)) @ M\n"
                "        y = T[fold == f] - T[fold == f].mean(0)\n"
                "        cos[fold == f] = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)\n"
                "    return float(cos.mean())\n", "centred each held-out fold on its own column means"),
    "03-code": ("    log_p = torch.log_softmax(final_logits, -1)\n"
                "    rows = [torch.log_softmax(final_norm(h) @ W.T, -1) for h in hidden_states[:-1]] + [log_p]\n"
                "    return torch.stack([(log_p.exp() * (log_p - q)).sum(-1).mean() for q in rows])\n",
     "1/ln 2 = 1.443: you returned nats"),
    "04-code": ("    def scale(module, args, output):\n"
                "        return None\n"
                "    return model.get_output_embeddings().register_forward_hook(scale)\n",
     "the output path is not scaled"),
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


def _output_path(hidden: Any, W: Any, input_ids: Any) -> Any:
    import torch

    h, t = hidden[:, :-1].reshape(-1, hidden.shape[-1]), input_ids[:, 1:].reshape(-1)
    d = torch.softmax(h @ W.T, -1)
    d[torch.arange(len(t)), t] -= 1
    return d.T @ h / len(t)


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

    cases = {"float16": (lambda *a: _output_path(*a).half(), ["torch.float16", "float32"]),
             "int": (lambda *a: _output_path(*a).long(), ["integer", "torch.int64", "float32"]),
             "complex": (lambda *a: _output_path(*a) + 1j * torch.randn(_output_path(*a).shape),
                         ["complex", "real"]),
             "subclass": (lambda *a: torch.zeros_like(_output_path(*a)).as_subclass(Agreeable), ["differs"])}
    for name, (fn, words) in cases.items():
        result = check("01-code", fn)
        assert not result.ok and all(w in result.message for w in words), (name, result.message)
        assert "constant factor 0" not in result.message, (name, result.message)
    assert check("01-code", _output_path).ok
    assert check("01-code", lambda *a: _output_path(*a).double()).ok  # more precision than asked is fine
    result = check("02-code", lambda S, T, fold: 0.8 + 0.1j)
    assert not result.ok and "complex" in result.message, result.message


def test_the_reference_is_computed_afresh_and_nan_is_named() -> None:
    """Defect 14: zeroing the cached reference passed a wrong answer (zeros), then failed every correct one until the
    kernel restarted; a NaN backward read "atol must be greater than or equal to zero, but got -nan"."""
    import torch

    def zeroing(hidden: Any, W: Any, input_ids: Any) -> Any:
        for factors in ({}, {"output_factor": coding.MODEL_K}):
            for t in getattr(coding, "_reference_pass", lambda **_f: {})(**factors).values():
                if isinstance(t, torch.Tensor):
                    t.zero_()
        return torch.zeros_like(W)

    assert not check("01-code", zeroing).ok
    assert check("01-code", _output_path).ok
    assert check("04-code", _solution("04-code")).ok

    def nan_backward(model: Any, k: float) -> Any:
        def project(module: Any, args: Any, output: Any) -> Any:
            w = module.weight.view_as(module.weight)
            w.register_hook(lambda g: g * float("nan"))
            return torch.nn.functional.linear(args[0], w)
        return model.get_output_embeddings().register_forward_hook(project)

    result = check("04-code", nan_backward)
    assert not result.ok and "nan" in result.message and "atol" not in result.message, result.message
