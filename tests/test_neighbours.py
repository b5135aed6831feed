"""Nearest-neighbour search and KNN overlap against a brute-force reference."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from tiebias.align.neighbours import knn_overlap, nearest, neighbour_overlap


def knn_reference(x: np.ndarray, k: int) -> list[set[int]]:
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    sims = xn @ xn.T
    np.fill_diagonal(sims, -np.inf)
    return [set(np.argsort(-row)[:k].tolist()) for row in sims]


@pytest.mark.parametrize("chunk", [7, 64, 4096])
def test_knn_matches_bruteforce(chunk: int) -> None:
    rng = np.random.default_rng(14)
    a = rng.standard_normal((150, 12))
    b = a @ rng.standard_normal((12, 20)) + 0.5 * rng.standard_normal((150, 20))
    ra, rb = knn_reference(a, 5), knn_reference(b, 5)
    ref = np.array([len(x & y) / 5 for x, y in zip(ra, rb, strict=True)])
    mean, per = knn_overlap(a, b, 5, chunk=chunk)
    np.testing.assert_allclose(per.numpy(), ref)
    assert mean == pytest.approx(ref.mean())
    ids = nearest(a, 5, chunk=chunk)
    assert ids.shape == (150, 5) and [set(r) for r in ids.tolist()] == ra
    assert neighbour_overlap(ids, nearest(b, 5))[0] == pytest.approx(mean)


def test_knn_self_and_independent() -> None:
    rng = np.random.default_rng(15)
    a = torch.from_numpy(rng.standard_normal((500, 16)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((500, 24)).astype(np.float32))
    assert knn_overlap(a, a, 10, chunk=128)[0] == 1.0
    scaled = a * torch.from_numpy(rng.uniform(0.1, 10, (500, 1)).astype(np.float32))
    assert knn_overlap(a, scaled, 10)[0] == pytest.approx(1.0, abs=0.01)
    assert knn_overlap(a, b, 10)[0] < 0.08  # chance level is 10/499


# ------------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda s, t: knn_overlap(s, t, 20), "k: 20 is not allowed.*between 1 and 19"),
    (lambda s, t: knn_overlap(s, t, 0), "k: 0 is not allowed"),
])
def test_bad_inputs_raise(call: Callable[[np.ndarray, np.ndarray], object], pattern: str) -> None:
    rng = np.random.default_rng(17)
    s, t = rng.standard_normal((20, 6)), rng.standard_normal((20, 6))
    with pytest.raises(ValueError, match=pattern):
        call(s, t)

