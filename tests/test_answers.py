"""The exercises' answers are templates filled from run folders (``scripts/exercise_answers.py``): every named number
reads from a real run, and a template names only numbers there are."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("exercise_answers",
                                              Path(__file__).resolve().parents[1] / "scripts" / "exercise_answers.py")
answers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(answers)


def test_fill_names_numbers_words_and_ratios() -> None:
    base, ex = {"share": 0.575, "hw": 0.6}, {"share": 0.56, "hw": 0.1}
    text = answers.fill("{base.share:.1%} -> {ex.share:.1%}: {word.share}; {ratio.hw:.0f}x narrower", base, ex)
    assert text == "57.5% -> 56.0%: lower; 6x narrower"
    assert answers.fill("{word.share}", base, base) == "the same"
    with pytest.raises(KeyError, match=r"ex\.nope: no such number \(have: hw, share\)"):
        answers.fill("{ex.nope}", base, ex)


def test_quantities_of_the_smoke_study_cover_every_claim(smoke_study) -> None:
    """Every part reads from a study of all four notebooks; the numbers agree with summary.json's claims."""
    import json

    q = answers.quantities(smoke_study.path)
    claims = json.loads((smoke_study.path / "summary.json").read_text())["claims"]
    assert q["profile"] == "smoke" and q["share"] == claims["claim2_gradient_flow"]["value"]
    assert q["c1_gap"] == claims["claim1_alignment"]["value"] and q["gap"] == claims["claim3_tuned_lens"]["value"]
    assert 0 < q["share_k1"] <= 1 and q["ppl_k1"] > 1 and q["knn_chance"] == q["knn_k"] / q["vocab_size"]
    assert q["converged"] in ("converged", "not converged") and q["kl_layer"] >= 0
    assert q["time_total"].endswith(" s") and {"status_1", "status_2", "status_3", "status_4"} <= set(q)
