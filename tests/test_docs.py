"""The docs name only what exists: modules, functions and files of the kit, its parameters, make targets, shipped
profiles, and one run time per profile.

README.md, GLOSSARY.md, data/README.md (and TEACHING.md when present) are read as text; what they name is resolved
against the real code without importing it (the package is parsed with ``ast``, so the test stays fast and loads no
torch): a dotted name must be a module of ``tiebias`` or something a module binds (following its imports), a path
under a repository folder must exist, a parameter must be a key of ``tiebias.config.params.PARAMS``, a ``make``
target must be a rule of the Makefile. The extraction rules are narrow on purpose (what is checked is said at each
rule); the few names they would misread are listed in ``ALLOWED`` / ``EXTERNAL_ROOTS``, each with its reason.

The library functions the notebooks call document their arguments and what they return (Google-style ``Args:``
and ``Returns:`` sections), read the same way: the notebooks' code is parsed and each name they import from the kit
is followed to its definition.

Not repeated here: the parameter table's content (``tests/test_vocabulary.py`` compares it with the generated one),
the class profile's run time in README and Makefile (``tests/test_class_profile.py``), the walkthrough's cells
(``tests/test_walkthrough.py``) and the tested versions (``tests/test_install.py``).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import json
import re
import shlex
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tiebias.config.params import PARAMS

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "lib"
PACKAGE = LIB / "tiebias"
DOCS = ("README.md", "GLOSSARY.md", "data/README.md", "TEACHING.md")  # TEACHING.md only when present
# places that may state a profile's run time (check 4); Makefile: its comments only
TIME_PLACES = ("README.md", "TEACHING.md", "walkthrough/README.md", "Makefile")
# a path is checked when it starts with one of these repository folders (runs/ is generated, so never checked)
REPO_DIRS = ("bench", "data", "lib", "notebooks", "scripts", "tests", "walkthrough")
# a dotted name whose last part is one of these is a file name (config.json, study.py), not an attribute
FILE_SUFFIXES = {"csv", "gz", "html", "ipynb", "json", "jsonl", "md", "npy", "parquet", "png", "py", "toml", "txt",
                 "yaml", "yml", "pt", "safetensors", "tar", "zip", "lock", "cfg", "ini", "sh"}

# dotted names of other libraries the docs mention: their first part -> why it is not the kit's
EXTERNAL_ROOTS = {
    "torch": "PyTorch's own API (`torch.compile`)",
    "TunedLens": "the tuned_lens package's class (`TunedLens.from_model_and_pretrained`)",
}
# a name the notebooks hold as an instance, not a module: name -> the class its attributes are looked up on
INSTANCE_ALIASES = {
    "run": ("tiebias.run.Run",),  # the notebooks' `run = Run(...)`: `run.save_table` is Run's method
}
# exact code spans the rules would misread -> why they are right as written
ALLOWED = {
    "-p step 5": "README's example of a papermill name the notebook does not declare (and that is refused)",
    "weights_only=True": "torch.load's keyword, not a kit parameter",
}
# `--set NAME=VALUE`, `SET="name=value ..."`: the documented shape of an override, not a parameter
PLACEHOLDER_NAMES = {"name", "NAME"}


@dataclass(frozen=True)
class Problem:
    kind: str  # "name", "file", "parameter", "make", "profile", "time"
    doc: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: `{self.name}`: {self.why}"


@dataclass(frozen=True)
class Span:
    line: int
    text: str  # whitespace collapsed to single spaces
    fenced: bool  # a line of a fenced code block (read as shell), else an inline code span


# --- reading the docs ---------------------------------------------------------------------------------------------


def spans(text: str) -> list[Span]:
    """Inline code spans (possibly wrapped over lines) and the lines of fenced code blocks, with line numbers."""
    out, prose, fenced = [], [], False
    for number, line in enumerate(text.split("\n"), 1):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            prose.append("")
        elif fenced:
            out.append(Span(number, " ".join(line.split("#", 1)[0].split()), True))  # a shell comment is prose
            prose.append("")
        else:
            prose.append(line)
    body = "\n".join(prose)
    for m in re.finditer(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", body, re.S):  # a span never crosses a blank line
        out.append(Span(body.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split()), False))
    return out


BOUNDARY = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+(?=[A-Z*`(\[])|(?<=;)\s+")


def sentences(text: str) -> Iterator[tuple[int, str]]:
    """Sentences (and clauses after ';') of the prose, each with the line it starts on; a table row, a list item
    and a heading are sentences of their own; fenced blocks are skipped."""
    para: list[tuple[int, str]] = []

    def flush() -> Iterator[tuple[int, str]]:
        if not para:
            return
        joined, starts = "", []
        for number, line in para:
            starts.append((len(joined), number))
            joined += line.strip() + " "
        begin = 0
        for m in [*BOUNDARY.finditer(joined), None]:
            end = m.start() if m else len(joined)
            if joined[begin:end].strip():
                yield max(n for offset, n in starts if offset <= begin), joined[begin:end].strip()
            begin = m.end() if m else end
        para.clear()

    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            yield from flush()
            continue
        if fenced:
            continue
        if not line.strip() or re.match(r"\s*(\||#|- |\* |\d+\. )", line):
            yield from flush()
        if line.strip():
            para.append((number, line))
        if line.lstrip().startswith(("|", "#")):
            yield from flush()
    yield from flush()


def makefile_comments(text: str) -> str:
    """The Makefile's comments as prose (a blank line wherever a rule or assignment interrupts them)."""
    return "\n".join(line.strip()[1:].strip() if line.strip().startswith("#") else "" for line in text.splitlines())


