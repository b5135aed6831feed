"""The lock file (constraints.txt): well formed, inside pyproject.toml's ranges, and the installed stack.

``make setup``, CI and environment.yml install with ``pip install -c constraints.txt``; these tests check that the
lock is something pip can apply (one ``name==version`` a line, each package once), that it satisfies every
requirement pyproject.toml states (so a refreshed or hand-edited lock cannot leave the declared ranges), and that
the environment running the tests is the locked one.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "constraints.txt"
KEY_PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "tuned-lens", "plotly", "ipywidgets", "papermill",
                "nbval", "jupyterlab", "accelerate")
"""The packages whose version decides what the study computes and how the notebooks run."""
UNLOCKED = "TIEBIAS_UNLOCKED"


def _lock_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _lock() -> dict[str, Version]:
    """canonical name -> pinned version, checking each line is a plain pin on the way."""
    out: dict[str, Version] = {}
    for line in _lock_lines(LOCK.read_text()):
        req = Requirement(line)
        specs = list(req.specifier)
        assert req.url is None and req.marker is None and not req.extras, f"{line!r}: only name==version allowed"
        assert len(specs) == 1 and specs[0].operator == "==", f"{line!r}: only name==version allowed"
        assert line == f"{req.name}=={specs[0].version}", f"{line!r}: only name==version allowed (no spaces)"
        version = Version(specs[0].version)
        assert version.local is None, f"{line!r}: no local version label (one lock serves CPU and CUDA builds)"
        name = canonicalize_name(req.name)
        assert name not in out, f"{req.name} appears twice in {LOCK.name}"
        out[name] = version
    return out


def _pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": "test"})]


def _lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_script", REPO / "scripts" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the lock file itself


def test_lock_is_one_pin_a_line_each_package_once() -> None:
    lock = _lock()
    assert len(lock) > 50, "the lock pins the whole environment, not only the direct dependencies"
    assert canonicalize_name("tiebias") not in lock, "the project itself is not locked"


def test_lock_satisfies_pyproject() -> None:
    """Every dependency and test extra of pyproject.toml is in the lock, at a version inside its specifier."""
    lock = _lock()
    for req in _pyproject_requirements():
        name = canonicalize_name(req.name)
        assert name in lock, f"{req} (pyproject.toml) is not in {LOCK.name}: run make lock"
        assert req.specifier.contains(lock[name], prereleases=True), (
            f"{LOCK.name} pins {req.name}=={lock[name]}, outside pyproject.toml's {req}: run make lock")


def test_lock_pins_the_tested_torch() -> None:
    assert _lock()["torch"] == Version("2.13.0")
    assert "torch==2.13.0" in _lock_lines(LOCK.read_text())


def test_lock_is_what_the_script_writes() -> None:
    """Header and sorted pins exactly as scripts/lock.py writes them: refreshed by `make lock`, not by hand."""
    text = LOCK.read_text()
    second = text.splitlines()[1]
    assert second.startswith("# Frozen on ") and second.endswith(".")
    script = _lock_script()
    lines = _lock_lines(text)
    assert text == script.render(script.pins("\n".join(lines)), second.removeprefix("# Frozen on ").removesuffix("."))
    assert "make lock" in text and "-c constraints.txt" in text


def test_pins_from_a_freeze() -> None:
    """pip freeze -> lock lines: comments, editable installs and the project dropped, +cpu cut, sorted, deduplicated."""
    freeze = ("# Editable Git install with no remote (tiebias==0.1.0)\n-e /work/tiebias\ntiebias==0.1.0\n"
              "torch==2.13.0+cpu\nPyYAML==6.0.4\naccelerate==1.15.0\njupyter_core==5.9.1\njupyter-client==8.10.0\n")
    assert _lock_script().pins(freeze) == ["accelerate==1.15.0", "jupyter-client==8.10.0", "jupyter_core==5.9.1",
                                           "PyYAML==6.0.4", "torch==2.13.0"]


def test_pins_refuse_what_pip_cannot_constrain() -> None:
    with pytest.raises(ValueError, match=r"'foo @ git\+https://x/foo' is not name==version"):
        _lock_script().pins("foo @ git+https://x/foo\n")


def test_lock_files_install_through_it() -> None:
    """make setup and environment.yml pass the lock to pip (a constraint, so it installs nothing extra)."""
    make = (REPO / "Makefile").read_text()
    assert "LOCK := constraints.txt" in make and "$(STAMP): pyproject.toml $(LOCK)" in make
    installs = [line for line in make.splitlines() if "$(BIN)/python -m pip install" in line]
    assert len(installs) == 3 and all("-c $(LOCK)" in line for line in installs), installs
    env = (REPO / "environment.yml").read_text()
    assert "      - -c constraints.txt\n" in env


def test_readme_names_the_locked_versions() -> None:
    """The README's "Tested versions" paragraph names each key package (and Python) at the lock's version."""
    readme = " ".join((REPO / "README.md").read_text().split())
    start = readme.index("**Tested versions.**")
    paragraph = readme[start:readme.index("Without make:", start)]
    lock = _lock()
    for package in KEY_PACKAGES:
        m = re.search(rf"\b{re.escape(package)} (\d[^\s,()]*?)[,.]?[\s(]", paragraph)
        assert m is not None, f"README's tested versions do not name {package}"
        assert Version(m.group(1)) == lock[canonicalize_name(package)], (
            f"README says {package} {m.group(1)}, {LOCK.name} says {lock[canonicalize_name(package)]}")
    python = re.search(r"^# Frozen on Python (\d+\.\d+)", LOCK.read_text(), re.MULTILINE)
    assert python is not None and f"Python {python.group(1)}," in paragraph


# --------------------------------------------------------------------------- the environment running the tests


def _mismatch(message: str) -> None:
    if os.environ.get(UNLOCKED, "") not in ("", "0"):
        pytest.skip(f"{message} ({UNLOCKED} set: another stack on purpose)")
    pytest.fail(f"{message}: run make setup (or set {UNLOCKED}=1 to test another stack on purpose)", pytrace=False)


@pytest.mark.parametrize("package", KEY_PACKAGES)
def test_installed_version_is_the_locked_one(package: str) -> None:
    """The key packages installed are the lock's versions.

    A mismatch is a failure, not a skip: ``make setup`` and CI install through the lock, so a mismatch there means
    the lock was not applied (a venv built before it, a pip run without ``-c``) and the results speak for a stack
    nobody tested: the very drift the lock is for, and a skip would hide it in the summary. Whoever tests another
    stack on purpose says so with ``TIEBIAS_UNLOCKED=1``; each mismatch is then reported as a skip naming it.
    """
    want = _lock()[canonicalize_name(package)]
    try:
        have = Version(md.version(package))
    except md.PackageNotFoundError:
        _mismatch(f"{package} is not installed, lock says {want}")
        return
    if Version(have.public) != want:  # 2.13.0+cpu is the lock's 2.13.0
        _mismatch(f"installed {package} {have}, lock says {want}")


def test_installed_dependencies_are_all_locked() -> None:
    """Every package the installed project pulls in (dependencies of dependencies too) has a pin in the lock."""
    lock = _lock()
    try:
        md.distribution("tiebias")
    except md.PackageNotFoundError:
        pytest.skip("tiebias is not installed (pip install -e .): its dependency tree cannot be read")
    done: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [("tiebias", frozenset({"test"}))]
    missing: set[str] = set()
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in done:
            continue
        done.add((canonicalize_name(name), extras))
        if name != "tiebias" and canonicalize_name(name) not in lock:
            missing.add(canonicalize_name(name))
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            missing.add(f"{name} (not installed)")
            continue
        for raw in requires:
            req = Requirement(raw)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append((req.name, frozenset(req.extras)))
    if missing:
        _mismatch(f"installed packages without a pin in {LOCK.name}: {', '.join(sorted(missing))}")


def test_a_mismatch_fails_unless_unlocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNLOCKED, raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"^installed x 2, lock says 1: run make setup"):
        _mismatch("installed x 2, lock says 1")
    monkeypatch.setenv(UNLOCKED, "0")
    with pytest.raises(pytest.fail.Exception):
        _mismatch("installed x 2, lock says 1")
    monkeypatch.setenv(UNLOCKED, "1")
    with pytest.raises(pytest.skip.Exception, match=r"^installed x 2, lock says 1 \(TIEBIAS_UNLOCKED set"):
        _mismatch("installed x 2, lock says 1")
