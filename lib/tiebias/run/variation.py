"""A variation (another preset, corpus, lr, ...) on a run folder made with other values: one short error naming
each change, a fresh run folder to use instead and how to pass it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


class ParameterChangedError(ValueError):
    """Asked values differ from those a run folder's models or data were made with; says how to try them apart."""

    def __init__(self, folder: str | Path, diff: dict[str, tuple[Any, Any]], what: str, instead: str) -> None:
        name, (_, new) = next(iter(diff.items()))
        tag = re.sub(r"[^A-Za-z0-9._-]+", "_", str(new)).strip("_") or "new"
        fresh = str(Path(folder).with_name(f"{Path(folder).name}-{name}-{tag}"))
        changed = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
        super().__init__(
            f"{changed} ({folder}: {what}). Try a variation in a fresh run folder: run_dir = \"{fresh}\" in the "
            f"parameters cell, --run-dir {fresh} on the command line (make study RUN={fresh}), -p run_dir {fresh} "
            f"with papermill; or {instead}")
        self.diff, self.fresh = diff, fresh

    def _render_traceback_(self) -> list[str]:
        """IPython shows the message alone instead of a traceback (``%tb`` still shows it)."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]
