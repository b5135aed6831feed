"""How long each notebook ran in a kernel a person started (JupyterLab): its cells' run times (not the minutes spent
reading between them), written after each cell to ``notebook_times.json`` for the summary and the report."""

from __future__ import annotations

import math
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tiebias.config.environment import in_study
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic
from tiebias.run.layout import RunLayout

_HOOKS: dict[str, Any] = {}  # this kernel's registered callbacks, so a rerun of the setup cell replaces them


def record_cells(notebook: str, run_dir: str | Path) -> bool:
    """Time this kernel's cells from now on as ``notebook`` on ``run_dir`` (not outside IPython or in a study's
    kernel; a failed write is skipped); True if it will record them."""
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
    """notebook -> its entry; {} for a missing or damaged file, and an entry without a finite time left out."""
    try:
        data = read_json(layout.kernel_times_path, "")
    except (FileNotFoundError, DamagedFileError):
        return {}
    return {str(name): entry for name, entry in (data.items() if isinstance(data, dict) else ())
            if isinstance(entry, dict) and _finite(entry.get("seconds"))}


def timings(layout: RunLayout) -> tuple[dict[str, float], dict[str, float]]:
    """notebook -> seconds, and notebook -> peak memory (MiB), as ``summary.json`` holds them."""
    times = _recorded(layout)
    return ({name: float(e["seconds"]) for name, e in times.items()},
            {name: float(e["peak_memory_mib"]) for name, e in times.items() if _finite(e.get("peak_memory_mib"))})
