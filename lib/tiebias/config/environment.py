"""The kit's environment variables: ``TIEBIAS_THREADS`` / ``TIEBIAS_WORKERS`` (the machine), ``TIEBIAS_STUDY``,
``TIEBIAS_CELL_TIMEOUT`` (how long one notebook cell of a study may run)."""

from __future__ import annotations

import os
import warnings

THREADS_ENV = "TIEBIAS_THREADS"
WORKERS_ENV = "TIEBIAS_WORKERS"
STUDY_ENV = "TIEBIAS_STUDY"  # 1 in the kernels of ``python -m tiebias study``, which writes the run's pages itself
CELL_TIMEOUT_ENV = "TIEBIAS_CELL_TIMEOUT"  # seconds one notebook cell of a study may run; unset or "none": no limit


def in_study() -> bool:
    """Whether this process is a notebook kernel the study command started.

    Returns:
        True when ``TIEBIAS_STUDY`` is ``1``.
    """
    return os.environ.get(STUDY_ENV) == "1"


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity masks (macOS, Windows)
        return os.cpu_count() or 1


def env_count(name: str, what: str, unset: str = "auto", example: int = 1, note: str = "") -> int | None:
    """A count set by environment variable ``name``: None for ``unset`` (the word, or no variable), else a whole
    number >= 1; ``note`` follows the word in the error."""
    raw = os.environ.get(name, unset).strip().lower()
    if raw in ("", unset):
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}: {raw!r} is not allowed; use {unset!r}{note} or a whole number of {what} >= 1, e.g. "
                         f"{name}={example}")
    return int(raw)


def fixed_threads() -> int | None:
    """The thread count ``TIEBIAS_THREADS`` fixes (None for ``auto`` or unset), at most the cores there are."""
    return None if (n := env_count(THREADS_ENV, "threads")) is None else min(n, cpu_cores())


def cell_timeout() -> int | None:
    """The seconds ``TIEBIAS_CELL_TIMEOUT`` gives one notebook cell of a study (None: unset or ``none``, no limit).

    A cell that runs longer stops the study with an error naming the variable. The test suite sets it, so that a
    notebook kernel which never answers fails that test instead of holding the run; a study has no limit unless it is
    set (a default study's cells can run for half an hour)."""
    return env_count(CELL_TIMEOUT_ENV, "seconds", "none", 3600, " (no limit)")


def check_environment() -> None:
    """Refuse a bad ``TIEBIAS_THREADS``, ``TIEBIAS_WORKERS`` or ``TIEBIAS_CELL_TIMEOUT``, and say when the thread
    count is capped."""
    asked = env_count(THREADS_ENV, "threads")
    env_count(WORKERS_ENV, "jobs at a time")
    cell_timeout()
    if asked is not None and asked > cpu_cores():
        warnings.warn(f"{THREADS_ENV}={asked} is more than the {cpu_cores()} CPU cores this process may use: "
                      f"using {cpu_cores()} threads", stacklevel=3)

