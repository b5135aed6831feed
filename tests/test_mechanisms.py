"""The notebooks' mechanism cells show the project's real code paths, and their numbers are right."""

import numpy as np
import pytest

from tiebias.teach import mechanisms
from tiebias.train.gradients import GradientProvenance

# float32 rounding of one product or norm is about 6e-8 relative; the changes these tests guard against (a factor
# applied to the wrong path, a transposed map) move the checked numbers by tens of percent or more.
F32_REL = 1e-5
# the toy alignment runs in float64 on 200 x 8 matrices: formula and library differ only by float64 rounding
# (about 1e-15); a different map or a missing centring moves the mean cosine by more than 1e-2.
F64_ABS = 1e-9


def test_input_path_reaches_only_tokens_in_the_batch() -> None:
    table = mechanisms.gradient_split()
    summary = mechanisms.gradient_split_summary()
    assert table.loc["0 (absent)", "input-path row norm"] == 0.0  # no lookup, no gradient: exactly zero
    assert (table["output-path row norm"] > 0).all()  # the softmax reaches every row
    assert summary["rows reached by input path"] == summary["distinct tokens in batch"] < summary["vocabulary"]
    assert summary["rows reached by output path"] == summary["vocabulary"]
    assert int(table["tokens"].sum()) == summary["vocabulary"]
    assert summary["max |input + output - W.grad|"] == 0.0  # autograd adds exactly these two tensors


def test_more_frequent_tokens_get_larger_input_rows() -> None:
    rows = mechanisms.gradient_split()["input-path row norm"].to_numpy()
    assert np.all(np.diff(rows) > 0), rows


def test_factor_multiplies_only_the_input_path() -> None:
    t = mechanisms.factor_effect((1.0, 5.0))
    assert t.loc[5.0, "input-path norm"] == pytest.approx(5 * t.loc[1.0, "input-path norm"], rel=F32_REL)
    assert t.loc[5.0, "output-path norm"] == pytest.approx(t.loc[1.0, "output-path norm"], rel=F32_REL)
    scale = t.loc[5.0, "input-path norm"]
    assert (t["max |W.grad - (k g_in + g_out)|"] <= F32_REL * scale).all()
    assert t.loc[5.0, "output share"] < t.loc[1.0, "output share"]


def test_factor_is_checked() -> None:
    with pytest.raises(ValueError, match="factors: 0.0"):
        mechanisms.factor_effect((0.0,))


def test_source_shows_where_the_factor_is_applied() -> None:
    text = mechanisms.source_of(GradientProvenance._on_grad)
    assert "grad * factor" in text and "input_factor" in text


def test_map_formulas_match_the_library() -> None:
    t = mechanisms.map_check()
    assert np.allclose(t["formula"], t["tiebias.align.maps"], rtol=0, atol=F64_ABS)
    assert t.loc["orthogonal", "max |W^T W - I|"] < F64_ABS
    assert t.loc["linear", "max |W^T W - I|"] > 0.1  # the stretch in the toy target is not a rotation
    # in-sample, each map can do at least what the more constrained one does
    assert t.loc["identity", "formula"] < t.loc["orthogonal", "formula"] < t.loc["linear", "formula"]


def test_orthogonal_formula_recovers_a_pure_rotation() -> None:
    rng = np.random.default_rng(1)
    S = rng.standard_normal((100, 6))
    Q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    W = mechanisms.map_formulas(S, S @ Q)["orthogonal"]
    assert np.abs(W - Q).max() < F64_ABS


def test_toy_batch_is_checked() -> None:
    with pytest.raises(ValueError, match="vocab: 1 "):
        mechanisms.toy_batch(vocab=1)


def _cell(notebook: str, cell_id: str) -> str:
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / f"{notebook}.ipynb").read_text())
    return next("".join(c["source"]) for c in nb["cells"] if c.get("id") == cell_id)


def test_numbers_quoted_in_the_notebooks_are_the_toy_results() -> None:
    maps = mechanisms.map_check()["formula"]
    text = _cell("02_align", "mechanism-maps-after")
    for method in ("orthogonal", "linear", "identity"):
        assert f"{maps[method]:.2f}" in text, (method, maps[method])
    share = mechanisms.factor_effect((1.0, 5.0))["output share"]
    assert f"({share[1.0]:.2f} to {share[5.0]:.2f} on this toy batch)" in _cell("04_ablate", "mechanism-factor-after")
    split = mechanisms.gradient_split_summary()
    assert f"(output share\n{split['output share']:.2f} on this toy batch)" in _cell("01_train", "mechanism-split-after")
