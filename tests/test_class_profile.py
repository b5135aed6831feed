"""The class profile: what a lesson needs from it, checked without training (its numbers are in the README)."""

from __future__ import annotations

from pathlib import Path

from tiebias.config import profiles
from tiebias.study import check_study
from tiebias.verdicts.evidence import PLUMBING_PROFILES


def test_class_profile_can_carry_claims_1_2_and_4(tmp_path: Path) -> None:
    p, names = check_study("class", tmp_path / "class")  # every parameter of all four notebooks, nothing written
    assert names == ["01_train", "02_align", "03_lens", "04_ablate"] and not any(tmp_path.iterdir())
    assert len(p["seeds"]) >= 2 and len(p["ablate_seeds"]) >= 2  # a seed sd for claims 1, 2 and 4
    assert min(p["ablate_factors"]) == 1 and max(p["ablate_factors"]) > 1  # the plain tied model and a dose
    assert p["lens_protocols"] == ["package", "reference"] and len(p["lens_budgets"]) >= 2  # convergence checked
    assert "class" not in PLUMBING_PROFILES  # its verdicts are read as evidence when its models beat the baseline


def test_class_profile_is_lighter_than_default() -> None:
    c, d = profiles.load_profile("class"), profiles.load_profile("default")
    assert c["steps"] * len(c["seeds"]) < d["steps"] * len(d["seeds"])
    assert len(c["ablate_factors"]) * len(c["ablate_seeds"]) < len(d["ablate_factors"]) * len(d["ablate_seeds"])


WALKTHROUGH = Path(__file__).resolve().parent.parent / "walkthrough" / "README.md"


def class_run_seconds() -> list[int]:
    """The run time of each notebook in the walkthrough's index: the class run it was rendered from."""
    import re

    rows = re.findall(r"^\| \[(\d\d_\w+)\]\(\1\.md\) \| .* \| (\d+) s \|$", WALKTHROUGH.read_text(), re.MULTILINE)
    assert [name for name, _ in rows] == ["01_train", "02_align", "03_lens", "04_ablate"], rows
    return [int(s) for _, s in rows]


def minutes_text(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s"


def test_the_class_run_time_is_one_measured_figure() -> None:
    """README (the class section and the profile table) and the Makefile quote the walkthrough's class run: one
    figure, measured, in every place that gives the class profile's run time."""
    import re

    root = WALKTHROUGH.parent.parent
    secs = class_run_seconds()
    total = minutes_text(sum(secs))
    readme, make = (root / "README.md").read_text(), (root / "Makefile").read_text()
    lesson = readme[readme.index("## A class in 90 minutes"):readme.index("\n## ", readme.index("## A class in 90"))]
    assert total in lesson and f"({' + '.join(map(str, secs))} s" in lesson
    row = next(line for line in readme.splitlines() if line.startswith("| `class` |"))
    assert row.rstrip(" |").endswith(total), row
    lab = next(line for line in make.splitlines() if line.startswith("# make lab:"))
    assert f"({total} for 01..04" in lab, lab
    others = re.findall(r"\d+(?:\.\d+)? min(?:utes)?\b", lesson.replace(total, ""))
    assert others == ["90 minutes"], others  # the lesson's length, and no second figure for the run
