"""How long each notebook ran in a kernel a person started (JupyterLab), recorded in the run folder.

The study command times the notebooks it runs itself; a notebook run with *Run All* in JupyterLab has no such
caller. From its parameter check on, the kernel adds up its cells' run times and, after each cell, writes them to
``<run>/notebook_times.json`` (:attr:`tiebias.run.layout.RunLayout.kernel_times_path`), so ``summary.json``, the
reproduction page and ``report.html`` written from 04's last cell name the notebooks run and their times. Only the
cells' own run times count: the minutes a student spends reading between cells do not.
"""

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


def _peak_mib() -> float:
    """This process's peak resident memory in MiB (KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024 if sys.platform == "darwin" else 1024)


def record_cells(notebook: str, run_dir: str | Path) -> bool:
    """Time this kernel's cells from now on as ``notebook`` on ``run_dir``; True if the kernel will record them.

    Nothing is recorded outside IPython, or in a kernel the study command started (it times its notebooks itself).
    Called again (the setup cell rerun), the count starts again. A write that fails (the folder not made yet, a full
    disk) is skipped: the next cell writes again, and no cell of the notebook ever fails for it.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or in_study() or not hasattr(shell, "events"):
        return False
    for event, callback in _HOOKS.items():
        shell.events.unregister(event, callback)
    _HOOKS.clear()
    layout = RunLayout(run_dir)
    state = {"seconds": 0.0, "cells": 0, "started": time.perf_counter()}

    def pre_run_cell(*_: Any) -> None:
        state["started"] = time.perf_counter()

    def post_run_cell(*_: Any) -> None:
        state["seconds"] += time.perf_counter() - state["started"]
        state["cells"] += 1
        if not layout.config_path.is_file():  # 01 has not made the run folder yet
            return
        try:
            times = recorded(layout)
            times[notebook] = {"seconds": round(state["seconds"], 1), "cells": state["cells"],
                               "peak_memory_mib": round(_peak_mib(), 1),
                               "ended": datetime.now(UTC).isoformat(timespec="seconds")}
            write_json_atomic(layout.kernel_times_path, times)
        except OSError:
            pass

    _HOOKS.update(pre_run_cell=pre_run_cell, post_run_cell=post_run_cell)
    for event, callback in _HOOKS.items():
        shell.events.register(event, callback)
    return True


def recorded(layout: RunLayout) -> dict[str, dict[str, Any]]:
    """The times kernels recorded in the run folder: notebook -> seconds, cells, peak memory (MiB), when it ended.

    A missing file is {}; a damaged one, or an entry that is not a finite time (the folder is untrusted), is left out.
    """
    try:
        data = read_json(layout.kernel_times_path, "")
    except (FileNotFoundError, DamagedFileError):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for name, entry in data.items():
        seconds = entry.get("seconds") if isinstance(entry, dict) else None
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds) \
                and seconds >= 0:
            out[str(name)] = entry
    return out


def timings(layout: RunLayout) -> tuple[dict[str, float], dict[str, float]]:
    """The recorded times as ``summary.json`` holds them: notebook -> seconds, and notebook -> peak memory (MiB)."""
    times, memory = {}, {}
    for name, entry in recorded(layout).items():
        times[name] = float(entry["seconds"])
        mib = entry.get("peak_memory_mib")
        if isinstance(mib, (int, float)) and not isinstance(mib, bool) and math.isfinite(mib) and mib >= 0:
            memory[name] = float(mib)
    return times, memory
