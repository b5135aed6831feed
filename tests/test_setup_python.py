"""make setup on a student's laptop: an old Python stops with what to install; a .venv of another Python is remade."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_python.py"


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_an_old_python_is_refused_with_the_version_needed_and_how_to_get_it() -> None:
    need = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if line.startswith("requires-python"))
    want = need.split(">=")[1].strip('" ')
    p = _check("--version", "3.10")
    assert p.returncode == 1 and f"needs Python >= {want}" in p.stderr and "is 3.10" in p.stderr
    assert f"make setup PYTHON=python{want}" in p.stderr and "pyenv install" in p.stderr
    assert _check().returncode == 0  # the Python running the tests is new enough


def _fake_venv(tmp_path: Path, version: str) -> Path:
    """A .venv whose python reports ``version`` (as one made by another interpreter would)."""
    exe = tmp_path / "venv" / "bin" / "python"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!/bin/sh\necho {version.replace('.', ' ')}\n")
    exe.chmod(0o755)
    return exe.parent.parent


def test_a_venv_of_another_python_is_named_for_rebuilding(tmp_path: Path) -> None:
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    other = _check("--venv", str(_fake_venv(tmp_path, "3.10")))
    assert other.returncode == 3 and "made with Python 3.10" in other.stdout and "making it again" in other.stdout
    same = tmp_path / "same"
    same.mkdir()
    assert _check("--venv", str(_fake_venv(same, mine))).returncode == 0
    assert _check("--venv", str(tmp_path / "none")).returncode == 0  # no venv yet: nothing to rebuild


def test_make_setup_runs_both_checks_before_it_touches_the_venv() -> None:
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP): pyproject.toml $(LOCK)\n", 1)[1].splitlines()
    assert recipe[0].strip() == "@$(PYTHON) scripts/check_python.py"
    assert recipe[1].strip() == "@$(PYTHON) scripts/check_python.py --venv $(VENV) || rm -rf $(VENV)"
    assert "-m venv" in recipe[2] and os.access(SCRIPT, os.R_OK)


def test_make_check_class_runs_the_check_script() -> None:
    """`make check-class` runs scripts/check_class.py (its verdict is tests/test_lesson.py's)."""
    make = (ROOT / "Makefile").read_text()
    assert "check-class: setup\n\t$(BIN)/python scripts/check_class.py" in make
