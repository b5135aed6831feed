"""Alignment maps and scores against independent references (scipy, numpy), and Table-1 rows of model pairs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from _embedding_helpers import CORPUS_A, CORPUS_B, centre, cos_rows, llama, make_tokenizer, related, rotation
from scipy.linalg import orthogonal_procrustes
from transformers import PreTrainedTokenizerFast

from tiebias.align.comparisons import table1
from tiebias.align.embeddings import Embeddings, extract
from tiebias.align.maps import METHODS, AlignResult, align_all
from tiebias.align.tokenizers import match_tokens


def align(s: object, t: object, method: str, **kw: int) -> AlignResult:
    return align_all(s, t, [method], **kw)[method]


@pytest.fixture(scope="module")
def tok_a() -> PreTrainedTokenizerFast:
    return make_tokenizer(CORPUS_A)


# --------------------------------------------------------------------------- alignment references


def test_orthogonal_matches_scipy_procrustes() -> None:
    s, t = related(400, 24, 24)
    sc, tc = centre(s), centre(t)
    r_ref, _ = orthogonal_procrustes(sc, tc)
    ref = cos_rows(sc @ r_ref, tc)
    res = align(s, t, "orthogonal")
    np.testing.assert_allclose(res.per_token.numpy(), ref, atol=1e-10)
    assert res.mean == pytest.approx(ref.mean(), abs=1e-12)


@pytest.mark.parametrize(("ds", "dt"), [(24, 16), (16, 24)])
def test_orthogonal_rectangular_matches_svd_reference(ds: int, dt: int) -> None:
    s, t = related(300, ds, dt, seed=1)
    sc, tc = centre(s), centre(t)
    u, _, vh = np.linalg.svd(sc.T @ tc, full_matrices=False)
    w_ref = u @ vh
    res = align(torch.from_numpy(s), torch.from_numpy(t), "orthogonal")
    np.testing.assert_allclose(res.per_token.numpy(), cos_rows(sc @ w_ref, tc), atol=1e-10)


@pytest.mark.parametrize("case", ["fewer tokens than width", "ill-conditioned"])
def test_orthogonal_falls_back_to_the_svd_where_the_fast_polar_factor_fails(case: str) -> None:
    """The eigh route to U V^T divides by the square roots of the eigenvalues of C^T C: with fewer tokens than the width
    some are zero (NaN), and with a widely spread spectrum the small ones are inaccurate (W not orthogonal); both
    must fall back to the SVD and score as scipy's Procrustes does."""
    rng = np.random.default_rng(2)
    if case == "fewer tokens than width":
        s, t = related(12, 20, 20, seed=2)
    else:
        s = rng.standard_normal((300, 16))
        t = (s * np.logspace(0, -7, 16)) @ rotation(16, rng) + 1e-9 * rng.standard_normal((300, 16))
    sc, tc = centre(s), centre(t)
    ref = cos_rows(sc @ orthogonal_procrustes(sc, tc)[0], tc)
    res = align(s, t, "orthogonal")
    np.testing.assert_allclose(res.per_token.numpy(), ref, atol=1e-8)


@pytest.mark.parametrize(("n", "ds", "dt"), [(400, 24, 24), (300, 20, 28), (30, 50, 40)])
def test_linear_matches_numpy_lstsq(n: int, ds: int, dt: int) -> None:
    s, t = related(n, ds, dt, seed=3)
    sc, tc = centre(s), centre(t)
    m_ref = np.linalg.lstsq(sc, tc, rcond=None)[0]
    res = align(s, t, "linear")
    np.testing.assert_allclose(res.per_token.numpy(), cos_rows(sc @ m_ref, tc), atol=1e-9)


def test_linear_with_collinear_columns_matches_lstsq() -> None:
    s, t = related(200, 16, 16, seed=4)
    s[:, -1] = 2 * s[:, 0] - s[:, 1]  # singular Gram matrix: pseudo-inverse path
    sc, tc = centre(s), centre(t)
    m_ref = np.linalg.lstsq(sc, tc, rcond=None)[0]
    np.testing.assert_allclose(align(s, t, "linear").per_token.numpy(), cos_rows(sc @ m_ref, tc), atol=1e-8)
    assert align(np.ones_like(s), t, "linear").mean == 0  # a constant source maps every token to 0


def test_float32_inputs_close_to_float64() -> None:
    s, t = related(500, 32, 32, seed=5)
    r64 = align_all(s, t)
    r32 = align_all(s.astype(np.float32), t.astype(np.float32))
    for m in METHODS:
        np.testing.assert_allclose(r32[m].per_token.numpy(), r64[m].per_token.numpy(), atol=1e-5)


def test_align_all_equals_single_method_calls() -> None:
    s, t = related(200, 12, 12, seed=6)
    both = align_all(s, t, METHODS, heldout_folds=4, seed=3)
    for m in METHODS:
        one = align(s, t, m, heldout_folds=4, seed=3)
        torch.testing.assert_close(one.per_token, both[m].per_token, rtol=0, atol=1e-12)


