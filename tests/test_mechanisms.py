"""The notebooks' mechanism cells show the project's real code paths, and their numbers are right."""

import numpy as np
import pytest

from tiebias.teach import mechanisms

# float32 rounding of one product or norm is about 6e-8 relative; the changes these tests guard against (a factor
# applied to the wrong path, a transposed map) move the checked numbers by tens of percent or more.
F32_REL = 1e-5
# the toy alignment runs in float64 on 200 x 8 matrices: formula and library differ only by float64 rounding
# (about 1e-15); a different map or a missing centring moves the mean cosine by more than 1e-2.
F64_ABS = 1e-9


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
