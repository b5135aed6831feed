"""Shared fixtures: a small run folder prepared once per test session (embedded corpus, 512 tokens), and the
smoke study run once per test run, shared by the tests that need a whole study."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tiebias.config.environment import CELL_TIMEOUT_ENV
from tiebias.config.paths import NOTEBOOKS
from tiebias.run.folder import Run
from tiebias.train.trainer import TrainConfig, train

TEST_CELL_TIMEOUT_S = 1200
"""How long one notebook cell may run in the tests (TIEBIAS_CELL_TIMEOUT, unless already set): the tests' longest cells
take a few minutes on a busy 2-core machine. A kernel that never answers a request then fails the test that started
it, with papermill's CellTimeoutError, instead of holding the whole test run: the tests' own papermill calls pass it as
``execution_timeout``, and ``python -m tiebias study`` (in this process or the smoke study's) reads the variable."""
os.environ.setdefault(CELL_TIMEOUT_ENV, str(TEST_CELL_TIMEOUT_S))

TINY = dict(preset="tiny", steps=12, batch_size=4, seq_len=32, lr=3e-3, warmup_steps=2, eval_every=4,
            eval_tokens=512, checkpoint_every=4)


@pytest.fixture(scope="session")
def prepared_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Corpus split, tokenizer and token streams, shared read-only by the tests that copy it."""
    return Run.prepare(tmp_path_factory.mktemp("runs") / "base", vocab_size=512)


@pytest.fixture
def fresh_run(prepared_run: Run, tmp_path: Path) -> Run:
    """A private copy of the prepared run folder without any trained model."""
    dst = tmp_path / "run"
    shutil.copytree(prepared_run.path, dst, ignore=shutil.ignore_patterns("models", "metrics"))
    return Run(dst)


@pytest.fixture
def tiny_config() -> TrainConfig:
    return TrainConfig(**TINY)


@pytest.fixture(scope="session")
def two_seed_run(prepared_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Tied and untied tiny models for seeds 0 and 1 (8 steps), shared read-only by analysis tests."""
    dst = tmp_path_factory.mktemp("runs") / "two_seed"
    shutil.copytree(prepared_run.path, dst, ignore=shutil.ignore_patterns("models", "metrics"))
    run = Run(dst)
    cfg = replace(TrainConfig(**TINY), steps=8)
    for seed in (0, 1):
        for v in ("tied", "untied"):
            train(run, v, seed, cfg, progress=False)
    return run


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster, and far faster on a busy 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SMOKE_STUDY_ENV = "TIEBIAS_SMOKE_STUDY"
"""Names the folder of the shared smoke study (``make test`` sets it, then runs nbval on that folder); a finished
study there (:func:`finished_smoke_study`) is reused, anything else is (re)run."""


@dataclass(frozen=True)
class SmokeStudy:
    """The shared smoke study: its run folder (read only: copy it to change anything) and what the command printed."""

    path: Path
    output: str


def _smoke_study_folder(config: pytest.Config) -> Path:
    """$TIEBIAS_SMOKE_STUDY, else ``smoke-study`` in this test run's temporary folder (shared by pytest-xdist's
    workers: their own folders lie in it)."""
    if os.environ.get(SMOKE_STUDY_ENV):
        return Path(os.environ[SMOKE_STUDY_ENV]).resolve()
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "smoke-study"


def finished_smoke_study(folder: Path) -> bool:
    """Whether ``folder`` holds a smoke study that ran to its end with nothing run on it since: its executed notebooks,
    then summary.json (the smoke profile, all four notebooks timed), then report.html, written in that order, and the
    command's output beside it (``<folder>.log``, as the fixture saves it)."""
    notebooks = [folder / "notebooks" / f"{nb}.ipynb" for nb in NOTEBOOKS]
    summary, report = folder / "summary.json", folder / "report.html"
    if not all(p.is_file() for p in (*notebooks, summary, report, folder.with_name(folder.name + ".log"))):
        return False
    try:
        done = json.loads(summary.read_text())
    except (OSError, ValueError):
        return False
    times = done.get("timings_seconds") if isinstance(done, dict) else None
    return (done.get("profile") == "smoke" and isinstance(times, dict) and set(NOTEBOOKS) <= set(times)
            and max(p.stat().st_mtime for p in notebooks) <= summary.stat().st_mtime <= report.stat().st_mtime)


_STARTED: list[subprocess.Popen] = []
"""The smoke study, in the worker that started it."""

_REUSED: list[Path] = []
"""The finished smoke study this test run reads instead of starting one."""

_RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex
"""This test run: pytest-xdist's workers share theirs; without it, one process."""


def _uses_smoke_study(item: pytest.Item) -> bool:
    return "smoke_study" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that read the shared smoke study run last: it trains in the background meanwhile."""
    items.sort(key=_uses_smoke_study)  # stable: same order in every worker


def pytest_collection_finish(session: pytest.Session) -> None:
    """When the selected tests need the smoke study and no finished one is there, start it once for the whole test
    run, in the background: ``python -m tiebias study --profile smoke`` (the first worker to claim it starts it; its
    exit status and output are written beside the folder)."""
    if not any(_uses_smoke_study(item) for item in session.items):
        return
    folder = _smoke_study_folder(session.config)
    if finished_smoke_study(folder):
        _REUSED.append(folder)
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        claim = os.open(folder.with_name(f"{folder.name}.started-{_RUN_ID}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # another worker of this run started it
    os.close(claim)
    shutil.rmtree(folder, ignore_errors=True)
    log, rc = folder.with_name(folder.name + ".log"), folder.with_name(folder.name + ".rc")
    study = shlex.join([sys.executable, "-m", "tiebias", "study", "--profile", "smoke", "--run-dir", str(folder)])
    done = shlex.quote(str(rc))  # "<run id> <exit status>", written whole (rename) when the study ends
    _STARTED.append(subprocess.Popen(["sh", "-c", f"{study} > {shlex.quote(str(log))} 2>&1; echo {_RUN_ID} $? > "
                                      f"{done}.tmp && mv {done}.tmp {done}"], start_new_session=True))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An interrupted test run (Ctrl-C) stops the smoke study it started, which runs in a session of its own."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        for proc in _STARTED:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # the command line stops its notebook and exits


@pytest.fixture(scope="session")
def smoke_study(request: pytest.FixtureRequest) -> SmokeStudy:
    """The smoke study through the command line, all four notebooks, once per test run (started in the background by
    :func:`pytest_collection_finish`; this waits for it), or the finished one $TIEBIAS_SMOKE_STUDY names. The end-to-end test checks it; the browser test and nbval
    start from it instead of training the same models again."""
    folder = _smoke_study_folder(request.config)
    rc, log = folder.with_name(folder.name + ".rc"), folder.with_name(folder.name + ".log")
    if folder in _REUSED:
        return SmokeStudy(folder, log.read_text())
    deadline = time.monotonic() + 1800
    while not (rc.exists() and rc.read_text().split()[0] == _RUN_ID):  # one left by an earlier run is not this one
        if time.monotonic() > deadline:
            pytest.fail(f"the shared smoke study did not finish in 30 minutes; its output: {log}")
        time.sleep(0.5)
    status, output = rc.read_text().split()[1], log.read_text()
    if status != "0":
        pytest.fail(f"the shared smoke study failed (exit {status}):\n{output[-3000:]}")
    return SmokeStudy(folder, output)
