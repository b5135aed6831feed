"""bench/study_side_by_side.py and bench/suite_side_by_side.py: what they read and print, without cloning anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def study_bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import study_side_by_side

    return study_side_by_side


def _notebook(path: Path, durations: list[float | None]) -> None:
    cells = [{"cell_type": "code", "source": "", "metadata": {"papermill": {"duration": d}}} for d in durations]
    cells.append({"cell_type": "markdown", "source": "", "metadata": {}})  # no papermill record: counts 0
    path.write_text(json.dumps({"cells": cells}))


def test_notebook_seconds_sums_each_notebooks_cells(study_bench, tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    _notebook(tmp_path / "notebooks" / "01_train.ipynb", [1.5, None, 2.0])
    _notebook(tmp_path / "notebooks" / "03_lens.ipynb", [4.25])
    assert study_bench.notebook_seconds(tmp_path) == {"01_train": 3.5, "03_lens": 4.25}


def test_claims_that_moved_are_reported_in_seed_sd(study_bench) -> None:
    old = {"claim3_tuned_lens": {"value": -0.0315, "spread": 0.05}}
    new = {"claim3_tuned_lens": {"value": -0.0290, "spread": 0.05}}
    lines = study_bench.differences(new, old)
    assert lines == ["claim3_tuned_lens.value: -0.029 vs -0.0315 (diff +0.0025, +0.05 seed sd)"]


@pytest.mark.parametrize("script", ["study_side_by_side.py", "suite_side_by_side.py"])
def test_help_names_the_two_commits(script: str) -> None:
    out = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, check=True)
    assert "old" in out.stdout and "new" in out.stdout


@pytest.mark.parametrize("script", ["study_side_by_side.py", "suite_side_by_side.py"])
@pytest.mark.parametrize(("args", "name"), [(["no-such-commit"], "old"), (["HEAD", "no-such-commit"], "new")])
def test_a_name_that_is_not_a_commit_stops_before_cloning(script: str, args: list[str], name: str) -> None:
    res = subprocess.run([sys.executable, str(BENCH / script), *args, "--keep", "/nonexistent/never-made"],
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr.strip() == f"{name}: 'no-such-commit' is not a commit of this repository (e.g. 5803a75, HEAD)"
    assert not Path("/nonexistent/never-made").exists()