def words(span: Span) -> list[str]:
    try:
        return shlex.split(span.text)
    except ValueError:  # an unbalanced quote in prose: plain words
        return span.text.split()


# --- the package, read without importing it -----------------------------------------------------------------------


@cache
def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(LIB).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


@cache
def module_tree(module: str) -> ast.Module:
    return ast.parse(modules()[module].read_text(encoding="utf-8"))


def bindings(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body binds: functions, classes, assignments, imports (also under if / try)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update((n.id, node) for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = node
        elif isinstance(node, ast.If):
            names.update(bindings(node.body + node.orelse))
        elif isinstance(node, ast.Try):
            names.update(bindings(node.body + node.orelse + node.finalbody
                                  + [s for h in node.handlers for s in h.body]))
    return names


def is_dynamic(tree: ast.Module) -> bool:
    """A module whose names cannot be read statically (``import *`` or a module ``__getattr__``)."""
    return any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in tree.body) or any(
        isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


def absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def resolve(name: str) -> bool:
    """Whether ``tiebias.a.b.c`` names a module, or something a module binds (followed through its imports, into
    classes and their bases within the kit)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in modules():
            return resolve_in(module, parts[i:])
    return False


def resolve_in(module: str, rest: list[str]) -> bool:
    if not rest:
        return True
    tree = module_tree(module)
    if is_dynamic(tree):  # the one case static reading cannot settle: ask Python
        try:
            obj = importlib.import_module(module)
            for part in rest:
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            return False
        return True
    node = bindings(tree.body).get(rest[0])
    return node is not None and follow(module, node, rest[0], rest[1:])


def follow(module: str, node: ast.AST, name: str, rest: list[str]) -> bool:
    if isinstance(node, ast.ImportFrom):
        source = absolute(module, node)
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        if source.split(".")[0] != "tiebias":
            return True  # another library's name: not the kit's to check
        target = f"{source}.{alias.name}"
        return resolve(".".join([target, *rest]))
    if isinstance(node, ast.Import):
        alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == name)
        if not alias.name.startswith("tiebias"):
            return True
        return resolve(".".join([alias.name if alias.asname else name, *rest]))
    if isinstance(node, ast.ClassDef):
        return not rest or class_attribute(module, node, rest)
    return True  # a function or a value: what lies under it is not read here


def class_attribute(module: str, cls: ast.ClassDef, rest: list[str]) -> bool:
    names = bindings(cls.body)
    for method in cls.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(method):
                if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                        and n.value.id == "self"):
                    names.setdefault(n.attr, n)
    node = names.get(rest[0])
    if isinstance(node, ast.ClassDef):
        return len(rest) == 1 or class_attribute(module, node, rest[1:])
    if node is not None:
        return True
    for base in cls.bases:  # inherited: from a class of the kit, looked up there; from another library, unknown
        dotted = ast.unparse(base)
        if not re.fullmatch(r"[\w.]+", dotted) or dotted == "object":
            continue
        head, _, tail = dotted.partition(".")
        bound = bindings(module_tree(module).body).get(head)
        if isinstance(bound, ast.ClassDef):
            qualified = f"{module}.{dotted}"
        elif isinstance(bound, ast.ImportFrom) and absolute(module, bound).startswith("tiebias"):
            alias = next(a for a in bound.names if (a.asname or a.name) == head)
            qualified = ".".join(filter(None, [absolute(module, bound), alias.name, tail]))
        else:
            return True  # a base from another library (Enum, NamedTuple, Exception...) may provide it
        if resolve(".".join([qualified, *rest])):
            return True
    return False


@cache
def notebook_aliases() -> dict[str, tuple[str, ...]]:
    """How the notebooks name the kit's modules: ``from tiebias.lens import readings as lens_readings`` makes
    ``lens_readings`` stand for ``tiebias.lens.readings`` (the README quotes notebook code)."""
    out: dict[str, set[str]] = {}
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tiebias") and not node.level:
                    for a in node.names:
                        out.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.startswith("tiebias") and a.asname:
                            out.setdefault(a.asname, set()).add(a.name)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def candidates(name: str) -> list[str] | None:
    """The full names a doc's dotted name may stand for (None: its first part is no name of the kit): itself under
    ``tiebias``, a notebook's alias, a notebook instance, or any module of that name (``lens.tables``,
    ``sweeps.train_many``, ``checks.is_int``)."""
    root, _, rest = name.partition(".")
    if root == "tiebias":
        return [name]
    found = [f"{t}.{rest}" for t in notebook_aliases().get(root, ())]
    found += [f"{t}.{rest}" for t in INSTANCE_ALIASES.get(root, ())]
    found += [f"{m}.{rest}" for m in modules() if m.endswith("." + root)]
    return found or None


@cache
def defined_in(name: str) -> tuple[str, ...]:
    """The modules whose own code defines ``name`` (not by import): where a stale name may have moved to."""
    out = []
    for module in modules():
        node = bindings(module_tree(module).body).get(name)
        if node is not None and not isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(f"{module}.{name}")
        for cls in module_tree(module).body:
            if isinstance(cls, ast.ClassDef) and name in bindings(cls.body) and not name.startswith("_"):
                out.append(f"{module}.{cls.name}.{name}")
    return tuple(out)


def name_problem(name: str) -> str | None:
    tried = candidates(name)
    if tried is None:
        return f"`{name.partition('.')[0]}` is not a module, notebook alias or name of the package"
    if any(resolve(c) for c in tried):
        return None
    last = name.rpartition(".")[2]
    moved = defined_in(last)
    hint = f"; `{last}` is defined in {', '.join(moved)}" if moved else ""
    return f"resolves to nothing (tried {', '.join(tried)}){hint}"


# --- files, tests, make --------------------------------------------------------------------------------------------

SUBPACKAGES = tuple(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))


def path_problem(word: str) -> str | None:
    """A path that starts with a repository folder must exist; one that starts with a layer of the package
    (``lens/``, ``output/plotting/``, ``lens/tables``) must exist under lib/tiebias."""
    first = word.split("/")[0]
    parts = word.rstrip("/").split("/")
    if first in REPO_DIRS and (ROOT / word).exists():
        return None
    if first in SUBPACKAGES and all(p.isidentifier() for p in parts[:-1]) and re.fullmatch(r"\w+(\.py)?", parts[-1]):
        here = PACKAGE.joinpath(*parts)
        if here.exists() or here.with_name(here.name + ".py").exists():
            return None
        if first not in REPO_DIRS:
            return "no such module or folder under lib/tiebias"
    if first in REPO_DIRS:
        return "no such file or folder in the repository"
    return None


def path_words(span: Span) -> Iterator[str]:
    for word in words(span):
        word = word.split("=", 1)[-1].strip("'\"(),;:")  # RUN=runs/x, trailing punctuation
        if any(c in word for c in "<>*{}|$[]") or "..." in word:
            continue  # a placeholder or a pattern
        if re.fullmatch(r"[\w.-]+(?:/[\w.-]*)+", word) and word.split("/")[0] in (*REPO_DIRS, *SUBPACKAGES):
            yield word


@cache
def source_files() -> frozenset[str]:
    return frozenset(p.name for d in ("lib", "tests", "scripts", "bench") for p in (ROOT / d).rglob("*.py"))


@cache
def defined_tests() -> dict[str, frozenset[str]]:
    """tests/<file>.py -> the test functions it defines."""
    return {p.name: frozenset(re.findall(r"^\s*(?:async )?def (test_\w+)\(", p.read_text(encoding="utf-8"), re.M))
            for p in sorted((ROOT / "tests").glob("test_*.py"))}


def node_id_problem(file: str | None, name: str) -> str | None:
    if file is not None:
        file = Path(file).name
        if file not in defined_tests():
            return f"no test file tests/{file}"
        return None if name in defined_tests()[file] else f"tests/{file} defines no {name}"
    return None if any(name in found for found in defined_tests().values()) else "no test of that name in tests/"


@cache
def makefile() -> tuple[frozenset[str], frozenset[str]]:
    """The Makefile's rule names and the variables it defines or reads."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set()
    for m in re.finditer(r"^([A-Za-z0-9][\w.-]*(?:[ \t]+[A-Za-z0-9][\w.-]*)*)[ \t]*:(?!=)", text, re.M):
        targets.update(m.group(1).split())
    variables = set(re.findall(r"^([A-Za-z_]\w*)\s*[?:+]?=", text, re.M))
    variables |= set(re.findall(r"\$\((?:[a-z]+ )?([A-Z_][A-Z0-9_]*)[),]", text))
    variables |= set(re.findall(r"\borigin ([A-Z_][A-Z0-9_]*)\)", text))
    variables |= set(re.findall(r"\$\$\{?([A-Z_][A-Z0-9_]*)", text))  # read by a recipe as the shell's variable
    return frozenset(targets), frozenset(variables)


def make_calls(span: Span) -> Iterator[tuple[str | None, list[str]]]:
    """Each ``make`` command in a span: its target (None for a bare ``make``) and the variables it sets."""
    tokens = words(span)
    for i, token in enumerate(tokens):
        if token != "make" or (i and tokens[i - 1] not in ("&&", ";", "||", "|") and "=" not in tokens[i - 1]):
            continue
        target, variables = None, []
        for arg in tokens[i + 1:]:
            if arg in ("&&", ";", "||", "|") or arg.startswith("#"):
                break
            if re.match(r"[A-Za-z_]\w*=", arg):
                variables.append(arg.split("=", 1)[0])
            elif not arg.startswith("-") and target is None:
                target = arg
        yield target, variables


# --- parameters and profiles ---------------------------------------------------------------------------------------


def parameter_names(span: Span) -> list[str]:
    """Names a span gives as parameters: ``--set NAME=VALUE``, each name of ``SET="a=1 b=2"``, papermill's
    ``-p NAME VALUE``, and a span that is just ``name=value``."""
    text = span.text
    names = re.findall(r"--set[ =]([A-Za-z_]\w*)=", text)
    for quoted in re.findall(r"\bSET=[\"']([^\"']*)[\"']", text):
        names += re.findall(r"(?:^|\s)([A-Za-z_]\w*)=", quoted)
    names += re.findall(r"(?:^|\s)-p\s+([A-Za-z_]\w*)", text)
    if m := re.fullmatch(r"([a-z]\w*)=(?!=)\S.*", text):
        names.append(m.group(1))
    return [n for n in names if n not in PLACEHOLDER_NAMES]


def table_rows(text: str, header: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of each row of the Markdown table whose header line starts with ``header``."""
    inside = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith(header):
            inside = True
        elif inside and not line.startswith("|"):
            return
        elif inside:
            yield number, line


def table_parameters(text: str) -> Iterator[tuple[int, str]]:
    """The first column of README's parameter table (the table starting with ``| name | type | notebooks |``)."""
    for number, line in table_rows(text, "| name | type | notebooks |"):
        if m := re.match(r"\| `(\w+)` \|", line):
            yield number, m.group(1)


@cache
def profile_names() -> frozenset[str]:
    return frozenset(p.stem for p in (PACKAGE / "config" / "profiles").glob("*.toml"))


def profile_references(text: str) -> Iterator[tuple[int, str]]:
    """Names given as a profile: "`x` profile", ``PROFILE=x``, ``--profile x``, ``--set profile=x``."""
    pattern = re.compile(r"`([\w-]+)` profile\b|\bPROFILE=([\w-]+)|--profile[ =]([\w./-]+)|-p profile ([\w-]+)")
    for m in pattern.finditer(text):
        name = next(g for g in m.groups() if g)
        if "/" not in name and not name.endswith(".toml"):
            yield text.count("\n", 0, m.start()) + 1, name


# --- one run time per profile --------------------------------------------------------------------------------------

NUMBER = r"\d[\d,]*(?:\.\d+)?"
DURATION = re.compile(rf"(?<![\w.,])(?:({NUMBER}) ?(?:h|hours?)\b ?)?(?:({NUMBER}) ?min(?:utes?)?\b ?)?"
                      rf"(?:({NUMBER}) ?s\b)?")
VAGUE = re.compile(r"\b(?:a (?:couple|few) of (?:minutes|hours)|a few (?:minutes|hours)|in minutes)\b")


def durations(text: str) -> list[tuple[str, float | None]]:
    """Each run time a text states, with its value in seconds (None for a figure in words)."""
    out: list[tuple[str, float | None]] = []
    for m in DURATION.finditer(text):
        if any(m.groups()):
            h, mi, s = (float(g.replace(",", "")) if g else 0.0 for g in m.groups())
            out.append((m.group(0).strip(), h * 3600 + mi * 60 + s))
    out += [(m.group(0), None) for m in VAGUE.finditer(text)]
    return out


def profile_times(readme: str) -> dict[str, tuple[int, str, list[tuple[str, float | None]]]]:
    """README's profile table: profile -> (line, last cell, the run times the cell states); profiles whose cell
    gives no figure ("not measured here") are left out."""
    out = {}
    for number, line in table_rows(readme, "| profile | what |"):
        if m := re.match(r"\| `([\w-]+)` \|.*\| ([^|]+) \|\s*$", line):
            stated = [d for d in durations(m.group(2)) if d[1] is not None]
            if stated:
                out[m.group(1)] = (number, m.group(2).strip(), stated)
    return out


def mentions_profile(sentence: str, profile: str) -> bool:
    """A sentence about the profile's run (not "the default profile's models", nor a table row of its own)."""
    p = re.escape(profile)
    return bool(re.search(rf"`{p}` profile(?!'s)|\b{p} (?:profile|run)\b(?!'s)|PROFILE={p}\b|--profile {p}\b"
                          rf"|Profile: `{p}`", sentence, re.I))


def run_time_problems(texts: dict[str, str], skip: dict[str, tuple[str, ...]] | None = None) -> list[Problem]:
    """Every sentence that names a profile of README's profile table and states a run time must state one of the
    times the table's cell gives for it. ``skip``: profile -> places already checked elsewhere."""
    skip = skip or {}
    table = profile_times(texts["README.md"])
    problems = []
    for place, text in texts.items():
        prose = makefile_comments(text) if place == "Makefile" else text
        for number, sentence in sentences(prose):
            if sentence.startswith("|") and re.match(r"\| `[\w-]+` \|", sentence) and place == "README.md":
                continue  # the profile table's own rows
            for profile, (row, cell, stated) in table.items():
                if place in skip.get(profile, ()) or not mentions_profile(sentence, profile):
                    continue
                given = durations(sentence)
                values = {v for _, v in stated}
                if given and not any(v in values for _, v in given):
                    problems.append(Problem(
                        "time", place, number, ", ".join(t for t, _ in given),
                        f"states a run time for the `{profile}` profile that README's profile table (line {row}) "
                        f"does not give: it says {cell!r}. Sentence: {sentence[:160]!r}"))
    return problems


# --- all checks of one doc ------------------------------------------------------------------------------------------


DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"


def dotted_names(span: Span) -> Iterator[str]:
    """A span that is a dotted name (``lens.tables.at_budget``, ``tiebias.data.corpus.load_corpus()``), the module of
    ``python -m tiebias...`` and the names of ``from tiebias... import a, b``; not a file name (``config.json``)."""
    text = span.text
    if not span.fenced and (m := re.fullmatch(rf"({DOTTED})(?:\(.*\))?", text)):
        if m.group(1).rpartition(".")[2].lower() not in FILE_SUFFIXES:
            yield m.group(1)
    yield from re.findall(r"(?:^|\s)python3? -m (tiebias(?:\.[A-Za-z_]\w*)*)", text)
    for source, imported in re.findall(r"\bfrom (tiebias[\w.]*) import ([\w, ]+)", text):
        yield from (f"{source}.{n.split(' as ')[0].strip()}" for n in imported.split(",") if n.strip())


def doc_problems(doc: str, text: str) -> list[Problem]:
    problems: list[Problem] = []
    targets, variables = makefile()

    def report(kind: str, line: int, name: str, why: str | None) -> None:
        if why:
            problems.append(Problem(kind, doc, line, name, why))

    for span in spans(text):
        if span.text in ALLOWED:
            continue
        # 1. modules, functions, classes
        for name in dotted_names(span):
            report("name", span.line, name, name_problem(name) if name.split(".")[0] not in EXTERNAL_ROOTS else None)
        # 1. files: paths under the repository's folders, bare .py names, pytest ids
        for word in path_words(span):
            report("file", span.line, word, path_problem(word))
        if not span.fenced and re.fullmatch(r"[\w-]+\.py", span.text):
            report("file", span.line, span.text,
                   None if span.text in source_files() else "no such .py file under lib, tests, scripts or bench")
        if not span.fenced and (m := re.fullmatch(r"(?:([\w/]+\.py)::)?(test_\w+)(?:\[[^\]]*\])?", span.text)):
            report("name", span.line, span.text, node_id_problem(m.group(1), m.group(2)))
        # 2. parameters
        for name in parameter_names(span):
            report("parameter", span.line, name, None if name in PARAMS else "not a parameter of the kit (PARAMS)")
        if not span.fenced and re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", span.text) and span.text not in PARAMS:
            close = difflib.get_close_matches(span.text, PARAMS, n=1, cutoff=0.9)
            if close and not defined_in(span.text):
                report("parameter", span.line, span.text, f"no such parameter; did the doc mean `{close[0]}`?")
        # 3. make targets and variables
        for target, names in make_calls(span):
            if target is not None:
                report("make", span.line, f"make {target}",
                       None if target in targets else f"no rule `{target}:` in the Makefile")
            for name in names:
                report("make", span.line, f"{name}=", None if name in variables else "no such variable in the Makefile")
    # 1. relative links and images
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1).split("#", 1)[0]
        if target and not re.match(r"[a-z]+:", target) and not ((ROOT / doc).parent / target).exists():
            report("file", text.count("\n", 0, m.start()) + 1, target, "the link's target does not exist")
    # 2. the parameter table's names (test_vocabulary.py also compares the whole table with the generated one)
    for number, name in table_parameters(text):
        report("parameter", number, name, None if name in PARAMS else "not a parameter of the kit (PARAMS)")
    # profiles named as such, and lists of profiles that leave some out
    for number, name in profile_references(text):
        report("profile", number, name, None if name in profile_names() else
               f"no such profile (lib/tiebias/config/profiles/: {', '.join(sorted(profile_names()))})")
    for number, sentence in sentences(text):
        listed = {n for n in re.findall(r"`([\w-]+)`", sentence) if n in profile_names()}
        if len(listed) >= 3 and listed != profile_names():
            report("profile", number, ", ".join(sorted(listed)),
                   f"lists profiles but leaves out {', '.join(sorted(profile_names() - listed))}")
    return problems


@cache
def all_problems() -> tuple[Problem, ...]:
    out = []
    for doc in DOCS:
        if (ROOT / doc).exists():
            out += doc_problems(doc, (ROOT / doc).read_text(encoding="utf-8"))
    return tuple(out)


def failures(kinds: tuple[str, ...]) -> str:
    found = [str(p) for p in all_problems() if p.kind in kinds]
    return f"{len(found)} name(s) in the docs that do not exist:\n" + "\n".join(found)


# --- the library functions the notebooks call ----------------------------------------------------------------------

Function = ast.FunctionDef | ast.AsyncFunctionDef


def notebook_code(notebook: Path) -> ast.Module:
    """A notebook's code cells as one module (IPython's ``%`` and ``!`` lines left out)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")))


def called_names(tree: ast.Module) -> set[str]:
    """Full names of the kit's names a module calls: ``from tiebias.x import y [as z]`` then ``z(...)`` or
    ``z.a.b(...)`` gives ``tiebias.x.y`` or ``tiebias.x.y.a.b``."""
    imported = {a.asname or a.name: f"{n.module}.{a.name}" for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tiebias") for a in n.names}
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f, attrs = node.func, []
            while isinstance(f, ast.Attribute):
                attrs.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name) and f.id in imported:
                out.add(".".join([imported[f.id], *reversed(attrs)]))
    return out


def definition(name: str) -> tuple[str, Function] | None:
    """The function or method ``tiebias.a.b.f`` (``tiebias.a.C.m``) names, followed through imports, with the module
    that defines it; None for a module, a class, a value or another library's name."""
    parts = name.split(".")
    module = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules()), None)
    if module is None or module == name:
        return None
    rest = parts[len(module.split(".")):]
    node = bindings(module_tree(module).body).get(rest[0])
    if isinstance(node, ast.ImportFrom) and absolute(module, node).startswith("tiebias"):
        alias = next(a for a in node.names if (a.asname or a.name) == rest[0])
        return definition(".".join([absolute(module, node), alias.name, *rest[1:]]))
    if isinstance(node, ast.ClassDef) and len(rest) == 2:
        node, rest = bindings(node.body).get(rest[1]), rest[1:]
    return (module, node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(rest) == 1 else None


@cache
def notebook_functions() -> dict[str, tuple[str, Function]]:
    """Every library function or method the notebooks (notebooks/0*.ipynb) call, by the name they call it with: the
    module that defines it and its definition."""
    names = set().union(*(called_names(notebook_code(p)) for p in sorted((ROOT / "notebooks").glob("0*.ipynb"))))
    return {n: found for n in sorted(names) if (found := definition(n)) is not None}


def missing_sections(node: Function) -> list[str]:
    """The sections a function's docstring lacks: ``Args:`` when it takes parameters (self and cls not counted),
    ``Returns:`` unless it is annotated to return None."""
    doc = ast.get_docstring(node) or ""
    a = node.args
    params = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
              if x is not None and x.arg not in ("self", "cls")]
    returns_none = isinstance(node.returns, ast.Constant) and node.returns.value in (None, "None")
    return [s for s, needed in (("Args:", bool(params)), ("Returns:", not returns_none)) if needed and s not in doc]


