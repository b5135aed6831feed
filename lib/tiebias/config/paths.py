"""Where the kit's own files are (checkout, profiles, notebooks), and file names as text."""

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
    return repo_root() / RUNS


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def path_text(path: str | os.PathLike[str], errors: str = "strict") -> str:
    """A file name as Unicode text, its bytes read as UTF-8 (an ASCII locale holds surrogate escapes);
    ``errors="replace"`` for a name only shown."""
    return os.fsencode(path).decode("utf-8", errors)


def check_encodable(name: str, path: str | os.PathLike[str]) -> None:
    """Refuse a file name this process cannot pass to the system (non-ASCII text under an ASCII locale)."""
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise ValueError(
            f"{name}: {os.fspath(path)!r} cannot be a file name in this process, whose file names are "
            f"{sys.getfilesystemencoding()} (a locale such as LC_ALL=C without UTF-8 mode); start Python with "
            "PYTHONUTF8=1 (or a UTF-8 locale, e.g. LC_ALL=C.UTF-8), or give an ASCII name") from None
