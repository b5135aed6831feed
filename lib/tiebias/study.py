"""Run the notebooks in order with papermill on one run folder and one profile."""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import nbformat
import papermill as pm
from jupyter_core.utils import run_sync
from nbclient.exceptions import DeadKernelError
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines

from tiebias.config import environment, profiles
from tiebias.config.params import NOTEBOOKS, PARAMS, PATH_PARAMETERS, coerce
from tiebias.config.paths import notebooks_dir, path_text
from tiebias.run import inventory
from tiebias.run.folder import Run
from tiebias.run.guard import Kind, check_folder, mark
from tiebias.run.history import record_command, restore_commands
from tiebias.system.atomic import atomic_path

_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)
Source = Path | nbformat.NotebookNode  # a notebook file, or the notebook as committed


class NotebookFailed(pm.PapermillExecutionError):
    """A notebook stopped on an error: the notebook, the error's one line and where the executed notebook is."""

    def __init__(self, notebook: str, executed: Path, ename: str, evalue: str, traceback: list[str] | None = None,
                 cell_index: int | None = None, exec_count: int | None = None, source: str | None = None) -> None:
        super().__init__(cell_index, exec_count, source, ename, evalue, traceback or [])
        self.notebook, self.executed, self.line = notebook, Path(executed), f"{ename}: {evalue}"

    def __str__(self) -> str:
        cell = f", cell In [{self.exec_count}]" if self.exec_count is not None else ""
        return f"{self.notebook} failed: {self.line}\nfull traceback: {path_text(self.executed, 'replace')}{cell}"


class FolderUnwritable(RuntimeError):
    """The run folder could not be written (read-only, immutable, disk full): names the folder and what to do."""

    def __init__(self, folder: Path, err: OSError, what: str) -> None:
        where = f" ({err.filename})" if err.filename else ""
        super().__init__(f"{what}: the run folder {path_text(folder, 'replace')} cannot be written{where}: "
                         f"{err.strerror}. Make it writable again (chmod -R u+w, or chattr -R -i for an immutable "
                         "folder; free space if the disk is full) and run the same command again: every finished "
                         "model is kept.")


class Stopped(KeyboardInterrupt):
    """The study was stopped by SIGINT or SIGTERM; ``notebook`` is the one that was running, if any."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum, self.notebook = signum, None


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """Turn ``["steps=100", "seeds=0,1"]`` into typed parameters, checked against the vocabulary."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set: {item!r} is not NAME=VALUE (e.g. steps=100)")
        k, v = item.split("=", 1)
        k = k.strip().lower()
        out[k] = coerce(k, v)  # profile and run_dir are refused by check_study
    for k in PATH_PARAMETERS:  # notebooks run in notebooks/: a path relative to here must not change meaning
        if isinstance(out.get(k), str) and Path(out[k]).expanduser().exists():
            out[k] = str(Path(out[k]).expanduser().resolve())
    return out


def committed_sources(names: list[str]) -> tuple[dict[str, Source], str]:
    """The notebooks as git HEAD holds them (an exercise runs these, so a half-written edit cannot break it), and a
    line saying so; outside git, the files on disk."""
    folder = notebooks_dir()

    def git(*args: str) -> subprocess.CompletedProcess | None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, timeout=60)
        return None

    head = git("rev-parse", "--short", "HEAD")
    if head is None or head.returncode != 0:
        return {}, "not a git checkout: the exercise runs the notebooks in notebooks/ as they are, edits included"
    sources: dict[str, Source] = {}
    for n in names:
        shown = git("show", f"HEAD:./{n}.ipynb")
        if shown is None or shown.returncode != 0:  # the kit unpacked inside another repository
            return {}, (f"notebooks/{n}.ipynb is not in the git checkout's last commit: the exercise runs the "
                        "notebooks in notebooks/ as they are, edits included")
        sources[n] = nbformat.reads(shown.stdout.decode("utf-8"), as_version=4)
    return sources, (f"runs the notebooks as committed (git HEAD {head.stdout.decode().strip()}), not the files in "
                     "notebooks/: edits there do not change it (python -m tiebias study runs them)")


