"""Checks of single values shared by every layer: whole numbers (never a bool) and run-folder names."""

from __future__ import annotations

import numbers
from typing import Any

HOW_TO_PASS = "--run-dir PATH, -p run_dir PATH with papermill or run_dir = '...' in a notebook, make study RUN=PATH"


def check_run_dir_text(run_dir: Any, param: str = "run_dir", error: type[ValueError] = ValueError) -> None:
    """Refuse an empty or whitespace-only folder name (only ``None`` means "not given"), raising ``error``."""
    if isinstance(run_dir, str) and not run_dir.strip():
        raise error(f"{param}: {run_dir!r} is empty; give a folder ({HOW_TO_PASS}), or leave {param} out (None) for "
                    "$TIEBIAS_RUN_DIR, else runs/<profile>")


def is_int(value: Any, *, numpy_ok: bool = False) -> bool:
    """True for an int (numpy integers too when ``numpy_ok``), never for True / False (a flag is not a count)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral if numpy_ok else int)


def check_int(name: str, value: Any, need: str, minimum: int = 0, maximum: float = float("inf")) -> int:
    """``value`` when it is an int within [minimum, maximum]; else ``name: value is not allowed; need <need>``."""
    if is_int(value) and minimum <= value <= maximum:
        return value
    raise ValueError(f"{name}: {value!r} is not allowed; need {need}")
