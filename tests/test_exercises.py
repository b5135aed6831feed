"""Every notebook ends with its exercises as defined in notebooks/exercises.toml, and every exercise command runs
(through the command line with papermill stubbed; one of them for real)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiebias import study
from tiebias.config import profiles
from tiebias.config.params import NOTEBOOKS, PARAMS
from tiebias.study import check_study, notebooks_dir, parse_set
from tiebias.teach import exercises

HEADER, EXERCISES = exercises.load()
# parameters that shape the models: a run folder cannot take a second value of these, so such an exercise
# gets a folder of its own (shared only with exercises making the very same change)
SHAPING = {name for name, p in PARAMS.items() if "TrainConfig" in p.configures or "Run.prepare" in p.configures}


def test_each_notebook_has_two_or_three_exercises_with_unique_ids() -> None:
    ids = [e.id for e in EXERCISES]
    assert len(ids) == len(set(ids)), ids
    for name in NOTEBOOKS:
        mine = [e for e in EXERCISES if e.notebook == name]
        assert 2 <= len(mine) <= 3, (name, len(mine))
        assert all(e.id.startswith(name[:2] + "-") for e in mine), [e.id for e in mine]


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.id)
def test_exercise_changes_one_thing_and_the_study_accepts_it(ex: exercises.Exercise, tmp_path: Path) -> None:
    assert len(ex.set) == 1, f"{ex.id}: change one thing, got {ex.set}"
    assert ex.notebook in ex.only, f"{ex.id}: the command must run the notebook the exercise is in"
    line = ex.command(HEADER["profile"])
    assert "\n" not in line and f"--run-dir runs/ex-{ex.id}" in line
    # the same checks the command makes before anything runs: known parameter, allowed value, used by a notebook run
    check_study(HEADER["profile"], tmp_path / "run", parse_set(list(ex.set)), list(ex.only))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.id)
def test_answer_says_which_profile_its_numbers_come_from(ex: exercises.Exercise) -> None:
    text = exercises.markdown(ex, HEADER["profile"])
    assert f"{HEADER['profile'].capitalize()} profile" in ex.answer or f"`{HEADER['profile']}` profile" in ex.answer
    assert text.count("<details>") == 1 and text.rstrip().endswith("</details>")
    assert "**Predict first.**" in text and "```bash\n" in text


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_ends_with_its_rendered_exercises(name: str) -> None:
    path = notebooks_dir() / f"{name}.ipynb"
    assert exercises.rendered(path) == exercises.cells(name), \
        f"{path.name}: exercise cells out of date; run python scripts/exercises.py"
    first = json.loads(path.read_text())["cells"][0]
    assert "../GLOSSARY.md" in "".join(first["source"]), f"{path.name}: the first cell links the glossary"


def test_sync_is_idempotent_and_keeps_other_cells(tmp_path: Path) -> None:
    src = notebooks_dir() / "01_train.ipynb"
    path = tmp_path / src.name
    nb = json.loads(src.read_text())
    nb["cells"] = [c for c in nb["cells"] if not c["id"].startswith(exercises.CELL_PREFIX)]
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    assert exercises.sync(path) is True
    assert path.read_text() == src.read_text()  # same bytes as the committed notebook
    assert exercises.sync(path) is False


@pytest.mark.parametrize("bad,match", [
    ({"notebook": "05_more"}, "notebook '05_more' is not one of"),
    ({"set": ["steps 200"]}, "NAME=VALUE"),
    ({"hint": "x"}, "needs exactly"),
])
def test_bad_definitions_name_the_exercise_and_field(bad: dict, match: str, tmp_path: Path) -> None:
    raw = {f: getattr(EXERCISES[0], f) for f in exercises.FIELDS}
    raw = {k: list(v) if isinstance(v, tuple) else v for k, v in {**raw, **bad}.items()}
    lines = ['profile = "smoke"', 'intro = "x"', "[[exercise]]"] + [f"{k} = {json.dumps(v)}" for k, v in raw.items()]
    path = tmp_path / "ex.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"exercise {EXERCISES[0].id}: .*{match}"):
        exercises.load(path)


def _groups() -> dict[tuple[str, ...], list[exercises.Exercise]]:
    """Exercises that may share a run folder: the same model-shaping change (none, for most)."""
    groups: dict[tuple[str, ...], list[exercises.Exercise]] = {}
    for ex in EXERCISES:
        key = tuple(sorted(s for s in ex.set if s.split("=", 1)[0] in SHAPING))
        groups.setdefault(key, []).append(ex)
    return groups


def _change(ex: exercises.Exercise) -> tuple[str, Any, str]:
    """The changed parameter, its value as parsed from the command, and the first notebook run that takes it
    (steps: 01_train, not 02_align)."""
    name = ex.set[0].split("=", 1)[0]
    return name, parse_set([ex.set[0]])[name], next(nb for nb in ex.only if nb in PARAMS[name].notebooks)


def _notebook_resolves(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """What the notebook's own first check makes of papermill's ``parameters``: its parameters cell, then the
    injected values, resolved as its next cell does (``profiles.resolve_notebook``)."""
    cells = json.loads((notebooks_dir() / f"{name}.ipynb").read_text())["cells"]
    namespace: dict[str, Any] = {}
    exec("".join(next(c for c in cells if "parameters" in c["metadata"].get("tags", []))["source"]), namespace)
    return profiles.resolve_notebook(name, {**namespace, **parameters})


@pytest.mark.parametrize("key", list(_groups()), ids=lambda k: ",".join(k) or "shared")
def test_exercise_commands_run_their_notebooks_with_the_change(key: tuple[str, ...], tmp_path: Path, monkeypatch,
                                                               capsys) -> None:
    """Each command's exact arguments through the command line's own entry point, papermill stubbed (nothing trains):
    exit 0 from its parsing and checks, it runs exactly its notebooks in order, and the first one that takes the
    change receives it as parsed and resolves it to the same value. A group's commands share a run folder."""
    from tiebias.__main__ import main

    calls: list[tuple[Path, Path, dict[str, Any]]] = []  # what papermill would have received
    monkeypatch.setattr(study.pm, "execute_notebook",
                        lambda src, out, parameters, **kw: calls.append((Path(src), Path(out), dict(parameters))))
    run_dir = tmp_path / "run"
    for ex in _groups()[key]:
        calls.clear()
        code = main(ex.argv("smoke", run_dir))
        assert code == 0, f"{ex.id}: {ex.command('smoke')} -> exit {code}\n{capsys.readouterr().err[-2000:]}"
        assert [src.stem for src, _, _ in calls] == list(ex.only), f"{ex.id}: ran {calls}"
        for src, out, params in calls:
            assert src == notebooks_dir() / src.name and out == run_dir.resolve() / "notebooks" / src.name, (ex.id, src, out)
            assert params["profile"] == "smoke" and params["run_dir"] == str(run_dir.resolve()), (ex.id, params)
        name, value, target = _change(ex)
        params = next(p for src, _, p in calls if src.stem == target)
        assert name in params, f"{ex.id}: {name} did not reach {target}: {params}"
        assert repr(params[name]) == repr(value), f"{ex.id}: {target} got {name}={params[name]!r}, not {value!r}"
        assert repr(_notebook_resolves(target, params)[name]) == repr(value), f"{ex.id}: {target} resolves {name}"


