"""Embedding extraction from saved models (folders, shards, loaded models, run checkpoints) and vocabulary matching."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _embedding_helpers import CORPUS_A, llama, make_tokenizer
from transformers import AutoModelForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from tiebias.align.embeddings import checkpoint_matrices, extract
from tiebias.align.token_stats import evolution
from tiebias.align.tokenizers import match_tokens


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
        else:
            assert not torch.equal(emb.input, emb.output)


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


def test_match_tokens_identical_duplicated_and_disjoint() -> None:
    ia, ib = match_tokens(["x", "y", "x"], ["x", "y", "x"])
    assert ia.tolist() == ib.tolist() == [0, 1, 2]  # one vocabulary: every row, duplicates included
    ia, ib = match_tokens(["x", "y", "x", "z"], ["z", "x", "q"])
    assert ia.tolist() == [0, 3] and ib.tolist() == [1, 0]  # each shared string once, in the first one's order
    with pytest.raises(ValueError, match="no shared tokens between 'a' and 'b'"):
        match_tokens(["x", "y", "z"], ["p", "q", "r"])
