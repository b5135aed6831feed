"""Tests for tiebias.data.corpus: corpus loading and splits, tokenizer, token statistics, unigram baseline."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from tiebias.config.corpus import looks_like_hub_name
from tiebias.data import corpus as data
from tiebias.data import tokens

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus():
    """The embedded corpus, loaded once."""
    return data.load_corpus()


@pytest.fixture(scope="module")
def sample(corpus) -> list[str]:
    """A few training passages, small enough for fast tokenizer training."""
    texts = corpus["train"]["text"]
    return [t[:20_000] for t in texts[:4]]


@pytest.fixture(scope="module")
def tok(sample):
    """A small tokenizer trained on the sample."""
    return tokens.train_tokenizer(sample, vocab_size=400)


# ---------------------------------------------------------------- embedded corpus


def test_embedded_corpus_has_three_disjoint_splits(corpus):
    assert set(corpus) == set(data.SPLITS)
    titles = {s: set(corpus[s]["title"]) for s in data.SPLITS}
    assert all(titles.values())
    assert not titles["train"] & titles["validation"]
    assert not titles["train"] & titles["test"]
    assert not titles["validation"] & titles["test"]
    assert len(corpus["train"]) > 5 * (len(corpus["validation"]) + len(corpus["test"])) / 2
    for split in data.SPLITS:
        assert "text" in corpus[split].column_names
        assert all(len(t) > 1000 for t in corpus[split]["text"])
        assert not any("Project Gutenberg" in t for t in corpus[split]["text"])


def test_embedded_corpus_matches_split_file(corpus):
    plan = json.loads((REPO / "data" / "splits.json").read_text())
    for split in data.SPLITS:
        assert corpus[split]["title"] == plan[split]
    assert data.load_corpus("shakespeare")["test"]["title"] == plan["test"]


def test_data_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path))
    assert data.data_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match=data.DATA_ENV_VAR):
        data.load_corpus()


# ---------------------------------------------------------------- local files


def _docs(n: int) -> list[str]:
    return [f"Document {i}.\nIt has a second line, number {i}.\n" for i in range(n)]


def test_txt_folder_one_document_per_file(tmp_path):
    for i, text in enumerate(_docs(10)):
        sub = tmp_path / ("a" if i % 2 else "b")
        sub.mkdir(exist_ok=True)
        (sub / f"doc{i:02d}.txt").write_text(text)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "skip.txt").write_text("never loaded")
    dd = data.load_corpus(tmp_path, val_fraction=0.2, test_fraction=0.1, seed=3)
    sizes = {s: len(dd[s]) for s in data.SPLITS}
    assert sizes == {"train": 7, "validation": 2, "test": 1}
    everything = [t for s in data.SPLITS for t in dd[s]["text"]]
    assert sorted(everything) == sorted(_docs(10))
    again = data.load_corpus(str(tmp_path), val_fraction=0.2, test_fraction=0.1, seed=3)
    assert again["validation"]["text"] == dd["validation"]["text"]


def test_three_documents_give_one_each(tmp_path):
    files = []
    for i, text in enumerate(_docs(3)):
        files.append(tmp_path / f"d{i}.txt")
        files[-1].write_text(text)
    dd = data.load_corpus(files)
    assert [len(dd[s]) for s in data.SPLITS] == [1, 1, 1]


def test_single_document_split_by_character_ranges(tmp_path):
    lines = [f"line {i} of a long single document" for i in range(2000)]
    text = "\n".join(lines) + "\n"
    path = tmp_path / "one.txt"
    path.write_text(text)
    dd = data.load_corpus(path)
    parts = [dd[s]["text"][0] for s in data.SPLITS]
    assert "".join(parts) == text
    assert 0.85 < len(parts[0]) / len(text) < 0.95
    assert all(p.endswith("\n") for p in parts)


def test_jsonl_with_text_column(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [{"id": i, "body": t} for i, t in enumerate(_docs(20))] + [{"id": 99, "body": "   "}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dd = data.load_corpus(path, text_column="body")
    assert sum(len(dd[s]) for s in data.SPLITS) == 20
    assert dd["train"].column_names == ["text"]
    assert len(dd["validation"]) == 1 and len(dd["test"]) == 1


def test_parquet_with_named_splits(tmp_path):
    for split, n in (("train", 6), ("validation", 2), ("test", 3)):
        frame = pd.DataFrame({"text": [f"{split} {t}" for t in _docs(n)]})
        frame.to_parquet(tmp_path / f"{split}.parquet")
    dd = data.load_corpus(tmp_path)
    assert [len(dd[s]) for s in data.SPLITS] == [6, 2, 3]
    assert all(t.startswith("test ") for t in dd["test"]["text"])


def test_missing_text_column_names_parameter(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"content": "hello"}) + "\n")
    with pytest.raises(ValueError, match="text_column.*'text'.*content"):
        data.load_corpus(path)


@pytest.mark.parametrize("bad", ["/no/such/dir", "./missing", "~/nope/corpus", "typo.txt", "a/b/c"])
def test_bad_path_names_parameter_and_options(bad):
    with pytest.raises(ValueError, match="source: path") as info:
        data.load_corpus(bad)
    message = str(info.value)
    assert bad in message and "shakespeare" in message and "hub dataset" in message


def test_hub_name_detection():
    assert looks_like_hub_name("wikitext:wikitext-2-raw-v1")
    assert looks_like_hub_name("user/name")
    for path_like in ("./x", "/x", "~x", "x/y/z", "x.jsonl", "x\\y", "user/name.parquet"):
        assert not looks_like_hub_name(path_like)


def test_empty_corpus_and_bad_fractions(tmp_path):
    (tmp_path / "e.txt").write_text("  \n")
    with pytest.raises(ValueError, match="source: corpus .* no non-empty documents"):
        data.load_corpus(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="source: folder .* holds no"):
        data.load_corpus(empty)
    with pytest.raises(ValueError, match="val_fraction"):
        data.load_corpus(tmp_path, val_fraction=1.5)
    csv_file = tmp_path / "x.csv"
    csv_file.write_text("text\nhello\n")
    with pytest.raises(ValueError, match="source: file .* extension '.csv'"):
        data.load_corpus([csv_file])


# ---------------------------------------------------------------- tokenizer


def test_vocab_size_too_small_names_parameter(sample):
    with pytest.raises(ValueError, match=r"vocab_size: 200 .* at least 257"):
        tokens.train_tokenizer(sample, vocab_size=200)


def test_tokenizer_round_trip_and_specials(tok, corpus):
    assert len(tok) == 400
    assert tok.eos_token == tok.bos_token == tok.pad_token == tok.unk_token == tokens.EOS_TOKEN
    unseen = corpus["test"]["text"][0][:3000] + "  naïve — 東京 \t\n  end"
    ids = tok(unseen, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == unseen
    assert tokens.EOS_TOKEN not in tok.decode(ids)


def test_tokenizer_is_deterministic(sample, tok):
    again = tokens.train_tokenizer(sample, vocab_size=400)
    assert again.get_vocab() == tok.get_vocab()
    assert again.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()


def test_tokenizer_save_and_reload(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "To be, or not to be: that is the question."
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded.eos_token_id == tok.eos_token_id
    assert loaded.decode(loaded(text)["input_ids"]) == text


# ---------------------------------------------------------------- frequencies, stream, baseline


def test_frequencies_sum_to_token_count(tok, sample):
    counts = tokens.token_frequencies(tok, sample)
    assert counts.dtype == np.int64 and counts.shape == (len(tok),)
    n_tokens = sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in sample)
    assert counts.sum() == n_tokens


def test_encode_puts_eos_between_documents(tok):
    docs = ["Good morrow.", "", "Farewell, sweet prince."]
    stream = tokens.encode(tok, docs)
    assert stream.dtype == torch.long and stream.ndim == 1
    eos = tok.eos_token_id
    assert (stream == eos).sum().item() == len(docs) - 1
    pieces = [tok(d, add_special_tokens=False)["input_ids"] for d in docs]
    expected = pieces[0] + [eos] + pieces[1] + [eos] + pieces[2]
    assert stream.tolist() == expected
    assert tokens.encode(tok, []).numel() == 0


def test_frequencies_csv_round_trip(tok, sample, tmp_path):
    counts = tokens.token_frequencies(tok, sample)
    path = tokens.save_frequencies(tmp_path / "freq" / "train.csv", tok, counts)
    frame = pd.read_csv(path, keep_default_na=False)
    assert list(frame.columns) == ["id", "token", "count"]
    assert frame["token"].iloc[0] == tokens.EOS_TOKEN
    np.testing.assert_array_equal(tokens.load_frequencies(path), counts)


def test_unigram_loss_uniform_is_log_vocab():
    vocab = 1000
    counts = np.full(vocab, 50)
    ids = torch.randint(0, vocab, (5000,), generator=torch.Generator().manual_seed(0))
    assert tokens.unigram_loss(counts, ids) == pytest.approx(math.log(vocab))


def test_unigram_loss_rewards_frequent_tokens_and_checks_range(tok, sample, corpus):
    counts = tokens.token_frequencies(tok, sample)
    val = tokens.encode(tok, [corpus["validation"]["text"][0][:5000]])
    loss = tokens.unigram_loss(counts, val)
    assert 0 < loss < math.log(len(tok))
    with pytest.raises(ValueError, match="val_ids"):
        tokens.unigram_loss(counts, [len(tok)])


# ---------------------------------------------------------------- corpus builder


def test_gutenberg_boilerplate_is_stripped():
    spec = importlib.util.spec_from_file_location("make_corpus", REPO / "scripts" / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw = (
        "The Project Gutenberg EBook of Hamlet\r\nlicence words\r\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\n\r\nACT I.\r\nWho's there?\r\n"
        "<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS IS COPYRIGHT>>\r\nNay, answer me.\r\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\nmore licence\r\n"
    )
    text, found = module.strip_gutenberg(raw)
    assert found and text == "ACT I.\nWho's there?\nNay, answer me.\n"
    assert module.strip_gutenberg("ACT I.\n") == ("ACT I.\n", False)
    assert module.title_of("henry_iv_part_1_gut.txt") == "henry_iv_part_1"
