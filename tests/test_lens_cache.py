"""Tests for tiebias.lens.cache: a lens trained through the activation cache equals one trained on the model, bit for bit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import transformers as tr
from _families import tiny_config

from tiebias.config.lens import LensFit, LensSettings
from tiebias.lens import cache as C
from tiebias.lens import fit as F
from tiebias.lens import ladder as lens_ladder
from tiebias.lens import lenses as L

VOCAB = 300
SEQ = 32
FAMILIES = [("llama", True), ("llama", False), ("gpt_neox", True), ("gpt_neox", False)]
FIT = LensFit(seq_len=SEQ, tokens_per_step=4 * SEQ, warmup_steps=1, seed=1)

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(family: str, tied: bool, seed: int = 0) -> tr.PreTrainedModel:
    """A random tiny model (hidden 32, 2 layers), frozen."""
    torch.manual_seed(seed)
    return tr.AutoModelForCausalLM.from_config(tiny_config(family, tied, VOCAB)).eval().requires_grad_(False)


def _tokens(n_seq: int, seed: int = 0) -> torch.Tensor:
    """A random token stream of ``n_seq`` sequences plus a few tokens (a tail the lens drops)."""
    return torch.randint(0, VOCAB, (n_seq * SEQ + 5,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def models() -> dict[tuple[str, bool], tr.PreTrainedModel]:
    return {key: _model(*key) for key in FAMILIES}


def _assert_same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name


def _both(model: tr.PreTrainedModel, tokens: torch.Tensor, **kw) -> None:
    """Train with and without a cache; the lenses and their logs must be identical."""
    settings = {k: kw.get(k, v) for k, v in dict(seq_len=SEQ, tokens_per_step=4 * SEQ, batch_size=8).items()}
    cache = C.build_cache(model, tokens, **settings)
    assert cache is not None
    logs: tuple[list, list] = ([], [])
    fit = FIT.replace(**kw)
    plain = F.train_lens(model, tokens, fit, log=logs[0], progress=False)
    cached = F.train_lens(model, tokens, fit, log=logs[1], cache=cache, progress=False)
    _assert_same(plain, cached)
    assert logs[0] == logs[1]
    # the cached run really read the cache: other activations, another lens
    other = F.train_lens(model, tokens, fit, cache=replace(cache, hidden=[h * 1.01 for h in cache.hidden]),
                         progress=False)
    assert not torch.equal(other.layer_translators[0].weight, plain.layer_translators[0].weight)


@pytest.mark.parametrize("key", FAMILIES, ids=lambda k: f"{k[0]}-{'tied' if k[1] else 'untied'}")
def test_cache_gives_the_same_lens(models, key) -> None:
    """30 sequences in micro-batches of 4: seven chunks and a tail chunk of the last four."""
    _both(models[key], _tokens(30), steps=10)


def test_cache_with_several_micro_batches_per_step(models) -> None:
    _both(models[("gpt_neox", True)], _tokens(30), steps=6, batch_size=2, tokens_per_step=8 * SEQ)


def test_continued_training_through_cache_matches(models, tmp_path: Path) -> None:
    """Chained calls sharing one cache give the same lens as chained calls on the model, also through disk."""
    model, tokens = models[("llama", True)], _tokens(30)
    cache = C.build_cache(model, tokens, seq_len=SEQ, tokens_per_step=4 * SEQ)
    lenses = []
    for use in (None, cache):
        state: dict = {}
        log: list = []
        lens = F.train_lens(model, tokens, FIT.replace(steps=3), state=state, cache=use, progress=False)
        L.save_lens(lens, tmp_path / f"lens{use is None}")
        torch.save(state, tmp_path / f"state{use is None}.pt")
        lens = L.load_lens(model, tmp_path / f"lens{use is None}")
        state = torch.load(tmp_path / f"state{use is None}.pt", weights_only=True)
        lens = F.train_lens(model, tokens, FIT.replace(steps=4), lens=lens, state=state, cache=use, log=log,
                            progress=False)
        assert state["steps_done"] == 7
        lenses.append((lens, log))
    _assert_same(lenses[0][0], lenses[1][0])
    assert lenses[0][1] == lenses[1][1]


def test_tail_chunk_has_the_training_shape(models) -> None:
    for n, chunk in ((30, 4), (8, 4), (3, 4), (1, 1)):
        chunks = C._chunks(n, chunk)
        assert all(len(idx) == chunk and int(idx.max()) < n for idx, _ in chunks)
        stored = torch.cat([idx[rows] for idx, rows in chunks])
        assert torch.equal(stored, torch.arange(n))  # every sequence stored once
    assert torch.equal(C._chunks(30, 4)[-1][0], torch.arange(26, 30))
    # Fewer sequences than a micro-batch: a step holds some sequence twice; still the same lens.
    _both(models[("llama", False)], _tokens(3), steps=4)


def test_cap_falls_back_to_the_model(models, tmp_path: Path) -> None:
    model, tokens = models[("gpt_neox", False)], _tokens(30)
    full = C.build_cache(model, tokens, seq_len=SEQ, tokens_per_step=4 * SEQ)
    need = sum(t.numel() * t.element_size() for t in (*full.hidden, *full.stats))
    assert C.build_cache(model, tokens, seq_len=SEQ, tokens_per_step=4 * SEQ, max_bytes=need) is not None
    assert C.build_cache(model, tokens, seq_len=SEQ, tokens_per_step=4 * SEQ, max_bytes=need - 1) is None
    # uneven micro-batches (3 sequences a step in micro-batches of 2): no cache
    assert C.build_cache(model, tokens, seq_len=SEQ, tokens_per_step=3 * SEQ, batch_size=2) is None
    with pytest.raises(ValueError, match="max_bytes: "):
        C.build_cache(model, tokens, seq_len=SEQ, max_bytes=-1)
    # The ladder trains the same lenses with and without its cache.
    lens = LensSettings(steps=3, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1, 2))
    a = lens_ladder.train_ladder(model, tokens, tmp_path / "a", lens, progress=False)
    b = lens_ladder.train_ladder(model, tokens, tmp_path / "b", lens, max_cache_bytes=0, progress=False)
    for budget in (1, 2):
        _assert_same(a[budget], b[budget])


def test_ladder_builds_one_cache_and_only_when_training(models, tmp_path: Path, monkeypatch) -> None:
    model, tokens = models[("llama", True)], _tokens(30)
    built: list = []
    real = C.build_cache

    def counting(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(C, "build_cache", counting)
    lens = LensSettings(steps=3, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1, 2, 4))
    lens_ladder.train_ladder(model, tokens, tmp_path, lens, progress=False)
    assert len(built) == 1 and built[0] is not None
    lens_ladder.train_ladder(model, tokens, tmp_path, lens, progress=False)  # every rung finished: nothing to train
    assert len(built) == 1


def test_batch_dependent_activations_get_no_cache(models, monkeypatch) -> None:
    """Where a sequence's activations depend on its batch mates, the cache would change the lens: declined."""
    real = C.frozen_forward

    def mixing(model, target, x):
        hs, st = real(model, target, x)
        return tuple(h + 1e-3 * h.mean(0, keepdim=True) for h in hs), st

    monkeypatch.setattr(C, "frozen_forward", mixing)
    with pytest.warns(UserWarning, match="cache declined"):
        assert C.build_cache(models[("llama", True)], _tokens(30), seq_len=SEQ, tokens_per_step=4 * SEQ) is None


