"""An unchanged notebook executed and saved in JupyterLab leaves git clean (the filter of .gitattributes / make setup)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiebias import nbfilter
from tiebias.config import profiles
from tiebias.config.params import NOTEBOOKS

ROOT = profiles.repo_root()
LIB = Path(nbfilter.__file__).resolve().parents[1]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_filter_leaves_the_committed_sources_as_they_are(name: str) -> None:
    text = (ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8")
    assert nbfilter.clean(text) == text


def _kernel_language_info() -> dict:
    """The language_info a running python3 kernel reports (what JupyterLab writes into a notebook it saves)."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        return kc.kernel_info(reply=True, timeout=60)["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run_all(source: dict) -> dict:
    """The source as JupyterLab holds it after Run All: outputs, counts, kernel blocks, widget state, cell metadata."""
    nb = json.loads(json.dumps(source))
    for n, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "printed\n"},
                           {"output_type": "execute_result", "execution_count": n + 1, "metadata": {},
                            "data": {"text/plain": "42"}}]
        cell["metadata"].update(scrolled=True, execution={"iopub.status.busy": "2026-01-01T00:00:00.000Z"})
    nb["metadata"]["kernelspec"] = {"display_name": "Python 3 (tiebias)", "language": "python", "name": "python3"}
    nb["metadata"]["language_info"] = _kernel_language_info()
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                               "version_minor": 0}}
    return nb


def _save(nb: dict, folder: Path, **hooks: object) -> Path:
    """Save a notebook as JupyterLab's server does (its contents manager)."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    folder.mkdir(exist_ok=True)
    FileContentsManager(root_dir=str(folder), **hooks).save({"type": "notebook", "format": "json", "content": nb},
                                                            "nb.ipynb")
    return folder / "nb.ipynb"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LIB), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, env=env,
                          capture_output=True, text=True, check=True).stdout


def _filtered_repo(repo: Path) -> None:
    """A git repository with the filter make setup installs, its files committed."""
    for f in (".gitattributes", ".gitignore"):  # (.gitignore: the checkpoints a save writes beside the notebook)
        shutil.copy(ROOT / f, repo / f)
    _git(repo, "init", "-q")
    _git(repo, "config", "filter.nbstripout.clean", f'"{sys.executable}" -m tiebias.nbfilter')
    _git(repo, "config", "filter.nbstripout.smudge", "cat")
    _git(repo, "config", "filter.nbstripout.required", "true")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "sources")


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_unchanged_notebook_saved_in_jupyterlab_leaves_git_clean(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    source_text = (ROOT / "notebooks" / "01_train.ipynb").read_text(encoding="utf-8")
    (repo / "nb.ipynb").write_text(source_text, encoding="utf-8")
    _filtered_repo(repo)
    saved = _save(_run_all(json.loads(source_text)), tmp_path / "lab")
    shutil.copy(saved, repo / "nb.ipynb")
    assert '"version": "3.' in saved.read_text() and '"outputs": []' not in saved.read_text()
    assert _git(repo, "diff") == ""
    # git status compares sizes before contents: the file is listed until git add, which stages nothing
    _git(repo, "add", "nb.ipynb")
    assert _git(repo, "status", "--porcelain") == ""
    # nbstripout alone (the filter before) keeps the kernel blocks JupyterLab rewrote: the same file is modified
    _git(repo, "config", "filter.nbstripout.clean", f'"{sys.executable}" -m nbstripout --keep-id')
    shutil.copy(saved, repo / "nb.ipynb")
    assert '"display_name": "Python 3 (tiebias)"' in _git(repo, "diff")


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_post_save_hook_keeps_git_status_clean_and_stages_no_real_change(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source = json.loads((ROOT / "notebooks" / "02_align.ipynb").read_text(encoding="utf-8"))
    (tmp_path / "nb.ipynb").write_text(json.dumps(source, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    _filtered_repo(tmp_path)
    hook = {"post_save_hook": "tiebias.nbfilter.post_save"}  # as jupyter lab --ContentsManager.post_save_hook=...
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(LIB), os.environ.get("PYTHONPATH", "")]))  # for the filter
    nb = _run_all(source)
    _save(nb, tmp_path, **hook)
    assert _git(tmp_path, "status", "--porcelain") == ""  # outputs and kernel details only: not listed
    nb["cells"][0]["source"] = "# an edit"
    _save(nb, tmp_path, **hook)
    assert _git(tmp_path, "status", "--porcelain") == " M nb.ipynb\n"  # a real change: listed, not staged
