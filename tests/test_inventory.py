"""A half-made run (a model interrupted, or not trained) is refused by the analyses, naming its models and what to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tiebias import study
from tiebias.align import comparisons
from tiebias.config import profiles
from tiebias.output import notebook
from tiebias.run import inventory
from tiebias.run.files import ParameterChangedError
from tiebias.run.folder import Run


@pytest.fixture
def half_made(two_seed_run: Run, tmp_path: Path) -> Run:
    """Two seeds of tied and untied models, tied-s1 interrupted (01 stopped before its completion marker)."""
    run = Run(tmp_path / "run")
    shutil.copytree(two_seed_run.path, run.path)
    run.complete_path("tied", 1).unlink()
    return run


def test_status_and_refusal_name_the_unfinished_models(half_made: Run, tmp_path: Path) -> None:
    # every seed of the run (02's default), not the complete ones only: claim 1 would change method unsaid
    with pytest.raises(ValueError, match=r"unfinished models: tied-s1 \(interrupted: no complete.json\)\. Run "
                                         r"01_train again with the same parameters: it resumes the interrupted "
                                         r"models.*seeds=\[0\]"):
        comparisons.load_models(half_made)
    assert inventory.require_complete(half_made, ["tied", "untied"], [0]) == [0]  # a choice made on purpose
    shutil.rmtree(half_made.model_dir("untied", 1))
    with pytest.raises(ValueError, match=r"tied-s1 \(interrupted.*\), untied-s1 \(not trained\)\. Run 01_train again "
                                         r"with variants that include 'untied' and seeds that include 1: it resumes"):
        inventory.require_complete(half_made, ["tied", "untied"], [0, 1])
    assert inventory.require_complete(Run(tmp_path / "empty"), ["tied", "untied"]) == []


def test_a_variant_01_never_trained_is_named_not_same_parameters(two_seed_run: Run, tmp_path: Path) -> None:
    """01 run with variants=tied: "run 01_train again with the same parameters" would train no untied model."""
    run = Run(tmp_path / "run")
    shutil.copytree(two_seed_run.path, run.path, ignore=shutil.ignore_patterns("untied-s*"))
    with pytest.raises(ValueError, match=r"untied-s0 \(not trained\), untied-s1 \(not trained\)\. Run 01_train "
                                         r"again with variants that include 'untied' and seeds that include 0, 1:") as e:
        comparisons.load_models(run)
    assert "same parameters" not in str(e.value)


def test_complete_run_passes(two_seed_run: Run) -> None:
    assert inventory.require_complete(two_seed_run, ["tied", "untied"]) == [0, 1]
    assert sorted(comparisons.load_models(two_seed_run)) == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["02_align", "03_lens"])
def test_analysis_notebooks_refuse_a_half_made_run(half_made: Run, name: str) -> None:
    with pytest.raises(study.NotebookFailed, match=r"ValueError: run .*: unfinished models: tied-s1 \(interrupted"):
        study.run_study("smoke", half_made.path, only=[name], progress=False)
    assert not half_made.results_dir.exists(), "nothing may be recorded from a half-made run"


def _first_cells(name: str, n: int) -> list[str]:
    """The first ``n`` code cells of a notebook, as JupyterLab runs them."""
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / f"{name}.ipynb").read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"][:n]


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["02_align", "03_lens"])
def test_analysis_notebooks_refuse_another_profile_than_the_runs(two_seed_run: Run, tmp_path: Path, name: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """As 01 and 04 do: a run made with the class profile, read by 02 or 03 with smoke's, stops before it writes."""
    run = Run(tmp_path / "run")
    shutil.copytree(two_seed_run.path, run.path)
    run.update_config(study=profiles.study_record(profiles.resolve("class", run.path)))
    monkeypatch.setattr(notebook, "setup", lambda: None)  # the kernel's display settings: not this process's
    parameters, setup = _first_cells(name, 2)
    before = _files(run.path)
    ns: dict = {}
    exec(parameters, ns)
    ns.update(profile="smoke", run_dir=str(run.path))
    with pytest.raises(ParameterChangedError, match=r"profile: folder has 'class', asked 'smoke'.*-p profile class"):
        exec(setup, ns)
    assert _files(run.path) == before
    ns = {}
    exec(parameters, ns)
    ns.update(profile="class", run_dir=str(run.path))
    exec(setup, ns)  # the run's own profile: read as before
    assert ns["run"].path == run.path and _files(run.path) == before


def test_study_command_refuses_another_profile_before_a_notebook_runs(two_seed_run: Run, tmp_path: Path) -> None:
    """python -m tiebias study --only 03_lens with another profile: exit 2 before the run's executed notebook is replaced."""
    run = Run(tmp_path / "run")
    shutil.copytree(two_seed_run.path, run.path)
    run.update_config(study=profiles.study_record(profiles.resolve("class", run.path)))
    before = _files(run.path)
    for only in (["02_align"], ["03_lens"], ["02_align", "03_lens"]):
        with pytest.raises(ParameterChangedError, match=r"profile: folder has 'class', asked 'smoke'.*--profile class"):
            study.check_study("smoke", run.path, only=only)
    assert study.check_study("class", run.path, only=["03_lens"])[0]["profile"] == "class"
    assert _files(run.path) == before
