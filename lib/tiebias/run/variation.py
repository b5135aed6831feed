"""A variation (another preset, corpus, lr, ...) on a run folder made with other values: one short error.

One run folder holds one study. Changing a parameter that shapes its models or data and running again
on the same folder would mix two studies, so it stops: :class:`ParameterChangedError` names each
changed parameter with the folder's and the asked value, a fresh run folder to use instead and how to
pass it, and prints in a notebook as that one message rather than a traceback through the library.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def fresh_run_dir(path: str | Path, name: str, value: Any) -> str:
    """A fresh run folder beside ``path`` named after the variation, e.g. ``runs/class-preset-mini``."""
    path = Path(path)
    tag = re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("_") or "new"
    return str(path.with_name(f"{path.name}-{name}-{tag}"))


class ParameterChangedError(ValueError):
    """Asked values differ from those a run folder's models or data were made with; says how to try them apart."""

    def __init__(self, folder: str | Path, diff: dict[str, tuple[Any, Any]], what: str, instead: str) -> None:
        """``diff``: name -> (folder's value, asked value); ``what``: what was made with them; ``instead``: the other way."""
        name, (_, new) = next(iter(diff.items()))
        fresh = fresh_run_dir(folder, name, new)
        changed = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
        super().__init__(
            f"{changed} ({folder}: {what}). Try a variation in a fresh run folder: run_dir = \"{fresh}\" in the "
            f"parameters cell, --run-dir {fresh} on the command line (make study RUN={fresh}), -p run_dir {fresh} "
            f"with papermill; or {instead}")
        self.diff, self.fresh = diff, fresh

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback: the message alone (``%tb`` still shows the traceback)."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]
