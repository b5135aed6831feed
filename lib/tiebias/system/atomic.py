"""Writing a file in place without ever writing through a symbolic link: a private temporary folder next to the
target (:func:`private_folder`) and a rename (:func:`atomic_path`). The run folder's writers
(:mod:`tiebias.run.files`) and the token files (:mod:`tiebias.data.tokens`) build on these two."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder in ``parent`` that only this process made, removed with what is left in it when the block ends.

    ``tempfile.mkdtemp`` gives it a fresh random name (``<prefix>XXXXXXXX.tmp``), creates it exclusively and
    readable by its owner only, so nothing already in ``parent`` (a symbolic link planted under a temporary name,
    carried by ``cp -r``, tar or git) can be written through: the rule of every file the kit writes.
    """
    d = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary file name to write to, renamed onto ``path`` when the block ends; never written through a link.

    The name lies in a :func:`private_folder` next to ``path``, so a symbolic link planted in the folder is never
    opened, and the rename replaces a link at ``path`` itself instead of writing where it points. Readers see the
    old file or the whole new one, never half of it; if the block raises, the temporary file is removed and
    ``path`` is left as it was. The folder must exist. Any writer works: ``df.to_csv(tmp)``,
    ``torch.save(obj, tmp)``, or ``tmp.open("wb")`` for writers that would change the name (``np.save``).
    """
    with private_folder(path.parent, f".{path.name}.") as d:
        tmp = d / path.name
        yield tmp
        os.replace(tmp, path)
