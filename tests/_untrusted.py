"""Hostile files for the tests: a torch file whose unpickling, done without ``weights_only``, creates a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


class CreatesFile:
    """Pickled, it asks the unpickler to call ``open(marker, "w")``: what any code in a shared file could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (self.marker, "w")


def save_hostile(path: Path, marker: Path, **plain: Any) -> None:
    """A torch file at ``path`` holding ``plain`` values and, under ``payload``, a :class:`CreatesFile`."""
    torch.save({**plain, "payload": CreatesFile(marker)}, path)


def zero_fill(path: Path) -> None:
    """Overwrite a file with as many zero bytes (a disk error or an interrupted copy)."""
    path.write_bytes(b"\0" * max(path.stat().st_size, 64))
