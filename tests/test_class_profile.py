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
