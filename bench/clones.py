"""A fresh clone of one commit of this repository, set up with ``make setup``: the starting point of a side-by-side
measurement (``bench/suite_side_by_side.py``, ``bench/study_side_by_side.py``)."""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def short(commit: str, name: str = "new") -> str:
    """The short hash of ``commit`` (e.g. HEAD) in this repository; one line naming ``name`` if it is not a commit."""
    res = subprocess.run(["git", "rev-parse", "--short", "--verify", "--quiet", f"{commit}^{{commit}}"], cwd=REPO,
                         text=True, capture_output=True)
    if res.returncode:
        raise SystemExit(f"{name}: {commit!r} is not a commit of this repository (e.g. 5803a75, HEAD)")
    return res.stdout.strip()


def fresh_clone(commit: str, root: Path) -> Path:
    """Clone this repository into ``root/<commit>``, check ``commit`` out and run ``make setup`` (not timed)."""
    clone = root / commit.replace("/", "_")
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
    subprocess.run(["make", "setup"], cwd=clone, check=True, stdout=subprocess.DEVNULL)
    return clone


def commits_parser(description: str) -> argparse.ArgumentParser:
    """The arguments both benches share: the old commit, the new one (default HEAD) and ``--keep DIR``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("old", help="the commit to compare against, e.g. 5803a75")
    ap.add_argument("new", nargs="?", default="HEAD", help="the commit measured (default HEAD)")
    ap.add_argument("--keep", type=Path, help="clone into this folder and keep the clones, runs and logs")
    return ap


@contextmanager
def clones_root(keep: Path | None, prefix: str) -> Iterator[Path]:
    """The folder the clones go to: ``keep`` (created, kept) or a temporary one removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        yield root
