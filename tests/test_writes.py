"""Nothing the kit writes lands outside the folder it was given: no write through a symbolic link (planted under a
temporary name, as a file the kit replaces, or as one of the run folder's subfolders), no command writing into a
folder that is not a run folder, and no text of a command line run by a shell."""

from __future__ import annotations

import os
import subprocess
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
BAD_IDS = ['x"; touch F; echo "', "x`touch F`", "$(touch F)"]


def test_make_exercise_gives_its_id_to_python_as_it_is_and_the_shell_runs_none(tmp_path: Path) -> None:
    """A quote, a backtick or ``$(...)`` in ``ID`` (``$$`` on make's command line) reaches python as one argument,
    unchanged; the shell runs none of it. ``BIN`` names a stand-in python that writes down its arguments."""
    stub = tmp_path / "bin" / "python"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$ARGS"\n')
    stub.chmod(0o755)
    for i, bad in enumerate(BAD_IDS):
        args = tmp_path / f"args{i}"
        subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "exercise", f"ID={bad.replace('$', '$$')}",
                        "STAMP=", f"BIN={stub.parent}"], cwd=tmp_path, env={**_env(), "ARGS": str(args)},
                       check=True, capture_output=True, text=True, timeout=60)
        assert not (tmp_path / "F").exists(), f"the shell ran text of ID={bad!r}"
        assert args.read_text().split("\0")[:-1] == ["-m", "tiebias", "exercise", bad, "--run-dir", f"runs/ex-{bad}"]


@pytest.mark.parametrize("bad", BAD_IDS + ["../x", "01-B"])
def test_an_exercise_id_outside_the_alphabet_is_refused(bad: str, capsys) -> None:
    assert cli.main(["exercise", bad]) == 2
    err = capsys.readouterr().err
    assert f"exercise: {bad!r} is not an exercise id; there are 01-a" in err  # refused by exercises.find, by name


def test_exercise_trains_under_the_checkouts_runs_folder_from_any_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    seen = []
    monkeypatch.setattr(cli, "_study", lambda args, **kw: seen.append(args) or 0)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["exercise", "01-b"]) == 0
    assert seen[0].run_dir == str(runs_dir() / "ex-01-b"), seen[0].run_dir
    assert str(runs_dir() / "ex-01-b") in capsys.readouterr().out  # the printed command is the one that runs
    assert not (tmp_path / "runs").exists()