def check_study(profile: str | Path | None = None, run_dir: str | Path | None = None,
                overrides: dict[str, Any] | None = None, only: list[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Check everything a study would run with, writing nothing: every override a parameter of a notebook that runs,
    the run folder (:mod:`tiebias.run.guard`); returns the resolved parameters and the notebooks."""
    if environment.in_study():  # it would run the notebooks again, level after level
        raise ValueError(f"study: refused inside a notebook that a study runs ({environment.STUDY_ENV}=1): it would "
                         "run the notebooks again, level after level; start studies and exercises in a terminal")
    overrides = dict(overrides or {})
    for k in ("profile", "run_dir"):
        if k in overrides:
            raise ValueError(f"{k}: give it with --{k.replace('_', '-')} (the {k} argument), not --set or as an "
                             "override")
    names = list(only) if only else list(NOTEBOOKS)
    for name in names:
        if name not in NOTEBOOKS or not (notebooks_dir() / f"{name}.ipynb").exists():
            raise ValueError(f"notebook: {name!r} not found; available: {', '.join(NOTEBOOKS)}")
    params = profiles.resolve(profile, run_dir, notebooks=names, **overrides)
    for k in overrides:
        profiles.check_used(k, names)
    check_folder(params["run_dir"], folder_kind_of(params, names),
                 corpus=params["corpus"] if set(names) & set(PARAMS["corpus"].notebooks) else None)
    if {"01_train", "04_ablate"} & set(names):  # their Run.prepare would refuse another corpus or vocab_size
        Run(params["run_dir"]).check_data(params["corpus"], params["vocab_size"])
    elif folder_kind_of(params, names) == "run":  # 02 or 03 alone: refused with another profile than the run's
        inventory.check_profile(Run(params["run_dir"]), params["profile"], names[0])
    notebook_values(params)
    return params, names


def notebook_values(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as a notebook holds them: file names as UTF-8 text (the kernel runs in UTF-8 mode); a name whose
    bytes are not UTF-8 is refused, naming the parameter."""
    out = dict(params)
    for k in ("profile", "run_dir", *PATH_PARAMETERS):
        if isinstance(out.get(k), str):
            try:
                out[k] = path_text(out[k])
            except UnicodeDecodeError:
                raise ValueError(f"{k}: {out[k]!r} is a file name whose bytes are not UTF-8, which a notebook cannot "
                                 "hold; rename it in UTF-8 (or ASCII), or choose another") from None
    return out


def folder_kind_of(params: dict[str, Any], names: list[str]) -> Kind:
    """``"pair"`` when only 02 / 03 run, on an external pair (their folder is the pair's), else ``"run"``."""
    external = any(params.get(k) is not None for k in ("tied_source", "untied_source"))
    return "pair" if external and set(names) <= {"02_align", "03_lens"} else "run"


@contextlib.contextmanager
def _writable(out: Path) -> Iterator[Path]:
    """Where papermill may write ``out``: ``out``, or for a name held as surrogate escapes (a notebook cannot store
    them) a temporary file moved there at the end, its recorded path rewritten as text."""
    if out.is_symlink():
        out.unlink()  # papermill writes the file by name: a link there is removed, never written through
    if path_text(out, "surrogateescape") == str(out):
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="tiebias-notebook-") as tmp:
        work = Path(tmp) / "executed.ipynb"
        try:
            yield work
        finally:
            if work.exists():
                nb = nbformat.read(work, as_version=4)
                nb.metadata.setdefault("papermill", {})["output_path"] = path_text(out, "replace")
                with atomic_path(out) as dest, dest.open("w", encoding="utf-8") as f:
                    nbformat.write(nb, f)


class KernelLostRequest(DeadKernelError):
    """The kernel is running but a request of ours got lost: it finished the request (its IOPub said idle) and the
    reply never came, or it never started it (no message about it at all)."""


class _WatchedClient(PapermillNotebookClient):
    """papermill's notebook client, except that a lost request ends the notebook (:class:`KernelLostRequest`) after
    :attr:`lost_after_s` instead of being waited for forever. A cell that runs, however long, is never cut: the kernel
    has said it started the cell and has not said it is idle."""

    lost_after_s = 300.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sent_at: float | None = None  # when the current cell's request went out
        self._heard_at: float | None = None  # the kernel's first message about it (busy, its input, an output)
        self._idle_at: float | None = None  # its idle status after the request: the reply is due now
        self._lost: str | None = None
        self.on_cell_execute = self._request_sent

    def _request_sent(self, **_: Any) -> None:
        self._sent_at, self._heard_at, self._idle_at = time.monotonic(), None, None

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        now = time.monotonic()  # only messages about the current request get here
        self._heard_at = self._heard_at or now
        if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
            self._idle_at = now
        return super().process_message(msg, cell, cell_index)

    async def _async_check_alive(self) -> None:
        """nbclient's check, run every second while a cell runs and every few seconds while papermill waits for the
        kernel's last reply (the kernel_info after the cells: the last cell's idle status is then the time)."""
        await super()._async_check_alive()
        now, after = time.monotonic(), self.lost_after_s
        if self._idle_at is not None and now - self._idle_at > after:
            self._lost = f"the kernel finished a request but its reply did not come in {after:.0f} s"
        elif self._heard_at is None and self._sent_at is not None and now - self._sent_at > after:
            self._lost = f"the kernel did not start a request in {after:.0f} s"
        if self._lost:
            raise KernelLostRequest(self._lost)

    async def async_execute_cell(self, cell: Any, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True) -> Any:
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except DeadKernelError:  # also nbclient's own "Kernel died", when the check above stopped its wait
            if self._lost:
                raise KernelLostRequest(self._lost) from None
            raise

    execute_cell = run_sync(async_execute_cell)


class _WatchedEngine(NBClientEngine):
    """papermill's nbclient engine (``execute_managed_notebook`` as papermill 2.7 has it) with :class:`_WatchedClient`."""

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                 stdout_file: Any = None, stderr_file: Any = None, start_timeout: int = 60,
                                 execution_timeout: int | None = None, **kwargs: Any) -> Any:
        from papermill.engines import logger

        kwargs = {k: v for k, v in kwargs.items() if k not in ("input_path", "timeout", "startup_timeout")}
        return _WatchedClient(nb_man, timeout=execution_timeout, startup_timeout=start_timeout,
                              kernel_name=kernel_name, log=logger, log_output=log_output, stdout_file=stdout_file,
                              stderr_file=stderr_file, **kwargs).execute()


