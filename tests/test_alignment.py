"""Alignment metrics against independent references (scipy, numpy) and extraction from saved models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.stats import spearmanr
from scipy.stats import t as student_t
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    AutoModelForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from tiebias import alignment as al
from tiebias.alignment import (
    METHODS,
    Embeddings,
    align,
    align_all,
    by_frequency,
    checkpoint_matrices,
    compare,
    evolution,
    extract,
    knn_overlap,
    load_counts,
    match_vocab,
    neighbour_overlap,
    neighbours,
    norm_frequency,
    require_untied,
    row_norms,
)
from tiebias.stats import summarise

CORPUS_A = ["the cat sat on the mat", "a dog ran far away from the cat", "embeddings tie input and output"]
CORPUS_B = ["weights are shared between the layers", "the dog and the cat", "output space bias"]


# ----------------------------------------------------------------------------------------- helpers


def centre(x: np.ndarray) -> np.ndarray:
    return x - x.mean(0)


def cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def related(n: int, ds: int, dt: int, seed: int = 0, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Source and a noisy linear image of it with an offset (so centring matters)."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((n, ds)) + rng.standard_normal(ds)
    t = s @ rng.standard_normal((ds, dt)) * 0.4 + noise * rng.standard_normal((n, dt)) + 3.0
    return s, t


def make_tokenizer(texts: list[str], path: Path | None = None) -> PreTrainedTokenizerFast:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts * 20, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>")
    if path is not None:
        tok.save_pretrained(path)
    return tok


def llama(vocab: int, tied: bool, hidden: int = 32, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, tie_word_embeddings=tied)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tok_a() -> PreTrainedTokenizerFast:
    return make_tokenizer(CORPUS_A)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, tok_a: PreTrainedTokenizerFast) -> dict[str, Path]:
    """Tied and untied tiny Llama models (vocab padded by 10 rows) with their tokenizer, plus a run."""
    root = tmp_path_factory.mktemp("models")
    out: dict[str, Path] = {}
    for tied in (True, False):
        p = root / ("tied" if tied else "untied")
        llama(len(tok_a) + 10, tied, seed=int(tied)).save_pretrained(p)
        tok_a.save_pretrained(p)
        out["tied" if tied else "untied"] = p
    run = root / "run"
    tok_a.save_pretrained(run / "tokenizer")
    model_dir = run / "models" / "untied-s0"
    for step in (0, 4, 12):
        llama(len(tok_a) + 10, False, seed=100 + step).save_pretrained(model_dir / "checkpoints" / f"step-{step}")
    out["run_model"] = model_dir
    return out


# --------------------------------------------------------------------------- alignment references


def test_orthogonal_matches_scipy_procrustes() -> None:
    s, t = related(400, 24, 24)
    sc, tc = centre(s), centre(t)
    r_ref, _ = orthogonal_procrustes(sc, tc)
    ref = cos_rows(sc @ r_ref, tc)
    res = align(s, t, "orthogonal")
    np.testing.assert_allclose(res.per_token.numpy(), ref, atol=1e-10)
    assert res.mean == pytest.approx(ref.mean(), abs=1e-12)
    assert res.n_tokens == 400 and not res.heldout
    w = al._procrustes(torch.from_numpy(sc.T @ tc))
    np.testing.assert_allclose(w.numpy(), r_ref, atol=1e-10)


@pytest.mark.parametrize(("ds", "dt"), [(24, 16), (16, 24)])
def test_orthogonal_rectangular_matches_svd_reference(ds: int, dt: int) -> None:
    s, t = related(300, ds, dt, seed=1)
    sc, tc = centre(s), centre(t)
    u, _, vh = np.linalg.svd(sc.T @ tc, full_matrices=False)
    w_ref = u @ vh
    res = align(torch.from_numpy(s), torch.from_numpy(t), "orthogonal")
    np.testing.assert_allclose(res.per_token.numpy(), cos_rows(sc @ w_ref, tc), atol=1e-10)
    w = al._procrustes(torch.from_numpy(sc.T @ tc)).numpy()
    small = min(ds, dt)
    gram = w.T @ w if ds >= dt else w @ w.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-10)


def test_procrustes_rank_deficient_stays_semi_orthogonal() -> None:
    rng = np.random.default_rng(2)
    c = rng.standard_normal((12, 3)) @ rng.standard_normal((3, 12))  # rank 3: SVD fallback
    w = al._procrustes(torch.from_numpy(c)).numpy()
    np.testing.assert_allclose(w.T @ w, np.eye(12), atol=1e-10)
    u, _, vh = np.linalg.svd(c)
    assert np.trace(w.T @ c) == pytest.approx(np.trace((u @ vh).T @ c), rel=1e-10)


@pytest.mark.parametrize(("n", "ds", "dt"), [(400, 24, 24), (300, 20, 28), (30, 50, 40)])
def test_linear_matches_numpy_lstsq(n: int, ds: int, dt: int) -> None:
    s, t = related(n, ds, dt, seed=3)
    sc, tc = centre(s), centre(t)
    m_ref = np.linalg.lstsq(sc, tc, rcond=None)[0]
    res = align(s, t, "linear")
    np.testing.assert_allclose(res.per_token.numpy(), cos_rows(sc @ m_ref, tc), atol=1e-9)
    if n > ds:
        m = al._least_squares(torch.from_numpy(sc.T @ sc), torch.from_numpy(sc.T @ tc), n)
        np.testing.assert_allclose(m.numpy(), m_ref, atol=1e-9)


def test_linear_with_collinear_columns_matches_lstsq() -> None:
    s, t = related(200, 16, 16, seed=4)
    s[:, -1] = 2 * s[:, 0] - s[:, 1]  # singular Gram matrix: pseudo-inverse path
    sc, tc = centre(s), centre(t)
    m_ref = np.linalg.lstsq(sc, tc, rcond=None)[0]
    np.testing.assert_allclose(align(s, t, "linear").per_token.numpy(), cos_rows(sc @ m_ref, tc), atol=1e-8)


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
        assert out[m].heldout and out[m].folds == 5
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


# ---------------------------------------------------------------------------------------- KNN


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
    ids = neighbours(a, 5, chunk=chunk)
    assert ids.shape == (150, 5) and [set(r) for r in ids.tolist()] == ra
    assert neighbour_overlap(ids, neighbours(b, 5))[0] == pytest.approx(mean)


def test_knn_self_and_independent() -> None:
    rng = np.random.default_rng(15)
    a = torch.from_numpy(rng.standard_normal((500, 16)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((500, 24)).astype(np.float32))
    assert knn_overlap(a, a, 10, chunk=128)[0] == 1.0
    scaled = a * torch.from_numpy(rng.uniform(0.1, 10, (500, 1)).astype(np.float32))
    assert knn_overlap(a, scaled, 10)[0] == pytest.approx(1.0, abs=0.01)
    assert knn_overlap(a, b, 10)[0] < 0.08  # chance level is 10/499


# ----------------------------------------------------------------------------------- extraction


def test_extract_tied_and_untied(saved: dict[str, Path], tok_a: PreTrainedTokenizerFast) -> None:
    n = len(tok_a)
    tokens = tok_a.convert_ids_to_tokens(list(range(n)))
    for kind in ("tied", "untied"):
        emb = extract(saved[kind])
        model = AutoModelForCausalLM.from_pretrained(saved[kind])
        assert emb.tied is (kind == "tied")
        assert emb.input.shape == (n, 32) and emb.output.shape == (n, 32)  # 10 padding rows dropped
        assert emb.tokens == tokens and emb.source == str(saved[kind]) and emb.input.dtype == torch.float32
        torch.testing.assert_close(emb.input, model.get_input_embeddings().weight.detach()[:n])
        torch.testing.assert_close(emb.output, model.get_output_embeddings().weight.detach()[:n])
        if kind == "tied":
            assert emb.input.data_ptr() == emb.output.data_ptr()
            with pytest.raises(ValueError, match="tied"):
                require_untied(emb)
        else:
            assert not torch.equal(emb.input, emb.output)
            assert require_untied(emb) is emb


def test_extract_reads_only_embeddings(saved: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path, tok_a: PreTrainedTokenizerFast) -> None:
    ref = extract(saved["untied"])
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(saved["untied"]).save_pretrained(sharded, max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    torch.manual_seed(0)
    neox = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tok_a), hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=1, num_attention_heads=2))
    neox.save_pretrained(tmp_path / "neox")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("whole model loaded")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
    got = extract(sharded, tokenizer=saved["untied"])
    torch.testing.assert_close(got.input, ref.input)
    torch.testing.assert_close(got.output, ref.output)
    nx = extract(tmp_path / "neox", tokenizer=tok_a)
    assert not nx.tied
    torch.testing.assert_close(nx.input, neox.gpt_neox.embed_in.weight.detach())
    torch.testing.assert_close(nx.output, neox.get_output_embeddings().weight.detach())


def test_extract_loaded_model_and_dtype(saved: dict[str, Path], tok_a: PreTrainedTokenizerFast) -> None:
    model = AutoModelForCausalLM.from_pretrained(saved["tied"])
    emb = extract(model, tokenizer=tok_a, dtype=torch.float64)
    ref = extract(saved["tied"])
    assert emb.tied and emb.input.dtype == torch.float64 and emb.input.data_ptr() == emb.output.data_ptr()
    torch.testing.assert_close(emb.input, ref.input.double())
    assert emb.input.data_ptr() != model.get_input_embeddings().weight.data_ptr()  # a copy
    assert extract(model).tokens == ref.tokens  # tokenizer found from name_or_path


def test_checkpoint_finds_run_tokenizer(saved: dict[str, Path], tok_a: PreTrainedTokenizerFast) -> None:
    step = saved["run_model"] / "checkpoints" / "step-4"
    assert not (step / "tokenizer.json").exists() and not (saved["run_model"] / "tokenizer.json").exists()
    emb = extract(step)
    assert emb.tokens == tok_a.convert_ids_to_tokens(list(range(len(tok_a))))
    assert emb.vocab_size == len(tok_a)
    cks = checkpoint_matrices(saved["run_model"], "output")
    assert [s for s, _ in cks] == [0, 4, 12]
    torch.testing.assert_close(cks[1][1], emb.output)
    df = evolution(cks)
    assert list(df["step"]) == [0, 4, 12] and df["cos_to_init"].iloc[0] == pytest.approx(1.0)


def test_extract_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        extract(tmp_path / "missing")
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        extract("runs/missing")  # not mistaken for a hub id
    with pytest.raises(ValueError, match="not a model folder"):
        extract(tmp_path / "runs")
    with pytest.raises(ValueError, match="source must be"):
        extract(42)
    lonely = tmp_path / "deep" / "a" / "b" / "c" / "d" / "e" / "model"
    llama(300, False).save_pretrained(lonely)
    with pytest.raises(ValueError, match="tokenizer"):
        extract(lonely)


# ------------------------------------------------------------------------- pairs and vocabularies


def test_pair_with_different_widths(tmp_path: Path, tok_a: PreTrainedTokenizerFast) -> None:
    small, wide = tmp_path / "small", tmp_path / "wide"
    llama(len(tok_a), False, hidden=32).save_pretrained(small)
    llama(len(tok_a), True, hidden=48).save_pretrained(wide)
    a, b = extract(small, tok_a), extract(wide, tok_a)
    row = compare(a, b, "output", "input", knn_k=5)
    assert np.isnan(row["identity"])
    assert -1 <= row["orthogonal"] <= 1 and row["orthogonal"] < row["linear"] <= 1
    assert 0 <= row["knn@5"] <= 1 and row["n_tokens"] == len(tok_a) and row["target_tied"]
    with pytest.raises(ValueError, match="width"):
        align(a.output, b.input, "identity")


def test_pair_with_different_tokenizers(tmp_path: Path, tok_a: PreTrainedTokenizerFast) -> None:
    tok_b = make_tokenizer(CORPUS_B)
    pa, pb = tmp_path / "a", tmp_path / "b"
    llama(len(tok_a), False).save_pretrained(pa)
    llama(len(tok_b) + 3, False, seed=1).save_pretrained(pb)
    a, b = extract(pa, tok_a), extract(pb, tok_b)
    assert a.tokens != b.tokens
    ia, ib, tokens = match_vocab(a, b)
    assert 256 <= len(tokens) < min(a.vocab_size, b.vocab_size)  # byte alphabet is shared
    assert [a.tokens[i] for i in ia.tolist()] == tokens == [b.tokens[i] for i in ib.tolist()]
    assert ia.tolist() == sorted(ia.tolist())
    row = compare(a, b, "input", "output", return_scores=True)
    assert row["n_tokens"] == len(tokens) and row["vocab_source"] == len(tok_a)
    direct = align(a.input[ia], b.output[ib], "linear")
    assert row["linear"] == pytest.approx(direct.mean, abs=1e-12)
    torch.testing.assert_close(row["token_ids"], ia)
    with pytest.raises(ValueError, match="vocabularies differ"):
        match_vocab(a, b, allow=False)
    with pytest.raises(ValueError, match="vocabularies differ"):
        compare(a, b, "input", "output", allow_vocab_mismatch=False)


def test_match_vocab_identical_and_disjoint() -> None:
    m = torch.zeros(3, 2)
    a = Embeddings(m, m, True, ["x", "y", "z"], "a")
    b = Embeddings(m, m.clone(), False, ["p", "q", "r"], "b")
    ia, ib, toks = match_vocab(a, a, allow=False)
    assert ia.tolist() == ib.tolist() == [0, 1, 2] and toks == ["x", "y", "z"]
    with pytest.raises(ValueError, match="no shared tokens"):
        match_vocab(a, b)


def test_compare_row_matches_align() -> None:
    s, t = related(120, 8, 8, seed=16)
    toks = [f"t{i}" for i in range(120)]
    a = Embeddings(torch.from_numpy(s), torch.from_numpy(t), False, toks, "model-a")
    row = compare(a, a, "input", "output", heldout_folds=3, seed=2)
    ref = align_all(s, t, heldout_folds=3, seed=2)
    for m in METHODS:
        assert row[m] == pytest.approx(ref[m].mean, abs=1e-12)
    assert row["source"] == row["target"] == "model-a" and row["heldout_folds"] == 3
    assert "per_token" not in row


# ------------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda s, t: align(s, t, "cca"), "method must be one of .*identity.*orthogonal.*linear"),
    (lambda s, t: align(s, t[:, :5], "identity"), "identity.*width"),
    (lambda s, t: align(s[:0], t[:0], "linear"), "source is empty"),
    (lambda s, t: align(s, t[:-1], "linear"), "same number of rows"),
    (lambda s, t: align(s[0], t, "linear"), "source must be a 2-D"),
    (lambda s, t: align(s, "t", "linear"), "target must be a torch.Tensor"),
    (lambda s, t: align(s[:1], t[:1], "linear"), "at least 2 tokens"),
    (lambda s, t: align(s, np.full_like(t, np.nan), "linear"), "target contains NaN"),
    (lambda s, t: align(s, t, "linear", heldout_folds=1), "heldout_folds"),
    (lambda s, t: align(s, t, "linear", heldout_folds=21), "heldout_folds"),
    (lambda s, t: align(s[:3], t[:3], "linear", heldout_folds=2), "fewer than 2"),
    (lambda s, t: align_all(s, t, ()), "methods"),
    (lambda s, t: knn_overlap(s, t, 20), "k must be"),
    (lambda s, t: knn_overlap(s, t, 0), "k must be"),
    (lambda s, t: knn_overlap(s, t[:-1], 3), "same number of rows"),
    (lambda s, t: knn_overlap(s, t, 3, chunk=0), "chunk"),
    (lambda s, t: neighbour_overlap(torch.zeros(3, 2), torch.zeros(3, 3)), "one shape"),
    (lambda s, t: by_frequency(s[:, 0], np.ones(3)), "counts has 3 entries"),
    (lambda s, t: by_frequency(s[:, 0], np.ones(20), bins=0), "bins"),
    (lambda s, t: norm_frequency(s, -np.ones(20)), "non-negative"),
    (lambda s, t: evolution([]), "checkpoints is empty"),
    (lambda s, t: evolution([(0, s), (1, t[:, :3])]), "shape"),
    (lambda s, t: summarise([]), "values is empty"),
])
def test_bad_inputs_raise(call: Callable[[np.ndarray, np.ndarray], object], pattern: str) -> None:
    rng = np.random.default_rng(17)
    s, t = rng.standard_normal((20, 6)), rng.standard_normal((20, 6))
    with pytest.raises(ValueError, match=pattern):
        call(s, t)


def test_compare_rejects_bad_which() -> None:
    m = torch.randn(5, 3)
    a = Embeddings(m, m, True, list("abcde"), "a")
    with pytest.raises(ValueError, match="which_b"):
        compare(a, a, "input", "logits")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method"):
        compare(a, a, "input", "output", methods=("procrustes",))


# ------------------------------------------------------------------ norms, frequency, evolution


def test_norm_frequency_and_counts(tmp_path: Path) -> None:
    rng = np.random.default_rng(18)
    counts = np.array([0, 0, 5, 1, 100, 20, 3, 1000, 7, 0])
    m = rng.standard_normal((10, 4))
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    m *= (1 + np.log1p(counts))[:, None]  # norm grows with frequency
    np.testing.assert_allclose(row_norms(m).numpy(), 1 + np.log1p(counts))
    csv = tmp_path / "token_frequencies.csv"
    pd.DataFrame({"id": [2, 3, 4, 5, 6, 7, 8], "token": list("abcdefg"),
                  "count": counts[2:9]}).to_csv(csv, index=False)
    np.testing.assert_array_equal(load_counts(csv, 10), counts)
    nf = norm_frequency(m, csv, tokens=[f"t{i}" for i in range(10)])
    assert nf.spearman == pytest.approx(1.0) and nf.n_seen == 7 and nf.n_unseen == 3
    assert nf.spearman_all == pytest.approx(spearmanr(counts, np.linalg.norm(m, axis=1))[0])
    tab = nf.table
    assert tab["log10_freq"].isna().sum() == 3 and tab.loc[7, "log10_freq"] == pytest.approx(3.0)
    assert list(tab.columns) == ["id", "token", "count", "log10_freq", "norm", "seen"]
    with pytest.raises(ValueError, match="ids >= vocab_size"):
        load_counts(csv, 5)


def test_by_frequency_bins() -> None:
    counts = np.array([0, 0] + list(range(1, 11)))
    scores = np.array([9.0, 7.0] + [float(c) for c in range(1, 11)])
    df = by_frequency(torch.from_numpy(scores), counts, bins=5)
    assert list(df["bin"]) == ["unseen", "q1", "q2", "q3", "q4", "q5"]
    assert list(df["n"]) == [2, 2, 2, 2, 2, 2]
    np.testing.assert_allclose(df["mean"], [8.0, 1.5, 3.5, 5.5, 7.5, 9.5])
    assert df.loc[1, "count_min"] == 1 and df.loc[5, "count_max"] == 10
    np.testing.assert_allclose(df["std"], [np.std([9, 7], ddof=1)] + [np.std([1, 2], ddof=1)] * 5)
    ties = by_frequency(np.arange(6.0), np.array([1, 1, 1, 1, 2, 3]), bins=3)
    assert ties["n"].sum() == 6 and "unseen" not in set(ties["bin"])


def test_evolution_values() -> None:
    rng = np.random.default_rng(19)
    w0 = rng.standard_normal((50, 8))
    w1 = 2 * w0
    w2 = w1 + rng.standard_normal((50, 8))
    df = evolution([(20, w2), (0, w0), (10, torch.from_numpy(w1))])
    assert list(df["step"]) == [0, 10, 20]
    assert df["cos_to_init"].iloc[1] == pytest.approx(1.0) and np.isnan(df["cos_to_prev"].iloc[0])
    assert df["norm_change"].iloc[1] == pytest.approx(1.0) and df["dist_to_init"].iloc[1] == pytest.approx(1.0)
    assert df["cos_to_init"].iloc[2] == pytest.approx(cos_rows(w2, w0).mean())
    assert df["cos_to_prev"].iloc[2] == pytest.approx(cos_rows(w2, w1).mean())
    assert df["dist_to_init"].iloc[2] == pytest.approx(np.linalg.norm(w2 - w0) / np.linalg.norm(w0))


def test_summarise_t_interval() -> None:
    v = [0.216, 0.222, 0.219, 0.214, 0.225]
    s = summarise(v)
    lo, hi = student_t.interval(0.95, df=4, loc=np.mean(v), scale=np.std(v, ddof=1) / np.sqrt(5))
    assert (s.n, s.mean, s.std) == (5, pytest.approx(np.mean(v)), pytest.approx(np.std(v, ddof=1)))
    assert s.ci_low == pytest.approx(lo) and s.ci_high == pytest.approx(hi)
    one = summarise([0.3])
    assert one.n == 1 and np.isnan(one.std) and np.isnan(one.ci_low)
    with pytest.raises(ValueError, match="NaN"):
        summarise([0.1, np.nan])