def test_exact_rotation_scores_one() -> None:
    rng = np.random.default_rng(7)
    s = rng.standard_normal((300, 20))
    t = 2.5 * s @ rotation(20, rng) + 4.0
    for m in ("orthogonal", "linear"):
        res = align(s, t, m)
        assert res.mean == pytest.approx(1.0, abs=1e-10)
        assert float(res.per_token.min()) == pytest.approx(1.0, abs=1e-9)
    assert align(s, s + 7.0, "identity").mean == pytest.approx(1.0, abs=1e-12)


def test_input_matrices_not_modified() -> None:
    s, t = related(100, 8, 8, seed=8)
    s0, t0 = s.copy(), t.copy()
    align_all(s, t, heldout_folds=3)
    align_all(torch.from_numpy(s), torch.from_numpy(t))
    np.testing.assert_array_equal(s, s0)
    np.testing.assert_array_equal(t, t0)


def test_invariances() -> None:
    rng = np.random.default_rng(9)
    s, t = related(300, 16, 16, seed=9)
    base = align_all(s, t)
    r1, r2 = rotation(16, rng), rotation(16, rng)
    rotated = align_all(s @ r1, t @ r2)  # independent rotations: only the fitted maps are invariant
    shared = align_all(s @ r1, t @ r1)  # same rotation: identity is invariant too
    scaled = align_all(3.7 * s, t)
    scaled_t = align_all(s, 0.01 * t)
    for m in METHODS:
        for other in (shared, scaled, scaled_t):
            np.testing.assert_allclose(other[m].per_token.numpy(), base[m].per_token.numpy(), atol=1e-10)
        if m != "identity":
            np.testing.assert_allclose(rotated[m].per_token.numpy(), base[m].per_token.numpy(), atol=1e-10)


def test_heldout_not_above_in_sample_on_noise() -> None:
    rng = np.random.default_rng(10)
    s, t = rng.standard_normal((60, 40)), rng.standard_normal((60, 40))
    ins = align_all(s, t)
    out = align_all(s, t, heldout_folds=5, seed=1)
    assert ins["linear"].mean > 0.6  # 40 free dims per output on 60 points: overfits
    for m in ("orthogonal", "linear"):
        assert not torch.isnan(out[m].per_token).any()
        assert out[m].mean < ins[m].mean - 0.2
        assert abs(out[m].mean) < 0.15
    again = align_all(s, t, heldout_folds=5, seed=1)
    other = align_all(s, t, heldout_folds=5, seed=2)
    torch.testing.assert_close(again["linear"].per_token, out["linear"].per_token, rtol=0, atol=0)
    assert not torch.equal(other["linear"].per_token, out["linear"].per_token)


def test_heldout_matches_manual_kfold() -> None:
    s, t = related(97, 10, 12, seed=11)
    k, seed = 4, 5
    perm = torch.randperm(97, generator=torch.Generator().manual_seed(seed)).numpy()
    ref = {m: np.full(97, np.nan) for m in ("orthogonal", "linear")}
    for f in range(k):
        test = perm[f::k]
        fit = np.setdiff1d(np.arange(97), test)
        ms, mt = s[fit].mean(0), t[fit].mean(0)
        sc, tc = s[fit] - ms, t[fit] - mt
        u, _, vh = np.linalg.svd(sc.T @ tc, full_matrices=False)
        m_lin = np.linalg.lstsq(sc, tc, rcond=None)[0]
        ref["orthogonal"][test] = cos_rows((s[test] - ms) @ (u @ vh), t[test] - mt)
        ref["linear"][test] = cos_rows((s[test] - ms) @ m_lin, t[test] - mt)
    got = align_all(s, t, ("orthogonal", "linear"), heldout_folds=k, seed=seed)
    for m, r in ref.items():
        np.testing.assert_allclose(got[m].per_token.numpy(), r, atol=1e-9)


def test_heldout_close_to_in_sample_when_map_is_real() -> None:
    s, t = related(2000, 16, 16, seed=12, noise=0.5)
    ins, out = align_all(s, t), align_all(s, t, heldout_folds=5)
    for m in METHODS:
        assert out[m].mean == pytest.approx(ins[m].mean, abs=0.01)


def test_identity_on_independent_random_is_near_zero() -> None:
    rng = np.random.default_rng(13)
    res = align(rng.standard_normal((3000, 64)), rng.standard_normal((3000, 64)), "identity")
    assert abs(res.mean) < 0.01


# ------------------------------------------------------------------------- pairs and vocabularies