def parsed(fn: Callable[..., Any]) -> Function:
    """The definition of a function of this file, parsed as :func:`missing_sections` reads the library's."""
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    return node


# --- the tests ----------------------------------------------------------------------------------------------------


def test_docs_name_modules_functions_and_files_that_exist() -> None:
    assert not any(p.kind in ("name", "file") for p in all_problems()), failures(("name", "file"))


def test_docs_name_parameters_of_the_kit() -> None:
    assert not any(p.kind == "parameter" for p in all_problems()), failures(("parameter",))


def test_docs_name_make_targets_of_the_makefile() -> None:
    assert not any(p.kind == "make" for p in all_problems()), failures(("make",))


def test_docs_name_the_shipped_profiles() -> None:
    assert not any(p.kind == "profile" for p in all_problems()), failures(("profile",))


def test_each_profile_has_one_run_time() -> None:
    """README's profile table gives each profile's run time once; every other sentence of README, TEACHING.md, the
    walkthrough's index or a Makefile comment that states that profile's time gives one of the table's figures.
    The class profile in README, Makefile and walkthrough is tests/test_class_profile.py's."""
    texts = {place: (ROOT / place).read_text(encoding="utf-8") for place in TIME_PLACES if (ROOT / place).exists()}
    problems = run_time_problems(texts, skip={"class": ("README.md", "Makefile", "walkthrough/README.md")})
    assert not problems, "\n".join(map(str, problems))


