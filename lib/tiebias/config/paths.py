"""Where the kit's own files are (the checkout root, the shipped profiles, the study notebooks), and file names
as text and back."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROFILE_DIR = Path(__file__).with_name("profiles")
NOTEBOOKS = ("01_train", "02_align", "03_lens", "04_ablate")
RUNS = "runs"
"""The folder, in the checkout, that holds the runs (``runs/<profile>/``) and external pairs (``runs/external/``)."""


def repo_root() -> Path:
    """The checkout root when installed in editable mode, else the current directory."""
    here = Path(__file__).resolve().parents[3]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def runs_dir() -> Path:
    """The runs folder of the checkout (:data:`RUNS`)."""
    return repo_root() / RUNS


def notebooks_dir() -> Path:
    """The folder holding the study notebooks (in the checkout)."""
    return repo_root() / "notebooks"


def path_text(path: str | os.PathLike[str], errors: str = "strict") -> str:
    """A file name as Unicode text (a notebook parameter, a page): its bytes read as UTF-8.

    Under an ASCII locale (``LC_ALL=C`` without UTF-8 mode) Python holds a non-ASCII name such as ``runs/étude`` as
    surrogate escapes of its bytes, which no UTF-8 file can hold. Bytes that are not UTF-8 raise
    UnicodeDecodeError, unless ``errors`` says otherwise (``"replace"`` for a name only shown).
    """
    return os.fsencode(path).decode("utf-8", errors)


def check_encodable(name: str, path: str | os.PathLike[str]) -> None:
    """Refuse a file name this process cannot pass to the system, naming the parameter and what to do.

    Under an ASCII locale (``LC_ALL=C`` without UTF-8 mode) a name given as text with non-ASCII letters, such as
    ``runs/étude`` in a notebook, has no bytes; the study command runs its notebooks in UTF-8 mode for that.
    """
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise ValueError(
            f"{name}: {os.fspath(path)!r} cannot be a file name in this process, whose file names are "
            f"{sys.getfilesystemencoding()} (a locale such as LC_ALL=C without UTF-8 mode); start Python with "
            "PYTHONUTF8=1 (or a UTF-8 locale, e.g. LC_ALL=C.UTF-8), or give an ASCII name") from None