# -- one rule for every file the kit writes: never through a symbolic link ------------------------------------------
def _outside(tmp_path: Path) -> dict[str, Path]:
    """Files and a folder outside the run folder that planted links point at; their content must never change."""
    out = tmp_path / "outside"
    out.mkdir()
    files = {name: out / name for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt")}
    for p in files.values():
        p.write_text("precious\n")
    return files


def _untouched(outside: dict[str, Path]) -> None:
    for p in outside.values():
        assert p.read_text() == "precious\n", f"{p} was written through a link"
    assert sorted(p.name for p in next(iter(outside.values())).parent.iterdir()) == sorted(outside), \
        "a file was created outside the run folder"


def test_links_planted_under_temporary_names_are_never_written_through(fresh_run, tmp_path: Path, capsys) -> None:
    """Text and JSON (the reproduction pages, report.html, the lock's holder file), a table (to_csv), a token split
    (np.save) and the frequencies (csv writer): each written beside a planted link, never through it."""
    import numpy as np
    import pandas as pd

    from tiebias.data.tokens import save_frequencies
    from tiebias.system.atomic import atomic_path

    outside = _outside(tmp_path)
    run = fresh_run
    for name, target in ((".reproduction.md.tmp", "a.txt"), (".reproduction.json.tmp", "b.txt"),
                         ("..lock-holder.json.tmp", "c.txt"), (".report.html.tmp", "d.txt")):
        (run.path / name).symlink_to(outside[target])
    (run.path / "reproduction.md").symlink_to(outside["e.txt"])  # a link at the final name is replaced, not followed
    assert cli.main(["reproduction", str(run.path)]) == 0, capsys.readouterr().err
    _untouched(outside)
    assert not (run.path / "reproduction.md").is_symlink() and "Reproduction report" in \
        (run.path / "reproduction.md").read_text()
    run.metrics_dir.mkdir(exist_ok=True)
    (run.metrics_dir / ".t.csv.tmp").symlink_to(outside["a.txt"])
    run.save_table(pd.DataFrame({"x": [1]}), "t")
    ids, counts = run.tokens("train"), run.frequencies()
    (run.tokens_dir / ".train.npy.tmp").symlink_to(outside["b.txt"])
    with atomic_path(run.tokens_path("train")) as tmp, tmp.open("wb") as f:  # how Run.prepare saves a split
        np.save(f, ids.numpy().astype(np.uint16))
    run.frequencies_path.unlink()
    run.frequencies_path.symlink_to(outside["c.txt"])
    save_frequencies(run.frequencies_path, run.tokenizer(), counts)
    _untouched(outside)
    assert run.tokens("train").equal(ids) and (run.frequencies() == counts).all()


def test_training_writes_no_file_through_a_link(fresh_run, tiny_config, tmp_path: Path) -> None:
    """train_config.json, the metrics logs, checkpoints, complete.json and the final model are written beside
    planted links and renamed over them; a log appended a row at a time refuses a link; a lens is written beside
    links in its folder."""
    from tiebias.lens import lenses
    from tiebias.train.trainer import train

    outside = _outside(tmp_path)
    run = fresh_run
    mdir = run.model_dir("tied", 0)
    (mdir / "checkpoints").mkdir(parents=True)
    run.metrics_dir.mkdir()
    for link, target in ((mdir / ".train_config.json.tmp", "a.txt"), (mdir / ".complete.json.tmp", "b.txt"),
                         (run.metrics_dir / ".tied-s0.csv.tmp", "c.txt"), (mdir / "model.safetensors", "d.txt"),
                         (mdir / "checkpoints" / ".tmp-step-4", "e.txt")):
        link.symlink_to(outside[target])
    train(run, "tied", 0, tiny_config, progress=False, num_threads=1)
    _untouched(outside)
    assert run.is_complete("tied", 0) and not (mdir / "model.safetensors").is_symlink()
    from tiebias.run.files import RunFolderError, open_append

    log = run.metrics_path("tied", 0)
    log.unlink()
    log.symlink_to(outside["f.txt"])
    with pytest.raises(RunFolderError, match=r"tied-s0\.csv: is a symbolic link .*Remove the link"):
        open_append(log)
    lens_dir = tmp_path / "lens"
    lens_dir.mkdir()
    (lens_dir / "params.pt").symlink_to(outside["d.txt"])
    (lens_dir / "config.json").symlink_to(outside["e.txt"])
    lenses.save_lens(lenses.new_lens(run.load_model("tied", 0)), lens_dir)
    _untouched(outside)
    assert [p.name for p in lens_dir.iterdir() if p.is_symlink()] == []


def test_figures_and_executed_notebooks_are_not_written_through_links(tmp_path: Path, monkeypatch) -> None:
    import plotly.graph_objects as go

    from tiebias import study
    from tiebias.output.notebook import save_figure

    outside = _outside(tmp_path)
    figures = tmp_path / "run" / "figures"
    figures.mkdir(parents=True)
    (figures / "f.html").symlink_to(outside["a.txt"])
    (figures / "f.json").symlink_to(outside["b.txt"])
    (figures / "plotly.min.js").symlink_to(outside["a.txt"].parent / "plotly.min.js")  # dangling: would be created
    save_figure(go.Figure(go.Scatter(y=[1, 2])), figures, "f")
    _untouched(outside)
    assert "plotly.min.js" in (figures / "f.html").read_text() and (figures / "plotly.min.js").stat().st_size > 1e6
    executed = tmp_path / "run" / "notebooks" / "01_train.ipynb"
    executed.parent.mkdir()
    executed.symlink_to(outside["c.txt"])
    monkeypatch.setattr(study.pm, "execute_notebook", lambda src, target, **kw: Path(target).write_text("{}"))
    study._execute("01_train", notebooks_dir() / "01_train.ipynb", executed, {}, False)
    _untouched(outside)
    assert not executed.is_symlink() and executed.read_text() == "{}"


# -- the run folder's subfolders: a link is refused, naming it ------------------------------------------------------
@pytest.mark.parametrize("sub", ["report", "results", "metrics", "figures", "models", "notebooks"])
def test_a_linked_subfolder_is_refused_naming_it(sub: str, fresh_run, tmp_path: Path, capsys) -> None:
    import pandas as pd
    import plotly.graph_objects as go

    from tiebias.output.notebook import save_figure
    from tiebias.run.guard import NotARunFolderError, check_folder

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (fresh_run.path / sub).symlink_to(elsewhere, target_is_directory=True)
    assert cli.main(["reproduction", str(fresh_run.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{sub} -> {elsewhere}" in err and "Replace each link by a real folder" in err
    with pytest.raises(NotARunFolderError, match=f"{sub} -> "):
        check_folder(fresh_run.path)  # what the study and Run.prepare check first
    with pytest.raises(NotARunFolderError, match=f"{sub} -> "):
        fresh_run.save_table(pd.DataFrame({"x": [1]}), "t")
    if sub == "figures":
        with pytest.raises(ValueError, match="figures: is a symbolic link"):
            save_figure(go.Figure(), fresh_run.figures_dir, "f")
    assert list(elsewhere.iterdir()) == []


# -- clear one-line errors: a linked lock, a folder made read-only while a notebook runs ----------------------------
def test_a_linked_lock_is_refused_in_one_line(fresh_run, tmp_path: Path, capsys) -> None:
    outside = _outside(tmp_path)
    fresh_run.lock_path.unlink(missing_ok=True)  # left by Run.prepare
    fresh_run.lock_path.symlink_to(outside["a.txt"])
    assert cli.main(["reproduction", str(fresh_run.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "writer lock" in err and "is a symbolic link" in err and "rm that path" in err
    _untouched(outside)


def test_a_run_folder_made_read_only_while_a_notebook_runs_ends_in_one_line(tmp_path: Path, monkeypatch,
                                                                            capsys) -> None:
    """What papermill raises when it cannot save the executed notebook any more (the folder made read-only or
    immutable mid-training): one line naming the run folder and what to do, exit 1 as a failed notebook."""
    from tiebias import study

    def unwritable(src, target, **kw):
        raise PermissionError(13, "Permission denied", target)

    monkeypatch.setattr(study.pm, "execute_notebook", unwritable)
    run_dir = tmp_path / "run"
    assert cli.main(["study", "--profile", "smoke", "--run-dir", str(run_dir), "--only", "01_train"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"the run folder {run_dir} cannot be written" in err and "01_train.ipynb" in err and "chmod" in err


# -- reproduction writes only into a run folder of the kit ------------------------------------------------------------
def test_reproduction_refuses_a_users_folder_with_a_config_json(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    files = {"config.json": '{"name": "my project"}', "report.html": "<p>mine</p>", "reproduction.md": "# mine\n"}
    for name, text in files.items():
        (mine / name).write_text(text)
    assert cli.main(["reproduction", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a run folder of this kit" in err and "config.json is not one" in err
    assert {p.name: p.read_text() for p in mine.iterdir()} == files  # nothing written, nothing added


# -- the report's rerun command: quoted, complete, the profile used -------------------------------------------------
def test_the_rerun_command_is_quoted_and_names_what_an_interrupted_study_ran(fresh_run, tmp_path: Path,
                                                                           monkeypatch) -> None:
    """A study stopped before its notebooks recorded anything (an interrupted scale run): the rerun command still
    holds its profile, ``--only`` and ``--set``, and a folder name with a backtick and a newline is quoted."""
    import shlex
    import shutil
    import signal

    from tiebias import study
    from tiebias.output.reproduction_page import command, write_reproduction
    from tiebias.run.folder import Run

    odd = tmp_path / "a`touch F`\nb"
    shutil.copytree(fresh_run.path, odd)

    def stopped(name, *args, **kwargs):
        raise study.Stopped(signal.SIGTERM)

    monkeypatch.setattr(study, "_execute", stopped)
    with pytest.raises(study.Stopped):
        study.run_study("scale", odd, study.parse_set(["lens_steps=7", "lens_budgets=1,2"]), only=["03_lens"],
                        progress=False)
    run = Run(odd)
    assert run.profile is None  # nothing recorded it: the page used to say --profile default
    text = command(run)
    argv = shlex.split(text)
    assert argv[:3] == ["python", "-m", "tiebias"]
    args = cli.main_parser().parse_args(argv[3:])
    assert (args.profile, args.run_dir, args.only) == ("scale", str(odd), ["03_lens"])
    assert study.parse_set(args.set) == {"lens_steps": 7, "lens_budgets": [1, 2]}
    subprocess.run(["sh", "-c", f": {text}"], cwd=tmp_path, check=True)  # pasted into a shell: it runs nothing
    assert not (tmp_path / "F").exists()
    md = write_reproduction(run).read_text()
    assert "--profile scale" in md and "--profile default" not in md
