"""Where the kit's own files are (the checkout root, the shipped profiles, the study notebooks), and file names
as text and back."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROFILE_DIR = Path(__file__).with_name("profiles")
NOTEBOOKS = ("01_train", "02_align", "03_lens", "04_ablate")
RUNS = "runs"  # the checkout's folder of runs (runs/<profile>/) and external pairs (runs/external/)


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
    """A file name as Unicode text (a notebook parameter, a page): its bytes read as UTF-8, so a name an ASCII locale
    holds as surrogate escapes can be written to a file; ``errors="replace"`` for a name only shown."""
    return os.fsencode(path).decode("utf-8", errors)


def check_encodable(name: str, path: str | os.PathLike[str]) -> None:
    """Refuse a file name this process cannot pass to the system (non-ASCII text under an ASCII locale), naming the
    parameter and what to do."""
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise ValueError(
            f"{name}: {os.fspath(path)!r} cannot be a file name in this process, whose file names are "
            f"{sys.getfilesystemencoding()} (a locale such as LC_ALL=C without UTF-8 mode); start Python with "
            "PYTHONUTF8=1 (or a UTF-8 locale, e.g. LC_ALL=C.UTF-8), or give an ASCII name") from None
