"""Structure rules a reader relies on: layers that import only downward, no cycles, private names kept at home,
notebooks that use only what a subpackage exports, and functions a few named steps each."""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "tiebias"
MODULES = sorted(LIB.rglob("*.py"))
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 10
WHY_MORE = "Why so many parameters:"
"""A function over MAX_PARAMETERS says why in its docstring, after these words."""

LAYERS = ("config", "system", "stats", "paper", "data", "run", "models", "train", "align", "lens", "ablate",
          "verdicts", "output", "teach", "study", "nbfilter", "__main__")
"""The declared order, lowest first: a unit (subpackage or top-level module) imports only from itself and the units
before it. ``config`` is the parameter vocabulary and imports no torch; ``study``, ``nbfilter`` (the git filter) and ``__main__``
are entry points."""


def module_name(path: Path) -> str:
    return ".".join(("tiebias", *path.relative_to(LIB).with_suffix("").parts)).removesuffix(".__init__")


NAMES = {module_name(p) for p in MODULES}


def unit_of(module: str) -> str:
    """The layer a module belongs to: its subpackage, or itself for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def imports(path: Path) -> tuple[tuple[str, str, int], ...]:
    """Every tiebias import in a module (top level, inside functions and under TYPE_CHECKING alike):
    (target module, imported name or '', line)."""
    here = module_name(path)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names if a.name.split(".")[0] == "tiebias"]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, here, path.name == "__init__.py")
            if target.split(".")[0] != "tiebias":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub, "", node.lineno) if sub in NAMES else (target, a.name, node.lineno))
    return tuple(out)


def test_every_unit_is_declared() -> None:
    units = {unit_of(m) for m in NAMES} - {"__init__"}
    assert units <= set(LAYERS), f"undeclared units {sorted(units - set(LAYERS))}; add them to LAYERS in order"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_imports_point_down(path: Path) -> None:
    here = unit_of(module_name(path))
    if here == "__init__":
        return
    rank = LAYERS.index(here)
    upward = [f"line {line}: {target} ({unit_of(target)})" for target, _, line in imports(path)
              if unit_of(target) != "__init__" and LAYERS.index(unit_of(target)) > rank]
    assert not upward, f"{path.relative_to(LIB)} ({here}) imports from a later layer: {'; '.join(upward)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_private_names_stay_in_their_unit(path: Path) -> None:
    here = unit_of(module_name(path))
    foreign = [f"line {line}: {target}.{name}" for target, name, line in imports(path)
               if name.startswith("_") and not name.startswith("__") and unit_of(target) != here]
    aliases = {name or target.rsplit(".", 1)[-1]: target for target, name, _ in imports(path) if not name}
    tree = ast.parse(path.read_text())
    foreign += [f"line {n.lineno}: {aliases[n.value.id]}.{n.attr}" for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                and n.attr.startswith("_") and not n.attr.startswith("__")
                and unit_of(aliases[n.value.id]) != here]
    assert not foreign, f"{path.relative_to(LIB)} uses private names of another unit: {'; '.join(foreign)}"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in NAMES}
    for p in MODULES:
        here = module_name(p)
        for target, _, _ in imports(p):
            # importing a name from a package counts as importing the package's __init__
            if target in NAMES and target != here and not here.startswith(target + "."):
                graph[here].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles (type-only imports count): {cycles}"


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_functions_are_short(path: Path) -> None:
    tree = ast.parse(path.read_text())
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(LIB)}: {', '.join(long)}; break them into named steps"


def long_signatures(source: str) -> list[str]:
    """Functions of ``source`` with more than MAX_PARAMETERS parameters (self and cls not counted) and no note why."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None]
        n = len([x for x in names if x not in ("self", "cls")])
        if n > MAX_PARAMETERS and WHY_MORE not in (ast.get_docstring(node) or ""):
            out.append(f"{node.name} ({n} parameters)")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_signatures_are_short(path: Path) -> None:
    """Settings that travel together are one object (TrainConfig, LensSettings, LensFit, Headline), not ten keywords."""
    long = long_signatures(path.read_text())
    assert not long, (f"{path.relative_to(LIB)}: {', '.join(long)}; group settings that travel together in a "
                      f"dataclass, or say in the docstring '{WHY_MORE} ...'")


