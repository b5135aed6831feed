"""Nothing the kit writes lands outside the folder it was given: no write through a symbolic link (planted under a
temporary name, as a file the kit replaces, or as one of the run folder's subfolders), no command writing into a
folder that is not a run folder, and no text of a command line run by a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiebias import __main__ as cli
from tiebias.config.paths import notebooks_dir, runs_dir

REPO = notebooks_dir().parent
LIB = Path(__file__).resolve().parents[1] / "lib"


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(LIB), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


# -- make exercise: the id is never shell text; the run goes under the checkout's runs/ -----------------------------
@pytest.mark.parametrize("bad", ['x"; touch F; echo "', "x`touch F`", "$$(touch F)"])
def test_make_exercise_runs_nothing_its_id_holds(bad: str, tmp_path: Path) -> None:
    """A quote, a backtick or ``$(...)`` in ``ID`` reaches python as text, which refuses it; the shell runs none."""
    out = subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "exercise", f"ID={bad}", "STAMP=",
                          f"BIN={Path(sys.executable).parent}"], cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert not (tmp_path / "F").exists(), f"the shell ran text of ID={bad!r}"
    assert out.returncode != 0 and "is not an exercise id" in out.stderr, out.stderr[-2000:]
    assert "lower-case letters, digits and '-'" in out.stderr


def test_exercise_trains_under_the_checkouts_runs_folder_from_any_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    seen = []
    monkeypatch.setattr(cli, "_study", lambda args: seen.append(args) or 0)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["exercise", "01-b"]) == 0
    assert seen[0].run_dir == str(runs_dir() / "ex-01-b"), seen[0].run_dir
    assert str(runs_dir() / "ex-01-b") in capsys.readouterr().out  # the printed command is the one that runs
    assert not (tmp_path / "runs").exists()
