"""Where the kit's own files are: the checkout root, the shipped profiles and the study notebooks."""

from __future__ import annotations

from pathlib import Path

PROFILE_DIR = Path(__file__).with_name("profiles")
NOTEBOOKS = ("01_train", "02_align", "03_lens", "04_ablate")


def repo_root() -> Path:
    """The checkout root when installed in editable mode, else the current directory."""
    here = Path(__file__).resolve().parents[3]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def notebooks_dir() -> Path:
    """The folder holding the study notebooks (in the checkout)."""
    return repo_root() / "notebooks"