papermill_engines.register("tiebias", _WatchedEngine)


def _execute(name: str, src: Source, out: Path, parameters: dict[str, Any], progress: bool) -> None:
    """Execute one notebook into ``out``; an error becomes :class:`NotebookFailed`, a stop names the notebook. The
    kernel is told $TIEBIAS_STUDY, the profile, and UTF-8 mode where this process's file names are not UTF-8; a cell
    runs at most $TIEBIAS_CELL_TIMEOUT seconds where that is set, and a request the kernel lost ends it."""
    from nbclient.exceptions import CellTimeoutError

    env = {environment.STUDY_ENV: "1"}
    if parameters.get("profile") is not None:
        env[profiles.PROFILE_ENV] = str(parameters["profile"])
    if codecs.lookup(sys.getfilesystemencoding()).name != "utf-8":
        env["PYTHONUTF8"] = "1"
    timeout = environment.cell_timeout()
    try:
        with _writable(out) as target, mock.patch.dict(os.environ, env):
            pm.execute_notebook(str(src) if isinstance(src, Path) else src, str(target), parameters=parameters,
                                cwd=str(src.parent if isinstance(src, Path) else notebooks_dir()),
                                progress_bar=progress, kernel_name="python3", execution_timeout=timeout,
                                engine_name="tiebias",
                                extra_arguments=["--IPKernelApp.log_level=CRITICAL"])  # the kernel's own log: noise
    except pm.PapermillExecutionError as e:
        raise NotebookFailed(name, out, e.ename, e.evalue, e.traceback, e.cell_index, e.exec_count,
                             e.source) from None
    except CellTimeoutError as e:  # a cell, or the kernel's answer to it, took longer than the limit
        raise NotebookFailed(name, out, type(e).__name__, f"{str(e).splitlines()[0]} ({environment.CELL_TIMEOUT_ENV}"
                             f"={timeout}: a cell still running, or a kernel that never answered)") from None
    except KernelLostRequest as e:  # the kernel runs, but a message between it and papermill got lost
        raise NotebookFailed(name, out, type(e).__name__, f"{e} (a message between papermill and the kernel got lost; "
                             "run the same command again: finished work is kept)") from None
    except DeadKernelError as e:  # killed from outside (out of memory?): no traceback in the notebook
        raise NotebookFailed(name, out, type(e).__name__, f"{e} (the kernel process ended: out of memory, or "
                             "killed?)") from None
    except Stopped as e:
        e.notebook = name
        raise
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        raise FolderUnwritable(out.parent.parent, e, f"{name} stopped") from None


def run_study(profile: str | Path | None = None, run_dir: str | Path | None = None,
              overrides: dict[str, Any] | None = None, only: list[str] | None = None,
              progress: bool = True, committed: bool = False) -> dict[str, float]:
    """Execute the notebooks in order into ``<run>/notebooks/``, then write summary.json, the reproduction report and
    report.html; everything is checked first. ``committed`` (an exercise) runs the notebooks as committed."""
    overrides = dict(overrides or {})
    params, names = check_study(profile, run_dir, overrides, only)
    sources: dict[str, Source] = {}
    if committed:
        sources, line = committed_sources(names)
        print(line, flush=True)
    out_dir = Run(params["run_dir"]).notebooks_dir
    try:
        mark(params["run_dir"], folder_kind_of(params, names))  # checked above: the folder is the kit's from now on
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        raise FolderUnwritable(Path(params["run_dir"]), e, "the study cannot start") from None
    before = record_command(params["run_dir"], params["profile"], overrides, only)
    times: dict[str, float] = {}
    memory: dict[str, float] = {}
    for name in names:
        src = sources.get(name, notebooks_dir() / f"{name}.ipynb")
        p = notebook_values({"profile": params["profile"], "run_dir": params["run_dir"],
                             **{k: params[k] for k in overrides if name in PARAMS[k].notebooks}})
        t0 = time.perf_counter()
        try:
            _execute(name, src, out_dir / f"{name}.ipynb", p, progress)
        except NotebookFailed:
            if not times:  # refused or failed before any notebook finished: not a command to rerun
                restore_commands(params["run_dir"], before)
            raise
        times[name] = time.perf_counter() - t0
        import resource

        kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest kernel so far; bytes on macOS
        memory[name] = kib / (1024 * 1024 if sys.platform == "darwin" else 1024)
        print(f"{name}: {times[name]:.0f} s -> {out_dir / (name + '.ipynb')}")
    from tiebias.output.report import write_report, write_summary
    from tiebias.output.reproduction_page import write_reproduction

    run = Run(params["run_dir"])
    if run.config_path.exists():
        print(f"summary: {write_summary(run, times, memory)}")
        print(f"reproduction: {write_reproduction(run)}")
        print(f"report:  {write_report(run)}")
    return times
