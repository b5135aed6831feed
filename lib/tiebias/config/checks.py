"""Checks of single values shared by every layer: whole numbers (never a bool) and run-folder names.

Errors name the parameter, the bad value and what is allowed, in one style: ``name: value is not allowed;
need ...``.
"""

from __future__ import annotations

from typing import Any

HOW_TO_PASS = "--run-dir PATH, -p run_dir PATH with papermill or run_dir = '...' in a notebook, make study RUN=PATH"
"""The ways to give a run folder, quoted by every error about one."""


def check_run_dir_text(run_dir: Any, param: str = "run_dir", error: type[ValueError] = ValueError) -> None:
    """Refuse an empty or whitespace-only folder name (only ``None`` means "not given"), raising ``error``."""
    if isinstance(run_dir, str) and not run_dir.strip():
        raise error(
            f"{param}: {run_dir!r} is empty; give a folder ({HOW_TO_PASS}), or leave {param} out (None) for "
            "$TIEBIAS_RUN_DIR, else runs/<profile>")
