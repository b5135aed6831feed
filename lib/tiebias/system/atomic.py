"""Writing a file in place without ever writing through a symbolic link: a private temporary folder next to the
target and a rename (the run folder's writers, :mod:`tiebias.run.files`, build on these)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder in ``parent`` only this process made (``mkdtemp``: random name, owner only), removed after."""
    d = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary name to write to, renamed onto ``path`` when the block ends (replacing a link there, never
    writing where it points); if the block raises, ``path`` is left as it was."""
    with private_folder(path.parent, f".{path.name}.") as d:
        tmp = d / path.name
        yield tmp
        os.replace(tmp, path)
