"""``python -m tiebias study`` in a subprocess: a failed notebook is one error line and the executed notebook's
path (exit 1), a bad parameter exit 2, and SIGTERM / SIGINT one line (exit 143 / 130) after which a rerun of
the same command resumes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from tiebias import study
from tiebias.config.variants import step_of
from tiebias.run.folder import Run

LIB = Path(__file__).resolve().parents[1] / "lib"
# What the CLI prints on a failed notebook is two lines (the error, the executed notebook); the bound leaves two
# more for a warning an imported package may print in another environment. Before: 41 lines (traceback of the
# runner, papermill's exception with the notebook's traceback, progress bar, the kernel's TCP warning).
MAX_LINES = 4


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tiebias", "study", "--profile", "smoke", *args]


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(LIB), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "TIEBIAS_THREADS": "1"}


def _lines(out: str, err: str) -> list[str]:
    return [line for line in (out + err).splitlines() if line.strip()]


def test_failed_notebook_prints_its_error_in_a_few_lines(tmp_path: Path) -> None:
    run = tmp_path / "empty"  # passes every parameter check; 02_align's first cells find no models
    res = subprocess.run(_cli("--run-dir", str(run), "--only", "02_align"), capture_output=True, text=True,
                         env=_env(), timeout=300)
    assert res.returncode == 1, res.stderr
    lines = _lines(res.stdout, res.stderr)
    assert len(lines) <= MAX_LINES, lines
    executed = run / "notebooks" / "02_align.ipynb"
    # the error is the first line the CLI prints; a kernel shutting down may print a line of its own
    # (libzmq's "Assertion failed: pfd.revents & POLLIN" was seen once under load), which the bound allows
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert errors and lines[errors[0]].startswith(
        f"error: 02_align failed: ValueError: run: {run} has no seed with both"), lines
    assert f"full traceback: {executed}" in res.stderr and executed.is_file()
    assert "Traceback" not in res.stderr and "Executing" not in res.stderr and "IPKernelApp" not in res.stderr


def test_bad_parameter_exits_2_before_any_notebook(tmp_path: Path) -> None:
    res = subprocess.run(_cli("--run-dir", str(tmp_path / "r"), "--set", "lr=-1"), capture_output=True,
                         text=True, env=_env(), timeout=300)
    assert res.returncode == 2 and res.stderr.startswith("error: lr: "), res.stderr
    assert not (tmp_path / "r").exists()


def _wait_for(cond: object, proc: subprocess.Popen, what: str, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while not cond():  # type: ignore[operator]
        if proc.poll() is not None:
            raise AssertionError(f"the study ended before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"no {what} after {limit} s"
        time.sleep(0.1)


def test_a_stop_keeps_the_kernels_shutdown_out_of_the_log_until_the_study_ends(caplog: pytest.LogCaptureFixture) -> None:
    """Between the signal and the stop line the notebook client may log the kernel's end ("Kernel died while waiting
    for execute reply."): on a busy machine that came before the one line. Logging is off until the block ends."""
    import logging

    from tiebias.__main__ import _stoppable

    log = logging.getLogger("traitlets")
    with pytest.raises(study.Stopped), _stoppable():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        finally:
            log.error("Kernel died while waiting for execute reply.")  # what the client logs while it shuts down
    assert not caplog.records
    log.error("after the study")
    assert [r.getMessage() for r in caplog.records] == ["after the study"]


