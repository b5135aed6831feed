"""Structure rules a reader relies on: modules readable in one sitting, functions a few named steps."""

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "tiebias"
MODULES = sorted(LIB.rglob("*.py"))
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 80


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_module_fits_one_sitting(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= MAX_MODULE_LINES, f"{path.relative_to(LIB)}: {n} lines; split it by concern"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_functions_are_short(path: Path) -> None:
    tree = ast.parse(path.read_text())
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(LIB)}: {', '.join(long)}; break them into named steps"


def test_every_module_imports() -> None:
    import importlib

    for p in MODULES:
        name = ".".join(("tiebias", *p.relative_to(LIB).with_suffix("").parts)).removesuffix(".__init__")
        importlib.import_module(name)