def test_the_checks_report_what_does_not_exist() -> None:
    """The extraction and resolution above catch a made-up function, module, file, parameter, make target, profile
    and run time, and pass the real ones beside them."""
    fake = """Call `tiebias.lens.tables.no_such_function` or `lens.tables.at_budget` (real), `lens_study.at_budget`,
`lens/no_such_module` and `run.save_table` (real); read `scripts/no_such_script.py` and `scripts/check_class.py`
(real), `test_cli.py::test_no_such_test`, [a link](no_such_page.md); run `make no-such-target` or `make study`
(real), `python -m tiebias study --set no_such_param=3 --set steps=3`, `lens_depth_preset`, the `nosuch` profile
(profiles: `smoke`, `default`, `gpu`).

```bash
make lab PROFILE=smoke NO_SUCH_VARIABLE=1
```

| profile | what | preset | steps | seeds | time here (2 cores) |
|---|---|---|---|---|---|
| `smoke` | plumbing | tiny | 40 | 2 | about 1 min |
| `depth` | depth | small | 300 | 5 | 2 h 27 min on a shared machine |

The `depth` profile took 2 h 27 min here. The `smoke` profile takes about 75 s. `torch.compile` is not ours.
"""
    found = {(p.kind, p.name) for p in doc_problems("README.md", fake)}
    assert found == {
        ("name", "tiebias.lens.tables.no_such_function"), ("name", "lens_study.at_budget"),
        ("file", "lens/no_such_module"), ("file", "scripts/no_such_script.py"),
        ("name", "test_cli.py::test_no_such_test"), ("file", "no_such_page.md"),
        ("make", "make no-such-target"), ("make", "NO_SUCH_VARIABLE="), ("parameter", "no_such_param"),
        ("parameter", "lens_depth_preset"), ("profile", "nosuch"), ("profile", "default, gpu, smoke"),
    }, found
    times = run_time_problems({"README.md": fake})
    assert [(p.line, p.name) for p in times] == [(16, "75 s")], times
    assert "`encode` is defined in tiebias.data.tokens.encode" in (name_problem("tiebias.data.corpus.encode") or "")


