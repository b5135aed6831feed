"""Config-first checks for external models: wrong or swapped pairs, headless families, memory and depth."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from _families import corpus_tokenizer, save_tiny, tiny_config
from _untrusted import save_hostile
from safetensors.torch import load_file

from tiebias.align import comparisons, embeddings
from tiebias.models import sources
from tiebias.models.anatomy import TyingError, is_tied, same_matrix
from tiebias.run.files import DamagedFileError, UnsafeFileError


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny tied and untied OLMo (2 layers) and a 3-layer untied one, each with a corpus tokenizer."""
    root = tmp_path_factory.mktemp("sources")
    tok = corpus_tokenizer()
    return {
        "tied": save_tiny("olmo", True, root / "tied", len(tok), seed=0, tokenizer=tok),
        "untied": save_tiny("olmo", False, root / "untied", len(tok), seed=1, tokenizer=tok),
        "deep": save_tiny("olmo", False, root / "deep", len(tok), seed=2, tokenizer=tok, num_hidden_layers=3),
    }


@pytest.fixture
def no_weights(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record (and refuse) every weight load: AutoModelForCausalLM.from_pretrained and embeddings.extract."""
    calls: list[str] = []

    def refuse(*args, **kwargs):
        calls.append(str(args[-1] if args else kwargs))
        raise AssertionError("weights were loaded before the config check")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(embeddings, "extract", refuse)
    return calls


def test_swapped_pair_refused_before_weights_load(pair, no_weights) -> None:
    swapped = {"tied": pair["untied"], "untied": pair["tied"]}
    with pytest.raises(ValueError, match=r"tied_source: '.*untied' is untied \(its config has "
                                         r"tie_word_embeddings=False, olmo\).*swapped"):
        sources.load_models(swapped)
    with pytest.raises(ValueError, match=r"tied_source: .* is untied"):
        comparisons.load_sources(pair["untied"], pair["tied"])
    with pytest.raises(ValueError, match=r"untied_source: '.*tied' is tied \(its config has tie_word_embeddings=True"):
        sources.load_models({"tied": pair["tied"], "untied": pair["tied"]})
    with pytest.raises(ValueError, match=r"untied_source: .* is tied"):
        comparisons.load_sources(pair["tied"], pair["tied"])
    assert no_weights == []


def test_family_without_causal_lm_head_refused(tmp_path: Path, pair, no_weights) -> None:
    t5 = tmp_path / "t5"
    transformers.T5Config(vocab_size=300, d_model=32, num_layers=1, num_heads=2, d_ff=64).save_pretrained(t5)
    with pytest.raises(ValueError, match=r"untied_source: '.*t5' is a 't5' model \(T5Config\) with no causal-LM head"):
        sources.load_models({"tied": pair["tied"], "untied": t5})
    with pytest.raises(ValueError, match="untied_source: .* no causal-LM head"):
        comparisons.load_sources(pair["tied"], t5)
    with pytest.raises(ValueError, match=r"tied_source: '.*empty' is a folder without config.json"):
        (tmp_path / "empty").mkdir()
        sources.load_models({"tied": tmp_path / "empty", "untied": pair["untied"]})
    with pytest.raises(ValueError, match="untied_source: missing"):
        sources.load_models({"tied": pair["tied"], "untied": None})
    assert no_weights == []


def test_family_the_lens_cannot_follow_refused_from_config(tmp_path: Path, pair, no_weights) -> None:
    """Gemma2 with logit soft-capping: the lens study refuses it from the config; alignment (02) does not need it."""
    capped = tmp_path / "gemma2"
    tiny_config("gemma2", False, 300, final_logit_softcapping=30.0).save_pretrained(capped)
    with pytest.raises(ValueError, match=r"untied_source: '.*gemma2': model_type='gemma2' .*final_logit_softcapping"):
        sources.load_models({"tied": pair["tied"], "untied": capped})
    info = sources.check_sources({"untied": capped}, need="embeddings")["untied"]
    assert info.model_type == "gemma2" and not info.tied
    assert no_weights == []


def test_memory_estimate_matches_the_loaded_model(pair) -> None:
    info = sources.inspect(pair["untied"], "untied")
    model = transformers.AutoModelForCausalLM.from_pretrained(pair["untied"], dtype=torch.float32)
    n = sum(p.numel() for p in model.parameters())
    assert info.n_params == n and info.num_hidden_layers == 2 and info.local_safetensors
    assert sources.estimate_bytes(info) == 4 * n
    assert sources.estimate_bytes(info, torch.bfloat16) == 2 * n
    emb = model.get_input_embeddings().weight
    assert sources.estimate_bytes(info, need="embeddings") == 2 * emb.numel() * 4  # untied: two matrices
    tied = sources.inspect(pair["tied"], "tied")
    assert tied.tied and sources.estimate_bytes(tied, need="embeddings") == emb.numel() * 4
    d = info.hidden_size
    assert sources.estimate_bytes(info, lens=True) == 4 * n + 4 * 2 * d * (d + 1) * 4


def test_too_large_for_free_memory_refused_before_load(pair, no_weights, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "free_memory", lambda device="cpu": 10_000)
    with pytest.raises(ValueError, match=r"tied_source, untied_source: loading needs about .* GiB \(tied_source "
                                         r"'.*tied' .*\) but only 0\.00 GiB is free on cpu"):
        sources.load_models({"tied": pair["tied"], "untied": pair["untied"]})
    with pytest.raises(ValueError, match="but only 0.00 GiB is free"):
        comparisons.load_sources(pair["tied"], pair["untied"])
    assert no_weights == []


def test_pair_loads_and_different_depths_warn(pair) -> None:
    models = sources.load_models({"tied": pair["tied"], "untied": pair["untied"]})
    model, tok = models["tied"]
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert len(tok) == model.config.vocab_size and not model.training
    with pytest.warns(UserWarning, match=r"tied_source '.*tied' has 2 layers and untied_source '.*deep' has 3 layers: "
                                         r"layers are compared on relative depth"):
        deep = sources.load_models({"tied": pair["tied"], "untied": pair["deep"]})
    assert deep["untied"][0].config.num_hidden_layers == 3


def test_tokenizer_larger_than_the_head_refused(tmp_path: Path, pair, no_weights) -> None:
    small = save_tiny("olmo", False, tmp_path / "small", 280, tokenizer=corpus_tokenizer())
    with pytest.raises(ValueError, match=r"untied_source: the tokenizer of '.*small' has 320 tokens but the model's "
                                         r"vocabulary only 280"):
        sources.load_models({"tied": pair["tied"], "untied": small})
    assert no_weights == []


@pytest.fixture(scope="module")
def posing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random Llamas, tied and untied, and three whose config.json does not say what their weights are:
    ``untied_as_tied`` (an untied model's weights, with their own lm_head, under a tied config), ``tied_as_untied``
    (a tied model's weights, with no lm_head, under an untied config) and ``equal_as_untied`` (an untied config whose
    lm_head equals the input embedding)."""
    root = tmp_path_factory.mktemp("posing")
    tok = corpus_tokenizer()
    out = {name: save_tiny("llama", tied, root / name, len(tok), seed=3, tokenizer=tok)
           for name, tied in (("tied", True), ("untied", False), ("untied_as_tied", False), ("tied_as_untied", True))}
    for name in ("untied_as_tied", "tied_as_untied"):
        cfg = json.loads((out[name] / "config.json").read_text())
        cfg["tie_word_embeddings"] = not cfg["tie_word_embeddings"]
        (out[name] / "config.json").write_text(json.dumps(cfg))
    model = transformers.AutoModelForCausalLM.from_pretrained(out["untied"], dtype=torch.float32)
    model.get_output_embeddings().weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.save_pretrained(root / "equal_as_untied")
    tok.save_pretrained(root / "equal_as_untied")
    out["equal_as_untied"] = root / "equal_as_untied"
    return out


def test_tied_config_over_an_output_matrix_of_its_own_refused(posing) -> None:
    """transformers loads such a model untied (with a warning): the loaded weights, not the config, say so."""
    loaded = transformers.AutoModelForCausalLM.from_pretrained(posing["untied_as_tied"], dtype=torch.float32)
    assert loaded.config.tie_word_embeddings
    assert not same_matrix(loaded.get_input_embeddings().weight, loaded.get_output_embeddings().weight)
    assert sources.check_sources({"tied": posing["untied_as_tied"]})["tied"].tied  # the config alone passes
    says = (r"tied_source: '.*untied_as_tied': its config.json says tie_word_embeddings=True, but its weights hold an "
            r"output matrix of their own that differs from the input embedding .*correct tie_word_embeddings")
    with pytest.raises(TyingError, match=says):
        sources.load_models({"tied": posing["untied_as_tied"], "untied": posing["untied"]})
    with pytest.raises(TyingError, match=says):
        comparisons.load_sources(posing["untied_as_tied"], posing["untied"])
    folder = posing["untied_as_tied"]
    with pytest.raises(TyingError, match=rf"^{folder}: its config.json says tie_word_embeddings=True"):
        embeddings.extract(folder)


@pytest.mark.parametrize("name,says", [
    ("tied_as_untied", "says tie_word_embeddings=False, but its weights hold no output matrix"),
    ("equal_as_untied", "says tie_word_embeddings=False, but its output matrix equals its input embedding"),
])
def test_untied_config_over_one_matrix_refused(posing, name: str, says: str) -> None:
    with pytest.raises(TyingError, match=rf"untied_source: '.*{name}': its config.json {says}"):
        sources.load_models({"tied": posing["tied"], "untied": posing[name]})
    with pytest.raises(TyingError, match=rf"untied_source: '.*{name}': its config.json {says}"):
        comparisons.load_sources(posing["tied"], posing[name])


def test_a_consistent_llama_pair_loads(posing) -> None:
    models = sources.load_models({"tied": posing["tied"], "untied": posing["untied"]})
    assert is_tied(models["tied"][0]) and not is_tied(models["untied"][0])
    pair = comparisons.load_sources(posing["tied"], posing["untied"])[0]
    assert pair["tied"].tied and not pair["untied"].tied


# -- weights files an external model cannot be loaded from: named, nothing run -----------------------------------
def _with_shape(src: Path, dst: Path, shape: list[int]) -> Path:
    """A copy of a model folder whose model.safetensors header gives its first tensor ``shape`` (offsets kept)."""
    shutil.copytree(src, dst)
    path = dst / "model.safetensors"
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"] = shape
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + n:])
    return dst