def test_the_signature_count_finds_a_long_one() -> None:
    many = ", ".join(f"a{i}" for i in range(MAX_PARAMETERS))
    assert long_signatures(f"def f(self, {many}): pass") == []
    assert long_signatures(f"def f({many}, *, b): pass") == [f"f ({MAX_PARAMETERS + 1} parameters)"]
    assert long_signatures(f"def f({many}, **kw): pass") == [f"f ({MAX_PARAMETERS + 1} parameters)"]
    assert long_signatures(f'def f({many}, b):\n    """{WHY_MORE} they are the fields of a file."""') == []


def test_every_module_imports() -> None:
    import importlib

    for name in sorted(NAMES):
        importlib.import_module(name)


UNTRUSTED_READERS = ("lib", "scripts", "bench")
"""Code that opens files of run folders and users' model folders: untrusted, so never unpickled in full."""


def unsafe_loads(source: str) -> list[str]:
    """Every ``torch.load`` (or ``load`` imported from torch) without ``weights_only=True``, and any call passing
    ``weights_only`` anything but ``True``: 'line N: code'."""
    tree = ast.parse(source)
    from_torch = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "torch"
                  for a in n.names if a.name == "load"}
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        is_load = (isinstance(f, ast.Attribute) and f.attr == "load" and ast.unparse(f.value) in ("torch",
                   "torch.serialization")) or (isinstance(f, ast.Name) and f.id in from_torch)
        flag = [k.value for k in node.keywords if k.arg == "weights_only"]
        safe = all(isinstance(v, ast.Constant) and v.value is True for v in flag)
        if not safe or (is_load and not flag):
            bad.append(f"line {node.lineno}: {ast.unparse(node)[:100]}")
    return bad


def test_torch_files_are_loaded_as_plain_data() -> None:
    """A pickle can run code when it is loaded: every torch.load reads tensors and plain values only."""
    bad = [f"{p.relative_to(ROOT)} {where}" for d in UNTRUSTED_READERS for p in sorted((ROOT / d).rglob("*.py"))
           for where in unsafe_loads(p.read_text())]
    assert not bad, f"torch.load without weights_only=True: {bad}"


def test_the_load_scan_finds_unsafe_loads() -> None:
    assert unsafe_loads("import torch\ntorch.load(p, weights_only=True)\nf(weights_only=True)\n") == []
    src = ("import torch\nfrom torch import load as tl\ntorch.load(p)\ntorch.load(p, weights_only=False)\n"
           "tl(p)\nx.from_pretrained(p, weights_only=flag)\ntorch.serialization.load(p)\n")
    assert [b.split(":")[0] for b in unsafe_loads(src)] == ["line 3", "line 4", "line 5", "line 6", "line 7"]


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TOP_MODULES = ("stats", "paper")
"""Top-level modules a notebook may import names from directly (one concern each, no subpackage around them)."""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_use_what_subpackages_export(path: Path) -> None:
    """A notebook imports names a subpackage's ``__init__`` lists in ``__all__`` (or a top-level module's names)."""
    import importlib.util

    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    bad = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import) and any(a.name.startswith("tiebias") for a in node.names):
            bad.append(f"import {', '.join(a.name for a in node.names)} (use from ... import)")
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tiebias")):
            continue
        if node.module == "tiebias":
            bad += [f"tiebias.{a.name}" for a in node.names if a.name not in TOP_MODULES]
            continue
        if node.module.removeprefix("tiebias.") in TOP_MODULES:
            continue
        spec = importlib.util.find_spec(node.module)
        if spec is None or not spec.submodule_search_locations:
            bad.append(f"from {node.module} import ... (import from the subpackage, not a module inside it)")
            continue
        exported = set(getattr(importlib.import_module(node.module), "__all__", ()))
        bad += [f"{node.module}.{a.name}" for a in node.names if a.name not in exported]
    assert not bad, f"{path.name} imports names no subpackage exports: {bad}"