REAL = "01-b"  # the exercise whose command runs for real (below)


@pytest.mark.slow
def test_one_exercise_command_runs_as_a_user_types_it(tmp_path: Path) -> None:
    """Exercise 01-b's command in a process of its own, as a user types it: it exits 0 and its change reaches the
    executed notebook's injected-parameters cell.

    It stands for all the commands (checked above with papermill stubbed) because it is the cheapest one that
    trains: it runs only 01_train, for the smoke profile's 40 steps; 01-a trains for 200 steps, and every other
    command runs 02, 03 or 04, after a training or with a training of its own.
    """
    ex = next(e for e in EXERCISES if e.id == REAL)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(notebooks_dir().parent / "lib"),
                                                         os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "tiebias", *ex.argv("smoke", run_dir)], env=env,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, f"{ex.id}: {ex.command('smoke')}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert sorted(p.stem for p in (run_dir / "notebooks").glob("*.ipynb")) == sorted(ex.only)
    name, value, target = _change(ex)
    executed = run_dir / "notebooks" / f"{target}.ipynb"
    cells = json.loads(executed.read_text())["cells"]
    injected = "".join("".join(c["source"]) for c in cells if "injected-parameters" in c["metadata"].get("tags", []))
    assert f"{name} = " in injected, f"{ex.id}: {name} did not reach {executed.name}"
    assert repr(value) in injected, f"{ex.id}: {ex.set[0]} not in {injected}"