def test_safetensors_shape_bomb_named_with_its_file(posing, tmp_path: Path) -> None:
    """A header whose shape cannot be the tensor's bytes: refused naming the file and what to do, nothing allocated."""
    bomb = _with_shape(posing["tied"], tmp_path / "bomb", [10**9, 10**9])
    file = str(bomb / "model.safetensors")
    for call in (lambda: sources.load_models({"tied": bomb, "untied": posing["untied"]}),
                 lambda: comparisons.load_sources(bomb, posing["untied"]),
                 lambda: embeddings.extract(bomb)):
        with pytest.raises(DamagedFileError) as info:
            call()
        msg = str(info.value)
        assert file in msg and "damaged" in msg and "download or copy it again" in msg, msg


def test_pickled_weights_refused_without_advice_to_run_them(posing, tmp_path: Path) -> None:
    """A pytorch_model.bin that refers to Python objects: the kit's own message, never torch's weights_only=False."""
    folder = tmp_path / "pickled"
    shutil.copytree(posing["tied"], folder)
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    save_hostile(folder / "pytorch_model.bin", marker, **state)
    for call in (lambda: sources.load_models({"tied": folder, "untied": posing["untied"]}),
                 lambda: comparisons.load_sources(folder, posing["untied"]),
                 lambda: embeddings.extract(folder)):
        with pytest.raises(UnsafeFileError) as info:
            call()
        msg = str(info.value)
        assert str(folder / "pytorch_model.bin") in msg and "safetensors" in msg and "nothing in it was run" in msg
        assert "weights_only" not in msg, msg
    assert not marker.exists()
