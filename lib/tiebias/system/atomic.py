"""Writing a file in place without ever writing through a symbolic link: a private temporary folder next to the
target and a rename. The run folder's writers (:mod:`tiebias.run.files`) and the token files build on these two."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder in ``parent`` that only this process made (``mkdtemp``: random name, owner only), removed when
    the block ends: nothing planted in ``parent`` (a link under a temporary name) can be written through."""
    d = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary file name to write to, renamed onto ``path`` when the block ends (replacing a link there, never
    writing where it points); readers see the old file or the whole new one. If the block raises, ``path`` is left
    as it was. The folder must exist."""
    with private_folder(path.parent, f".{path.name}.") as d:
        tmp = d / path.name
        yield tmp
        os.replace(tmp, path)
