"""`make lab`: the class profile unless told otherwise, said before JupyterLab starts, opened at the repository
root, and started as root where the user is root (JupyterLab refuses root without --allow-root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _lab(*args: str, profile: str | None = None) -> list[str]:
    """The commands `make lab` would run (dry run: nothing installed, nothing started)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TIEBIAS_PROFILE", "TIEBIAS_RUN_DIR", "PROFILE")}
    if profile is not None:
        env["TIEBIAS_PROFILE"] = profile
    out = subprocess.run(["make", "-n", "-o", "setup", "lab", *args], cwd=REPO, env=env, capture_output=True,
                         text=True, check=True).stdout
    return out.splitlines()


def _start_line(lines: list[str]) -> str:
    return next(line for line in lines if " lab --ServerApp.root_dir=" in line)


@pytest.mark.parametrize("args,profile,want", [((), None, "class"), (("PROFILE=default",), None, "default"),
                                                ((), "smoke", "smoke"), (("PROFILE=long",), "smoke", "long")])
def test_lab_profile_is_class_unless_told(args: tuple[str, ...], profile: str | None, want: str) -> None:
    lines = _lab(*args, profile=profile)
    start = _start_line(lines)
    assert start.startswith(f"TIEBIAS_PROFILE={want} "), start
    said = " ".join(lines[:lines.index(start)])
    assert f"the '{want}' profile" in said and f"runs/{want}/" in said and "make lab PROFILE=" in said


def test_lab_opens_at_the_repository_root_and_allows_root() -> None:
    start = _start_line(_lab())
    assert f'--ServerApp.root_dir="{REPO}"' in start and "notebooks/" not in start
    assert ("--allow-root" in start) is (os.getuid() == 0)
    assert "--ContentsManager.post_save_hook=tiebias.nbfilter.post_save" in start  # a saved, unchanged notebook: git clean
