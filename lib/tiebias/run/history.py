"""What ran on a run folder: the study commands (``.tiebias-study.json``, the reproduction report's rerun command) and
how long each notebook ran in a kernel a person started (JupyterLab: its cells' run times, not the minutes spent
reading between them, written after each cell to ``notebook_times.json`` for the summary and the report)."""

from __future__ import annotations

import math
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tiebias.config.environment import in_study
from tiebias.config.paths import path_text
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic
from tiebias.run.folder import Run
from tiebias.run.layout import RunLayout
from tiebias.system.atomic import atomic_path

_HOOKS: dict[str, Any] = {}  # this kernel's registered callbacks, so a rerun of the setup cell replaces them


def _record(path: Path) -> dict:
    """One of these records as a JSON object; {} when missing, damaged or not an object (a record, not evidence)."""
    try:
        data = read_json(path, "")
    except (FileNotFoundError, DamagedFileError):
        return {}
    return data if isinstance(data, dict) else {}


def _arg_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(_arg_text(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def record_command(run_dir: str | Path, profile: str, overrides: dict[str, Any], only: list[str] | None) -> bytes | None:
    """Add this study's command to the folder's list before any notebook runs; returns the file's content before."""
    run, path = Run(run_dir), Path(profile)
    entry = {"profile": str(path.resolve()) if path.suffix == ".toml" and path.is_file() else profile,
             "only": list(only or []), "set": [f"{k}={_arg_text(v)}" for k, v in overrides.items()]}
    with run.writing("recording the study command"):
        before = run.study_commands_path.read_bytes() if run.study_commands_path.is_file() else None
        recorded = _record(run.study_commands_path).get("commands", [])
        write_json_atomic(run.study_commands_path, {"commands": [*(c for c in recorded if c != entry), entry]})
    return before


def restore_commands(run_dir: str | Path, before: bytes | None) -> None:
    """Put the list back as :func:`record_command` found it (a study that ran nothing is not repeated)."""
    run = Run(run_dir)
    with run.writing("restoring the study commands"):
        if before is None:
            run.study_commands_path.unlink(missing_ok=True)
        else:
            with atomic_path(run.study_commands_path) as tmp:
                tmp.write_bytes(before)


def study_commands(run: RunLayout) -> list[list[str]]:
    """The arguments after ``python -m tiebias`` of each study command run on ``run``, oldest first."""
    return [["study", "--profile", c["profile"], "--run-dir", path_text(run.path, "replace"),
             *(a for name in c.get("only", []) for a in ("--only", str(name))),
             *(a for item in c.get("set", []) for a in ("--set", str(item)))]
            for c in _record(run.study_commands_path).get("commands", [])
            if isinstance(c, dict) and isinstance(c.get("profile"), str)]


def record_cells(notebook: str, run_dir: str | Path) -> bool:
    """Time this kernel's cells as ``notebook`` on ``run_dir`` (IPython, outside a study); True if it will."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or in_study() or not hasattr(shell, "events"):
        return False
    for event, callback in _HOOKS.items():
        shell.events.unregister(event, callback)
    layout, state = RunLayout(run_dir), {"seconds": 0.0, "cells": 0, "started": time.perf_counter()}

    def post_run_cell(*_: Any) -> None:
        state["seconds"] += time.perf_counter() - state["started"]
        state["cells"] += 1
        if not layout.config_path.is_file():  # 01 has not made the run folder yet
            return
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform == "darwin" else 1)
        try:
            write_json_atomic(layout.kernel_times_path, {**_recorded(layout), notebook: {
                "seconds": round(state["seconds"], 1), "cells": state["cells"], "peak_memory_mib": round(peak_kib / 1024, 1),
                "ended": datetime.now(UTC).isoformat(timespec="seconds")}})
        except OSError:
            pass

    _HOOKS.clear()
    _HOOKS.update(pre_run_cell=lambda *_: state.update(started=time.perf_counter()), post_run_cell=post_run_cell)
    for event, callback in _HOOKS.items():
        shell.events.register(event, callback)
    return True


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _recorded(layout: RunLayout) -> dict[str, dict[str, Any]]:
    """notebook -> its entry; an entry without a finite time left out."""
    return {str(name): entry for name, entry in _record(layout.kernel_times_path).items()
            if isinstance(entry, dict) and _finite(entry.get("seconds"))}


def timings(layout: RunLayout) -> tuple[dict[str, float], dict[str, float]]:
    """notebook -> seconds, and notebook -> peak memory (MiB), as ``summary.json`` holds them."""
    times = _recorded(layout)
    return ({name: float(e["seconds"]) for name, e in times.items()},
            {name: float(e["peak_memory_mib"]) for name, e in times.items() if _finite(e.get("peak_memory_mib"))})