def test_sigint_stops_with_one_line(tmp_path: Path) -> None:
    run = tmp_path / "empty"
    proc = subprocess.Popen(_cli("--run-dir", str(run), "--only", "02_align"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    _wait_for(lambda: (run / "notebooks" / "02_align.ipynb").exists(), proc, "the notebook started")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert _lines(out, err) == ["stopped by SIGINT during 02_align: every finished model is kept; run the same "
                                "command again to resume"]


@pytest.mark.slow
def test_sigterm_during_training_stops_and_a_rerun_resumes(prepared_run: Run, tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    shutil.copytree(prepared_run.path, run.path, ignore=shutil.ignore_patterns("models", "metrics"))
    cmd = _cli("--run-dir", str(run.path), "--only", "01_train", "--set", "vocab_size=512", "--set", "seeds=0",
               "--set", "variants=tied", "--set", "steps=200")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    ckpts = run.checkpoints_dir("tied", 0)
    _wait_for(lambda: any((step_of(p) or 0) > 0 for p in ckpts.glob("step-*")), proc, "a checkpoint past step 0")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert _lines(out, err) == ["stopped by SIGTERM during 01_train: every finished model is kept; run the same "
                                "command again to resume"]
    assert not run.is_complete("tied", 0)
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    assert res.returncode == 0, res.stderr  # the stopped kernel is gone: its lock does not block the rerun
    assert run.is_complete("tied", 0)
    assert re.search(r"tied-s0: .*resuming at step [1-9]", (run.notebooks_dir / "01_train.ipynb").read_text())


def _fake_notebook(folder: Path, body: str) -> None:
    """A stand-in 01_train: a parameters cell, then ``body``."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'smoke'\nrun_dir = None")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "01_train.ipynb")


@pytest.mark.parametrize(("body", "line"), [
    ("raise ValueError('lr: -1 is not allowed')", "ValueError: lr: -1 is not allowed"),
    ("import os\nos._exit(3)", "DeadKernelError: Kernel died"),
], ids=["error", "kernel died"])
def test_notebook_failure_is_short_and_names_the_executed_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   body: str, line: str) -> None:
    _fake_notebook(tmp_path / "nb", body)
    monkeypatch.setattr(study, "notebooks_dir", lambda: tmp_path / "nb")
    with pytest.raises(study.NotebookFailed) as e:
        study.run_study("smoke", tmp_path / "run", only=["01_train"], progress=False)
    executed = tmp_path / "run" / "notebooks" / "01_train.ipynb"
    assert isinstance(e.value, pm.PapermillExecutionError)  # callers catching papermill's error still do
    assert e.value.notebook == "01_train" and e.value.executed == executed and executed.is_file()
    assert e.value.line.startswith(line)
    text = str(e.value)
    assert text.startswith(f"01_train failed: {line}") and f"full traceback: {executed}" in text
    assert len(text.splitlines()) == 2


@pytest.mark.parametrize("args", [["--help"], ["profiles"], ["profiles", "smoke"]])
def test_help_and_profiles_load_no_torch(args: list[str]) -> None:
    """Listing the vocabulary or the commands reads only the config layer: no torch (seconds to import) is loaded."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "tiebias", *args], capture_output=True, text=True,
                         env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "tiebias.config.profiles" in loaded  # the import log is read: the command did import the vocabulary
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("torch", "transformers", "datasets", "papermill"))
    assert not heavy, f"python -m tiebias {' '.join(args)} imported {heavy[:5]}"


# -- a non-ASCII run folder under an ASCII locale (LC_ALL=C, no UTF-8 mode) -------------------------------------
def _ascii_env() -> dict[str, str]:
    env = {k: v for k, v in _env().items() if not k.startswith(("LC_", "LANG", "PYTHONIOENCODING", "PYTHONUTF8"))}
    return {**env, "LC_ALL": "C", "PYTHONUTF8": "0"}


ASCII_STUDY = """
import json, sys
from pathlib import Path
import nbformat
from tiebias import study
assert sys.getfilesystemencoding() == "ascii", sys.getfilesystemencoding()
run_dir, src = sys.argv[1], Path(sys.argv[2])  # run_dir is held as surrogate escapes here
nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}, "language_info": {"name": "python"}})
params = nbformat.v4.new_code_cell("run_dir = None")
params.metadata["tags"] = ["parameters"]
nb.cells = [params, nbformat.v4.new_code_cell(
    "import sys, tokenizers\\nfrom pathlib import Path\\n"
    "Path(run_dir, 'made').mkdir(parents=True)\\n"
    "tokenizers.Tokenizer(tokenizers.models.BPE()).save(str(Path(run_dir, 'made', 'tokenizer.json')))  # Rust\\n"
    "print(sys.getfilesystemencoding(), run_dir)")]
nbformat.write(nb, src)
out = Path(run_dir, "notebooks", "tiny.ipynb")
out.parent.mkdir(parents=True)
study._execute("tiny", src, out, study.notebook_values({"run_dir": run_dir}), False)
done = json.loads(out.read_text(encoding="utf-8"))
print(json.dumps([done["metadata"]["papermill"]["output_path"], done["cells"][-1]["outputs"][0]["text"]]))
"""


def test_non_ascii_run_folder_under_an_ascii_locale(tmp_path: Path) -> None:
    """The notebook holds the folder's name as text, its kernel runs in UTF-8 mode; before, exit 2 after writing."""
    run = tmp_path / "étude"
    res = subprocess.run([sys.executable, "-c", ASCII_STUDY, str(run), str(tmp_path / "tiny.ipynb")],
                         capture_output=True, text=True, env=_ascii_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    recorded, printed = json.loads(res.stdout.splitlines()[-1])
    assert recorded == str(run / "notebooks" / "tiny.ipynb") and "".join(printed) == f"utf-8 {run}\n"
    assert (run / "made" / "tokenizer.json").is_file()


def test_a_name_a_notebook_cannot_hold_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    from tiebias.__main__ import main

    bad = tmp_path / os.fsdecode(b"caf\xe9")  # Latin-1 bytes: no UTF-8 text names them
    assert main(["study", "--profile", "smoke", "--run-dir", str(bad)]) == 2
    assert "run_dir: " in capsys.readouterr().err and not os.path.lexists(bad)
    # a kernel under an ASCII locale refuses a non-ASCII name given as text, naming the parameter and the way out
    code = "from tiebias.config import profiles; profiles.resolve('smoke', '/tmp/never/\\u00e9tude')"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_ascii_env(), timeout=120)
    assert res.returncode == 1 and "ValueError: run_dir: '/tmp/never/\\xe9tude' cannot be a file name in this process, " \
        "whose file names are ascii" in res.stderr and "PYTHONUTF8=1" in res.stderr, res.stderr
