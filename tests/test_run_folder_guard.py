"""The kit writes only into its own run folders (or a new or empty one), never a user's folder or the corpus."""

import hashlib
import json
from pathlib import Path

import pytest

from tiebias import study
from tiebias.__main__ import main
from tiebias.config import profiles
from tiebias.config.environment import cell_timeout
from tiebias.models import sources
from tiebias.run.folder import Run
from tiebias.run.guard import NotARunFolderError, check_folder, mark
from tiebias.run.layout import MARKERS, RunLayout

HOW = ("--run-dir PATH", "-p run_dir PATH", "make study RUN=PATH")


def snapshot(path: Path) -> dict[str, str]:
    """Every entry under a folder (names, and a hash of each file's content)."""
    return {str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def users_folder(tmp_path: Path) -> Path:
    """A folder of the user's: a report, a summary and figures, but no run marker or config."""
    r = tmp_path / "mine"
    (r / "figures").mkdir(parents=True)
    (r / "report.html").write_text("<p>my own report</p>")
    (r / "summary.json").write_text('{"mine": true}')
    (r / "figures" / "plot.html").write_text("<p>my plot</p>")
    return r


def refused(call, folder: Path, exc: type[BaseException] = NotARunFolderError) -> str:
    """Run ``call``, expect ``exc``; the folder's names and contents must be as before. Returns the message."""
    before = snapshot(folder) if folder.exists() else None
    with pytest.raises(exc) as info:
        call()
    assert (snapshot(folder) if folder.exists() else None) == before
    return str(info.value)


def cli(argv: list[str], folder: Path, capsys) -> str:
    """Run the command line, expect exit 2 and an error naming run_dir; nothing in ``folder`` changes."""
    before = snapshot(folder)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert snapshot(folder) == before
    assert err.startswith("error: run_dir"), err
    return err


# -- item 4: what may be written into ------------------------------------------------------------------
def test_new_empty_and_kit_folders_are_allowed(tmp_path: Path) -> None:
    assert check_folder(tmp_path / "new") == (tmp_path / "new").resolve()
    assert not (tmp_path / "new").exists()  # checking creates nothing
    (tmp_path / "empty").mkdir()
    check_folder(tmp_path / "empty")
    locked = tmp_path / "locked"  # an earlier run that stopped right after taking its lock
    locked.mkdir()
    (locked / ".lock").write_text("")
    check_folder(locked)
    mine = users_folder(tmp_path)
    mark(mine, "run")
    assert (mine / MARKERS["run"]).is_file() and check_folder(mine) == mine


def test_prepare_and_study_mark_the_folder(prepared_run: Run, tmp_path: Path, monkeypatch) -> None:
    assert prepared_run.marker_path("run").is_file() and not prepared_run.marker_path("pair").exists()
    seen: list[bool] = []
    monkeypatch.setattr(study.pm, "execute_notebook", lambda *a, **kw: seen.append(RunLayout(run).marker_path().is_file()))
    run = tmp_path / "run"
    study.run_study("smoke", run, only=["02_align"], progress=False)
    assert seen == [True] and (run / "notebooks").is_dir()
    study.run_study("smoke", run, only=["02_align"], progress=False)  # its own folder: accepted again


def test_a_pair_folder_is_not_a_run_folder_and_back(prepared_run: Run, tmp_path: Path) -> None:
    pair = sources.external_dir("a/tied", "b/untied", tmp_path / "pair")
    assert pair.marker_path("pair").is_file() and not pair.marker_path("run").exists()
    msg = refused(lambda: Run.prepare(pair.path, vocab_size=512), pair.path)
    assert msg.startswith("run_dir: ") and "is an external pair's folder" in msg and "--run-dir PATH" in msg
    msg = refused(lambda: sources.external_dir("a/tied", "b/untied", prepared_run.path), prepared_run.path)
    assert "holds a run or a model" in msg and "leave run_dir None" in msg
    with pytest.raises(NotARunFolderError, match="holds a run"):
        study.check_study("smoke", prepared_run.path, {"tied_source": "a/tied", "untied_source": "b/untied"},
                          only=["02_align"])
    study.check_study("smoke", pair.path, {"tied_source": "a/tied", "untied_source": "b/untied"}, only=["02_align"])


def test_unmarked_folders_of_an_earlier_version_are_refused_by_name(tmp_path: Path) -> None:
    """Folders made before the kit marked them (a run with its config.json, a pair folder at the kit's own place)."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"corpus": "shakespeare", "vocab_size": 512, "tokenizer_size": 512}))
    (old / "models").mkdir()
    assert not any((old / marker).exists() for marker in MARKERS.values())
    msg = refused(lambda: Run.prepare(old, vocab_size=512), old)
    assert msg.startswith(f"run_dir: {str(old)!r} is not a run folder of this kit") and "earlier version" in msg
    pair = sources.external_path("a/tied", "b/untied", root=tmp_path / "runs")
    (pair / "figures").mkdir(parents=True)
    (pair / "figures" / "02_table1.html").write_text("old")
    msg = refused(lambda: sources.external_dir("a/tied", "b/untied", root=tmp_path / "runs"), pair)
    assert "is not an external pair's folder of this kit" in msg and "figures/" in msg


# -- case 1: a folder of the user's (report.html, summary.json, figures/) --------------------------------
def test_case1_users_folder_is_refused_by_prepare(tmp_path: Path) -> None:
    r = users_folder(tmp_path)
    msg = refused(lambda: Run.prepare(r, vocab_size=512), r)
    assert msg.startswith(f"run_dir: {str(r)!r} is not a run folder of this kit")
    assert "report.html" in msg and all(h in msg for h in HOW) and "overwrite" not in msg


def test_case1_users_folder_is_refused_by_the_study(tmp_path: Path, capsys) -> None:
    r = users_folder(tmp_path)
    err = cli(["study", "--profile", "smoke", "--run-dir", str(r), "--only", "01_train"], r, capsys)
    assert "not a run folder of this kit" in err and "Nothing was written" in err


def test_case1_users_folder_is_refused_for_an_external_pair(tmp_path: Path, capsys) -> None:
    r = users_folder(tmp_path)
    msg = refused(lambda: sources.external_dir("a/tied", "b/untied", r), r)
    assert msg.startswith("run_dir: ") and "is not an external pair's folder of this kit" in msg
    assert "figures/" in msg
    err = cli(["study", "--profile", "smoke", "--run-dir", str(r), "--only", "02_align",
               "--set", "tied_source=a/tied", "--set", "untied_source=b/untied"], r, capsys)
    assert "not an external pair's folder" in err


@pytest.mark.slow
def test_case1_notebook_02_checks_the_pair_folder_before_loading(tmp_path: Path) -> None:
    import papermill as pm

    nb = Path(__file__).resolve().parents[1] / "notebooks"
    r = users_folder(tmp_path)
    # the sources do not exist: had anything been loaded first, the error would name tied_source
    msg = refused(lambda: pm.execute_notebook(
        str(nb / "02_align.ipynb"), str(tmp_path / "02.ipynb"), cwd=str(nb), kernel_name="python3", progress_bar=False,
        execution_timeout=cell_timeout(),
        parameters={"profile": "smoke", "run_dir": str(r), "tied_source": "nobody/tied", "untied_source": "nobody/untied"}),
        r, pm.PapermillExecutionError)
    assert "run_dir: " in msg and "not an external pair's folder" in msg


# -- case 2: an unrelated config.json --------------------------------------------------------------------
def test_case2_unrelated_config_is_refused_without_suggesting_overwrite(tmp_path: Path, capsys) -> None:
    r = tmp_path / "project"
    r.mkdir()
    (r / "config.json").write_text(json.dumps({"name": "my project", "vocab_size": 10}))
    for overwrite in (False, True):
        msg = refused(lambda ow=overwrite: Run.prepare(r, vocab_size=512, overwrite=ow), r)
        assert msg.startswith(f"run_dir: {str(r)!r} is not a run folder of this kit")
        assert "config.json is not one this kit writes" in msg and "Choose another run_dir" in msg
        assert all(h in msg for h in HOW) and "overwrite" not in msg
    err = cli(["study", "--profile", "smoke", "--run-dir", str(r), "--set", "overwrite=true"], r, capsys)
    assert "not a run folder of this kit" in err and "overwrite" not in err


# -- case 3: an empty run_dir is a mistake, not "not given" ---------------------------------------------
@pytest.mark.parametrize("blank", ["", "  "])
def test_case3_empty_run_dir_is_an_error(blank: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(profiles.RUN_DIR_ENV, str(tmp_path / "from-env"))
    # the profiles (config, below the run layer) refuse it as a plain ValueError; the run layer as NotARunFolderError
    for call, exc in ((lambda: profiles.resolve("smoke", blank), ValueError),
                      (lambda: Run.prepare(blank, vocab_size=512), NotARunFolderError),
                      (lambda: sources.external_dir("a/tied", "b/untied", blank), NotARunFolderError)):
        msg = refused(call, tmp_path, exc)
        assert msg.startswith(f"run_dir: {blank!r} is empty") and all(h in msg for h in HOW)
        assert "leave run_dir out (None)" in msg
    assert main(["study", "--profile", "smoke", "--run-dir", blank, "--only", "01_train"]) == 2
    assert capsys.readouterr().err.startswith(f"error: run_dir: {blank!r} is empty")
    assert list(tmp_path.iterdir()) == []


# -- case 5: the run folder and the corpus folder are apart ---------------------------------------------
def corpus_folder(tmp_path: Path) -> Path:
    c = tmp_path / "texts"
    c.mkdir()
    (c / "a.txt").write_text("To be, or not to be, that is the question.\n" * 50)
    (c / "b.txt").write_text("Friends, Romans, countrymen, lend me your ears.\n" * 50)
    return c


@pytest.mark.parametrize("where", ["same", "run inside corpus", "corpus inside run"])
def test_case5_run_folder_and_corpus_are_apart(where: str, tmp_path: Path, capsys) -> None:
    c = corpus_folder(tmp_path)
    if where == "same":
        r = c
    elif where == "run inside corpus":
        r = c / "run"
    else:
        r = tmp_path / "run"
        mark(r, "run")
        c = c.rename(r / "texts")
    words = {"same": "is the corpus folder", "run inside corpus": "lies inside the corpus folder",
             "corpus inside run": "holds the corpus"}[where]
    for call in (lambda: Run.prepare(r, corpus=str(c), vocab_size=512),
                 lambda: sources.external_dir("a/tied", "b/untied", r, corpus=str(c))):
        msg = refused(call, tmp_path)
        assert msg.startswith(f"run_dir, corpus: run_dir {str(r)!r} {words} {str(c)!r}")
        assert all(h in msg for h in HOW) and "Nothing was written" in msg
    before = snapshot(tmp_path)
    assert main(["study", "--profile", "smoke", "--run-dir", str(r), "--set", f"corpus={c}"]) == 2
    assert capsys.readouterr().err.startswith("error: run_dir, corpus: ")
    assert snapshot(tmp_path) == before


def test_case5_a_corpus_beside_the_run_is_fine(tmp_path: Path) -> None:
    c = corpus_folder(tmp_path)
    assert check_folder(tmp_path / "run", corpus=str(c)) == (tmp_path / "run").resolve()
    assert check_folder(tmp_path / "run", corpus="shakespeare") == (tmp_path / "run").resolve()