def test_pair_with_different_widths(tmp_path: Path, tok_a: PreTrainedTokenizerFast) -> None:
    small, wide = tmp_path / "small", tmp_path / "wide"
    llama(len(tok_a), False, hidden=32).save_pretrained(small)
    llama(len(tok_a), True, hidden=48).save_pretrained(wide)
    a, b = extract(small, tok_a), extract(wide, tok_a)
    df = table1({0: {"tied": b, "untied": a}}, knn_k=5, noise_floor=False)
    row = df[df.comparison == "untied output -> tied"].iloc[0]
    assert np.isnan(row["identity"]) and not np.isnan(df.identity.iloc[0])  # within the untied model: equal widths
    assert -1 <= row["orthogonal"] <= 1 and row["orthogonal"] < row["linear"] <= 1
    assert 0 <= row["knn@5"] <= 1 and row["n_tokens"] == len(tok_a)
    with pytest.raises(ValueError, match="width"):
        align(a.output, b.input, "identity")


def test_pair_with_different_tokenizers(tmp_path: Path, tok_a: PreTrainedTokenizerFast) -> None:
    tok_b = make_tokenizer(CORPUS_B)
    pa, pb = tmp_path / "a", tmp_path / "b"
    llama(len(tok_a), False).save_pretrained(pa)
    llama(len(tok_b) + 3, True, seed=1).save_pretrained(pb)
    a, b = extract(pa, tok_a), extract(pb, tok_b)
    assert a.tokens != b.tokens
    ia, ib = match_tokens(a.tokens, b.tokens)
    assert 256 <= len(ia) < min(a.vocab_size, b.vocab_size)  # byte alphabet is shared
    assert [a.tokens[i] for i in ia.tolist()] == [b.tokens[i] for i in ib.tolist()]
    assert ia.tolist() == sorted(ia.tolist())
    df = table1({0: {"tied": b, "untied": a}}, knn_k=None, noise_floor=False, keep_scores=True)
    row = df[df.comparison == "untied input -> tied"].iloc[0]
    assert row["n_tokens"] == len(ia)
    assert row["linear"] == pytest.approx(align(a.input[ia], b.input[ib], "linear").mean, abs=1e-12)
    torch.testing.assert_close(row["token_ids"], ia)
    with pytest.raises(ValueError, match="no shared tokens"):
        match_tokens(["x", "y"], ["p", "q"])


def test_table1_row_matches_align_all() -> None:
    s, t = related(120, 8, 8, seed=16)
    toks = [f"t{i}" for i in range(120)]
    a = Embeddings(torch.from_numpy(s), torch.from_numpy(t), False, toks, "model-a")
    row = table1({0: {"tied": a, "untied": a}}, heldout_folds=3, knn_k=None).iloc[0]
    assert row.comparison == "untied input -> untied output"
    ins, out = align_all(s, t), align_all(s, t, ("orthogonal", "linear"), heldout_folds=3)
    for m in METHODS:
        assert row[m] == pytest.approx(ins[m].mean, abs=1e-12)
        if m != "identity":
            assert row[f"{m} (held-out)"] == pytest.approx(out[m].mean, abs=1e-12)
    assert "per_token" not in row


# ------------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda s, t: align(s, t, "cca"), "method must be one of .*identity.*orthogonal.*linear"),
    (lambda s, t: align(s, t[:, :5], "identity"), "identity.*width"),
    (lambda s, t: align(s[:0], t[:0], "linear"), "source must be a non-empty 2-D"),
    (lambda s, t: align(s, t[:-1], "linear"), "same number of rows"),
    (lambda s, t: align(s[0], t, "linear"), "source must be a non-empty 2-D"),
    (lambda s, t: align(s, "t", "linear"), "target must be a torch.Tensor"),
    (lambda s, t: align(s[:1], t[:1], "linear"), "at least 2 tokens"),
    (lambda s, t: align(s, np.full_like(t, np.nan), "linear"), "target contains NaN"),
    (lambda s, t: align(s, t, "linear", heldout_folds=1), "heldout_folds"),
    (lambda s, t: align(s, t, "linear", heldout_folds=21), "heldout_folds"),
    (lambda s, t: align(s[:3], t[:3], "linear", heldout_folds=2), "heldout_folds: 2 is not allowed.*2 of the 3"),
    (lambda s, t: align_all(s, t, ()), "methods: none given"),
])
def test_bad_inputs_raise(call: Callable[[np.ndarray, np.ndarray], object], pattern: str) -> None:
    rng = np.random.default_rng(17)
    s, t = rng.standard_normal((20, 6)), rng.standard_normal((20, 6))
    with pytest.raises(ValueError, match=pattern):
        call(s, t)



def test_bad_matrix_name_and_method_are_refused() -> None:
    m = torch.randn(5, 3)
    a = Embeddings(m, m, True, list("abcde"), "a")
    with pytest.raises(ValueError, match="which must be 'input' or 'output', got 'logits'"):
        a.matrix("logits")
    with pytest.raises(ValueError, match="methods: 'procrustes' given; each method must be one of"):
        table1({0: {"tied": a, "untied": a}}, methods=("procrustes",), knn_k=None)
