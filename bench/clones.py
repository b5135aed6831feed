"""A fresh clone of one commit of this repository, set up with ``make setup``: the starting point of a side-by-side
measurement (``bench/suite_side_by_side.py``, ``bench/study_side_by_side.py``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def short(commit: str) -> str:
    """The short hash of ``commit`` (e.g. HEAD) in this repository."""
    return subprocess.run(["git", "rev-parse", "--short", commit], cwd=REPO, check=True, text=True,
                          capture_output=True).stdout.strip()


def fresh_clone(commit: str, root: Path) -> Path:
    """Clone this repository into ``root/<commit>``, check ``commit`` out and run ``make setup`` (not timed)."""
    clone = root / commit.replace("/", "_")
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
    subprocess.run(["make", "setup"], cwd=clone, check=True, stdout=subprocess.DEVNULL)
    return clone
