"""Every notebook ends with its exercises as defined in notebooks/exercises.toml, every exercise command runs
(through the command line with papermill stubbed; one of them for real, as pasted), and every answer's numbers come
from the measured runs in notebooks/exercise_numbers.json."""

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tiebias import study
from tiebias.config import profiles
from tiebias.config.params import NOTEBOOKS, PARAMS, TRAIN_KEYS
from tiebias.study import check_study, notebooks_dir, parse_set
from tiebias.teach import exercises

spec = importlib.util.spec_from_file_location("exercise_answers", notebooks_dir().parent / "scripts" / "exercise_answers.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
HEADER, EXERCISES = exercises.load()
NUMBERS = script.load_numbers()
# parameters that shape the models: a run folder cannot take a second value of these, so such an exercise
# gets a folder of its own (shared only with exercises making the very same change)
SHAPING = set(TRAIN_KEYS) | {"corpus", "vocab_size"}  # TrainConfig's fields and what Run.prepare takes


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
    text = script.markdown(ex, HEADER["profile"], NUMBERS)
    flat = " ".join(ex.answer.split())
    assert f"{HEADER['profile'].capitalize()} profile" in flat or f"`{HEADER['profile']}` profile" in flat
    assert text.count("<details>") == 1 and text.rstrip().endswith("</details>")
    assert "**Predict first.**" in text and f"```bash\nmake exercise ID={ex.id}\n```" in text
    assert f"!make -C .. exercise ID={ex.id}" in text and ex.command(HEADER["profile"]) in text


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_ends_with_its_rendered_exercises(name: str) -> None:
    path = notebooks_dir() / f"{name}.ipynb"
    nb = json.loads(path.read_text())
    assert script.rendered(nb, name, NUMBERS) == nb["cells"], \
        f"{path.name}: exercise cells out of date; run python scripts/exercise_answers.py --render"
    assert path.read_text() == json.dumps(nb, indent=1, ensure_ascii=False) + "\n"  # as the script writes it
    assert "../GLOSSARY.md" in "".join(nb["cells"][0]["source"]), f"{path.name}: the first cell links the glossary"


def test_rendering_puts_the_exercises_last_and_keeps_the_notebooks_own_cells() -> None:
    """The rendered cells come back after the notebook's own cells; the coding exercise, written in the notebook,
    stays as it is, under the heading."""
    nb = json.loads((notebooks_dir() / "01_train.ipynb").read_text())
    coding = [c for c in nb["cells"] if c["id"].startswith("exercise-01-code-")]
    own = [c for c in nb["cells"] if not c["id"].startswith(script.CELL_PREFIX)]
    assert script.rendered({"cells": own[:1] + coding + own[1:]}, "01_train", NUMBERS) == nb["cells"]
    assert script.render(NUMBERS, write=False) == [], "run python scripts/exercise_answers.py --render"


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


def _student_checkout(tmp_path: Path, ex: exercises.Exercise) -> Path:
    """A checkout as a student leaves it: the kit's code and notebooks copied (the kit finds its notebooks beside its
    code) and committed with git; then, saved into the exercise's notebook as JupyterLab's autosave would, a
    half-written coding answer (a syntax error) and a cell that starts this same exercise."""
    root = notebooks_dir().parent
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("Makefile", "pyproject.toml", "constraints.txt", ".venv", "scripts", "data"):  # make's stamp: current
        (work / name).symlink_to(root / name)
    for name in ("lib", "notebooks"):
        shutil.copytree(root / name, work / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    git = ["git", "-C", str(work), "-c", "user.name=kit", "-c", "user.email=kit@example.org"]
    for args in (["init", "-q"], ["add", "notebooks"], ["commit", "-q", "-m", "the kit"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    path = work / "notebooks" / f"{ex.notebook}.ipynb"
    nb = json.loads(path.read_text())
    stub = next(c for c in nb["cells"] if c["cell_type"] == "code" and "raise NotImplementedError" in "".join(c["source"]))
    stub["source"] = ["def output_path_grad(hidden, W, input_ids):\n", "    return (hidden["]
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "student-exercise", "metadata": {},
                        "outputs": [], "source": [f"!make -C .. exercise ID={ex.id} PROFILE=smoke"]})
    path.write_text(json.dumps(nb, indent=1))
    return work


@pytest.mark.slow
@pytest.mark.skipif(not (notebooks_dir().parent / ".venv" / "bin" / "python").exists(), reason="needs make setup's .venv")
def test_one_exercise_command_runs_as_pasted_on_the_committed_notebooks(tmp_path: Path) -> None:
    """``make exercise ID=01-b``, typed in a shell whose PATH has no project environment (as JupyterLab's terminal, or
    a notebook cell's ``!make -C ..``), in a checkout whose 01 notebook holds a student's edits: a syntax error and a
    cell that starts this exercise. It runs the notebook as committed, once: it exits 0, says it runs the committed
    notebooks, prints the study command, trains once (one notebook line, the executed notebook holds none of the
    student's cells, so nothing in it starts a second study), and the change reaches the injected-parameters cell.

    The one change from the pasted line is PROFILE=smoke (40 steps instead of the class profile's 300, which would take
    minutes); the class profile's arguments of every exercise pass the same checks above. 01-b stands for all the
    commands because it is the cheapest one that trains: it runs only 01_train. The only environment variable set is
    PYTHONPATH, to the copied code (the environment's own install points at the repository's).
    """
    ex = next(e for e in EXERCISES if e.id == REAL)
    work = _student_checkout(tmp_path, ex)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIEBIAS_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", PYTHONPATH=str(work / "lib"))
    out = subprocess.run(["make", "exercise", f"ID={ex.id}", "PROFILE=smoke"], cwd=work, env=env, capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, f"make exercise ID={ex.id}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    run_dir = work / "runs" / f"ex-{ex.id}"
    assert ex.command("smoke") in out.stdout, out.stdout[-2000:]
    assert "runs the notebooks as committed (git HEAD" in out.stdout, out.stdout[-2000:]
    assert out.stdout.count(f"{ex.notebook}: ") == 1, out.stdout[-2000:]
    assert [p.name for p in (work / "runs").iterdir()] == [f"ex-{ex.id}"]
    assert sorted(p.stem for p in (run_dir / "notebooks").glob("*.ipynb")) == sorted(ex.only)
    name, value, target = _change(ex)
    executed = run_dir / "notebooks" / f"{target}.ipynb"
    cells = json.loads(executed.read_text())["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "return (grad_at_embeddings[" not in code and "!make" not in code, "the student's cells ran"
    assert not [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    injected = "".join("".join(c["source"]) for c in cells if "injected-parameters" in c["metadata"].get("tags", []))
    assert f"{name} = " in injected, f"{ex.id}: {name} did not reach {executed.name}"
    assert repr(value) in injected, f"{ex.id}: {ex.set[0]} not in {injected}"


@pytest.mark.parametrize("argv", [["exercise", REAL], ["study", "--profile", "smoke", "--only", "01_train"]],
                         ids=["exercise", "study"])
def test_a_study_inside_a_study_kernel_refuses_in_one_line(argv: list[str], tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    """A cell that starts an exercise, saved into a notebook that a study then runs (its kernel has the study's
    marker): the command refuses in one line before anything runs or is written, so the cell ends there."""
    from tiebias.__main__ import main
    from tiebias.config.environment import STUDY_ENV

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(STUDY_ENV, "1")
    monkeypatch.setattr(study.pm, "execute_notebook", lambda *a, **kw: pytest.fail("a notebook ran"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused inside a notebook that a study runs" in err, err
    assert not list(tmp_path.iterdir())


def test_exercise_command_lists_and_refuses_unknown_ids(capsys) -> None:
    from tiebias.__main__ import main

    assert main(["exercise"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {e.id}  {e.notebook}  {e.title}" in listed for e in EXERCISES), listed
    assert main(["exercise", "09-z"]) == 2
    assert "'09-z' is not an exercise id; there are 01-a" in capsys.readouterr().err


def test_answers_quote_the_measured_runs_of_their_own_exercise() -> None:
    """The numbers file holds one class run and, per exercise, a run of that exercise (its change taken), and every
    field of every answer template is filled from it."""
    assert NUMBERS["profile"] == HEADER["profile"] == NUMBERS["base"]["profile"]
    assert set(NUMBERS["exercises"]) == {e.id for e in EXERCISES}
    for ex in EXERCISES:
        measured = NUMBERS["exercises"][ex.id]
        assert measured["run"] == f"runs/ex-{ex.id}" and measured["profile"] == HEADER["profile"], ex.id
        name, value, _ = _change(ex)
        if name in measured["ex"]:
            assert measured["ex"][name] == value, (ex.id, name)
        text = script.answer(ex, NUMBERS)
        assert "{" not in text and "}" not in text, (ex.id, text)


def test_the_base_run_is_the_walkthroughs_class_run() -> None:
    """The answers' class run is the run the walkthrough shows: the same notebook times and the same claim-2 share."""
    walk = notebooks_dir().parent / "walkthrough"
    base = NUMBERS["base"]
    assert f"| {base['time_01_train']} s |" in (walk / "README.md").read_text()
    assert f"{base['share']:.1%}" in (walk / "01_train.md").read_text()


def test_teaching_md_is_the_lesson_template_filled_from_the_class_run() -> None:
    text = (notebooks_dir().parent / "TEACHING.md").read_text()
    assert text == script.lesson(NUMBERS["base"]), "TEACHING.md is out of date: run python scripts/exercise_answers.py"
    assert f"make exercise ID={EXERCISES[0].id}" in text


def test_a_damaged_numbers_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    from tiebias.run.files import DamagedFileError

    bad = tmp_path / "exercise_numbers.json"
    bad.write_text('{"base": {"steps": 4')
    with pytest.raises(DamagedFileError, match=r"exercise_numbers\.json.*git checkout notebooks/exercise_numbers\.json"):
        script.load_numbers(bad)
