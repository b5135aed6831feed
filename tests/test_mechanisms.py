"""The notebooks' mechanism cells show the project's real code paths, and their numbers are right."""

import json

import numpy as np
import pytest
import torch

from tiebias.align import maps
from tiebias.config.paths import notebooks_dir
from tiebias.teach import mechanisms

# The toy pair is float32: the library applies a map and takes the cosine at that precision, the notebook's plain
# code in float64, so a mean cosine differs by about (d_s + d_t) x float32 eps; a different map or a missing centring
# moves it by more than 1e-2.
F32_ABS = 1e-5
F64_ABS = 1e-9


def _maps_cell() -> dict:
    """The namespace of notebook 02's plain maps cell (its toy pair and functions), run on its own."""
    nb = json.loads((notebooks_dir() / "02_align.ipynb").read_text())
    namespace: dict = {}
    exec("".join(next(c for c in nb["cells"] if c["id"] == "mechanism-maps-code")["source"]), namespace)
    return namespace


def test_notebook_02s_plain_maps_match_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    ns = _maps_cell()
    S, T = ns["S_toy"], ns["T_toy"]
    for method, cosine in ns["toy"].items():
        assert abs(cosine - maps.align_all(S, T, [method])[method].mean) < F32_ABS, method
    W = ns["W_toy"]
    assert (W.T @ W - torch.eye(8, dtype=W.dtype)).abs().max() < F64_ABS
    # in-sample, each map can do at least what the more constrained one does
    assert ns["toy"]["identity"] < ns["toy"]["orthogonal"] < ns["toy"]["linear"]
    assert "Mean cosine on the toy pair" in capsys.readouterr().out


def test_orthogonal_formula_recovers_a_pure_rotation() -> None:
    rng = np.random.default_rng(1)
    S = torch.from_numpy(rng.standard_normal((100, 6)))
    Q = torch.linalg.qr(torch.from_numpy(rng.standard_normal((6, 6)))).Q
    W = _maps_cell()["procrustes_map"](S, S @ Q)
    assert (W - Q).abs().max() < F64_ABS


def test_toy_batch_is_checked() -> None:
    with pytest.raises(ValueError, match="vocab: 1 "):
        mechanisms.toy_batch(vocab=1)