def test_functions_the_notebooks_call_document_args_and_returns() -> None:
    """Each library function a notebook calls says what its parameters are (``Args:``) and what it gives back
    (``Returns:``), so a reader of the notebook can look it up; a function without parameters needs no ``Args:``,
    one returning None no ``Returns:``."""
    found = notebook_functions()
    assert "tiebias.lens.ladder.train_lens_ladders" in found, sorted(found)  # the set is not empty by mistake
    lacking = [f"{name} ({module}, line {node.lineno}): no {' and no '.join(missing)}"
               for name, (module, node) in found.items() if (missing := missing_sections(node))]
    assert not lacking, f"{len(lacking)} function(s) the notebooks call lack docstring sections:\n" + "\n".join(lacking)


def test_the_section_check_finds_a_function_without_them() -> None:
    def bare(x: int, *, y: int = 0) -> int:
        """Add ``y`` to ``x``."""
        return x + y

    def documented(x: int) -> int:
        """Double ``x``.

        Args:
            x: the number.

        Returns:
            Twice ``x``.
        """
        return 2 * x

    def nothing(self) -> None:
        """Do nothing (a method without parameters, returning None)."""

    assert missing_sections(parsed(bare)) == ["Args:", "Returns:"]
    assert missing_sections(parsed(documented)) == []
    assert missing_sections(parsed(nothing)) == []
    called = called_names(ast.parse("from tiebias.lens import ladder as lad\nlad.ensure_lens(run)\nprint(lad)"))
    assert called == {"tiebias.lens.ladder.ensure_lens"}
    assert (definition("tiebias.config.model_key") or ("", None))[0] == "tiebias.config.variants"
    assert definition("tiebias.run.Run.prepare") is not None and definition("tiebias.run.Run") is None