def test_mismatched_cache_is_refused(models) -> None:
    model, tokens = models[("llama", True)], _tokens(30)
    cache = C.build_cache(model, tokens, seq_len=SEQ, tokens_per_step=4 * SEQ)
    with pytest.raises(ValueError, match="model: its weights differ"):
        F.train_lens(_model("llama", True, seed=1), tokens, FIT.replace(steps=2), cache=cache, progress=False)
    with pytest.raises(ValueError, match="tokens: 29 sequences"):
        F.train_lens(model, tokens[: 29 * SEQ], FIT.replace(steps=2), cache=cache, progress=False)
    with pytest.raises(ValueError, match="tokens: differ"):
        F.train_lens(model, _tokens(30, seed=1), FIT.replace(steps=2), cache=cache, progress=False)
    with pytest.raises(ValueError, match="seq_len: 16, but the cache holds sequences of seq_len=32"):
        F.train_lens(model, tokens, FIT.replace(steps=2, seq_len=16, tokens_per_step=64), cache=cache, progress=False)
    with pytest.raises(ValueError, match="batch_size: .*micro-batches of 2 sequences.*of 4"):
        F.train_lens(model, tokens, FIT.replace(steps=2, batch_size=2), cache=cache, progress=False)
    with pytest.raises(ValueError, match="batch_size: .*uneven micro-batches"):
        F.train_lens(model, tokens, FIT.replace(steps=2, batch_size=3), cache=cache, progress=False)


def test_short_ladder_over_a_long_stream_builds_no_cache(models, tmp_path: Path, monkeypatch) -> None:
    """Building costs one forward per sequence: a ladder drawing fewer than MIN_VISITS per sequence skips it."""
    model, tokens = models[("llama", True)], _tokens(30)
    built: list = []
    monkeypatch.setattr(C, "build_cache", lambda *a, **k: built.append(1))
    lens = LensSettings(steps=2, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1, 2))
    lens_ladder.train_ladder(model, tokens, tmp_path, lens, progress=False)  # 2 x 2 x 4 = 16 draws from 30 sequences
    assert built == []
    more = LensSettings(steps=6, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1, 2))  # 48 draws >= 1.5 x 30: built
    lens_ladder.train_ladder(model, tokens, tmp_path / "more", more, progress=False)
    assert built == [1]


def test_bad_cache_and_stop_settings_name_the_parameter(models, tmp_path: Path) -> None:
    model, tokens = models[("llama", True)], _tokens(30)
    for bad in (-1, 1.5, True, "1GiB"):
        with pytest.raises(ValueError, match="max_cache_bytes"):
            lens_ladder.train_ladder(model, tokens, tmp_path / "l", LensSettings(steps=2, tokens_per_step=4 * SEQ,
                                     seq_len=SEQ), max_cache_bytes=bad, progress=False)
    assert not (tmp_path / "l").exists()
    with pytest.raises(ValueError, match="should_stop"):
        F.train_lens(model, tokens, FIT.replace(steps=2), should_stop=5, progress=False)
