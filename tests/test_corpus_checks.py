"""A user's own corpus: bad files named, long runs of text bounded, split names kept, edits noticed.

Each refusal names the file (and line) and leaves nothing behind; the embedded corpus gives the same
tokenizer and tokens as before these checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path

import datasets
import pandas as pd
import pytest

from tiebias.data import checks as corpus_checks
from tiebias.data import corpus as data
from tiebias.data import tokens
from tiebias.run.folder import Run


def _docs(n: int, tag: str = "doc") -> list[str]:
    return [f"{tag} {i} says a first line.\nAnd {tag} {i} has a second line.\n" for i in range(n)]


def _write(folder: Path, names: list[str]) -> None:
    for i, name in enumerate(names):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_docs(1, f"{Path(name).stem}{i}")[0])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- files that are not what they claim ------------------------------------------------------------------
def test_nul_byte_in_txt_names_file_offset_and_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"To be, or not to be\n" * 3 + b"ab\x00cd\n" + b"more text\n" * 40)
    with pytest.raises(ValueError, match=r"file '.*notes\.txt' holds a NUL byte \(offset 62, line 4\): it looks "
                                         r"like a binary file"):
        data.load_corpus(path)
    with pytest.raises(ValueError, match="NUL byte"):
        Run.prepare(tmp_path / "run", corpus=str(path), vocab_size=300)
    assert not (tmp_path / "run").exists()


def test_nul_byte_found_past_the_first_block(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 9 + b"\n" + b"y" * (corpus_checks._BLOCK + 5) + b"\x00")
    with pytest.raises(ValueError, match=rf"offset {corpus_checks._BLOCK + 15}, line 2\)"):
        corpus_checks.check_text_bytes(path)


def test_every_file_is_checked_before_any_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, ["train.txt", "validation.txt"])
    (tmp_path / "test.jsonl").write_bytes(b'{"text": "fine"}\n\x00\x00\n')
    loads: list[object] = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: loads.append(a))
    with pytest.raises(ValueError, match=r"test\.jsonl' holds a NUL byte \(offset 17, line 2\)"):
        data.load_corpus(tmp_path)
    assert loads == []


@pytest.mark.parametrize("lines,where", [
    (['{"text": "a"}', '{"text": "b"', '{"text": "c"}'], r"line 2, column 13: not valid JSON"),
    (['{"text": "a"}', "", '[1, 2]'], r"line 3: a JSON list, not an object"),
    (['{"text": "a"}', '{"text": 5}'], r"line 2: 'text' holds int '5', not text"),
])
def test_malformed_jsonl_line_named(tmp_path: Path, lines: list[str], where: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"source: file '.*rows\.jsonl', {where}.*fix or delete that line") as info:
        data.load_corpus(path, val_fraction=0, test_fraction=0)
    assert info.value.__context__ is None or info.value.__suppress_context__  # no chained traceback


def test_malformed_json_array_named(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text('[{"text": "a"},\n{"text": "b"}\n{"text": "c"}]\n')
    with pytest.raises(ValueError, match=r"rows\.json', line 3, column 1: not valid JSON"):
        data.load_corpus(path, val_fraction=0, test_fraction=0)


def test_unreadable_parquet_named(tmp_path: Path) -> None:
    pd.DataFrame({"text": _docs(4)}).to_parquet(tmp_path / "good.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not a parquet file")
    with pytest.raises(ValueError, match=r"file '.*junk\.parquet' is not a readable parquet file"):
        data.load_corpus(tmp_path)


# -- a long run of text without whitespace --------------------------------------------------------------
def test_long_runs_are_cut_into_pieces_and_other_texts_pass_unchanged() -> None:
    run = "x" * (2 * tokens.MAX_TRAIN_RUN + 500)
    text = f"before it  {run} after it\n"
    pieces = list(tokens._bounded([text, "plain text", run]))
    assert pieces[:5] == ["before it  ", "x" * 1000, "x" * 1000, "x" * 500, " after it\n"]
    assert pieces[5] == "plain text" and "".join(pieces[6:]) == run
    assert max(len(p) for p in pieces) == tokens.MAX_TRAIN_RUN
    ok = "y" * tokens.MAX_TRAIN_RUN
    assert list(tokens._bounded([ok, f"{ok} {ok}"])) == [ok, f"{ok} {ok}"]


def test_embedded_corpus_reaches_the_trainer_unchanged() -> None:
    corpus = data.load_corpus()
    for split in data.SPLITS:
        texts = corpus[split]["text"]
        assert list(tokens._bounded(texts)) == texts


def _sha(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def test_embedded_tokenizer_and_tokens_as_before(prepared_run: Run) -> None:
    """Hashes of the vocabulary-512 run made before long runs were cut (tokenizers 0.23)."""
    model = json.loads(prepared_run.tokenizer().backend_tokenizer.to_str())["model"]
    assert _sha(json.dumps([model["vocab"], model["merges"]], sort_keys=True).encode()) == (
        "fd34a19c882295da0f386889eb0e2d2a4507143be176eb8ef161ad4f774b1229"), "the tokenizer changed"
    want = {"train": "7c09c5c0140dcd96d56e7e800b22ed5ede8896becbd7869e702c258f238f1905",
            "validation": "c3055e5fb89f285137a2965ebf39586b7b230b5d466f79600aec12500e3d4f8b",
            "test": "15e67745a2b308b09064746a172451093e71b504d4f4891db40766a0e5fa0651"}
    got = {s: _sha(prepared_run.tokens(s).numpy().tobytes()) for s in want}
    assert got == want, "the token streams changed"


def test_megabyte_without_whitespace_trains_and_encodes_in_bounded_time() -> None:
    """Measured 0.13 s to train and 0.65 s to encode; before the cut, 180k characters took 49 s to train."""
    line = ("abracadabra" * 100_000)[:1_000_000]
    start = time.perf_counter()
    tok = tokens.train_tokenizer(_docs(20) + [line], vocab_size=400)
    trained = time.perf_counter() - start
    start = time.perf_counter()
    ids = tokens.encode(tok, [line])
    encoded = time.perf_counter() - start
    assert tok.decode(ids.tolist()) == line
    assert trained < 10 and encoded < 10, f"train {trained:.1f} s, encode {encoded:.1f} s: not linear any more"


# -- split names in a folder ----------------------------------------------------------------------------
def test_split_names_are_kept(tmp_path: Path) -> None:
    _write(tmp_path, ["train/a.txt", "train/b.txt", "train/c.txt", "dev.txt", "test-00000-of-00001.txt",
                      "more/valid_2.txt"])
    dd = data.load_corpus(tmp_path)
    assert [len(dd[s]) for s in data.SPLITS] == [3, 2, 1]
    assert all(t.startswith("test-00000-of-00001") for t in dd["test"]["text"])


def test_files_without_a_split_name_are_refused_when_others_have_one(tmp_path: Path) -> None:
    _write(tmp_path, ["val.txt", "test.txt", "more.txt", "extra/notes.txt"])
    with pytest.raises(ValueError, match=r"some files name a split \(test\.txt: test, val\.txt: validation\) and 2 do "
                                         r"not \(extra/notes\.txt, more\.txt\).*train/ folder"):
        data.load_corpus(tmp_path)
    (tmp_path / "more.txt").unlink()
    (tmp_path / "extra" / "notes.txt").unlink()
    with pytest.raises(ValueError, match=r"names splits \['test', 'validation'\] but no train file"):
        data.load_corpus(tmp_path)


def test_a_name_with_two_splits_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, ["train.txt", "train_test_pairs.txt"])
    with pytest.raises(ValueError, match=r"train_test_pairs\.txt'.*names the splits \['test', 'train'\]"):
        data.load_corpus(tmp_path)


def test_single_file_is_one_corpus_whatever_its_name(tmp_path: Path) -> None:
    path = tmp_path / "test.txt"
    path.write_text("".join(_docs(200)))
    dd = data.load_corpus(path)
    assert all(len(dd[s]) == 1 for s in data.SPLITS)
    assert len(dd["train"]["text"][0]) > 0.85 * len(path.read_text())


def test_unnamed_folder_is_split_at_random(tmp_path: Path) -> None:
    _write(tmp_path, [f"doc{i}.txt" for i in range(20)])
    dd = data.load_corpus(tmp_path)
    assert [len(dd[s]) for s in data.SPLITS] == [18, 1, 1]


# -- the corpus edited after a run folder was made ----------------------------------------------------------
VOCAB = 280  # the small corpus below gives 293 tokens: a larger vocab_size is refused
@pytest.fixture
def small_run(tmp_path: Path) -> tuple[Run, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, text in enumerate(_docs(12)):
        (corpus / f"d{i:02d}.txt").write_text(text * 5)
    return Run.prepare(tmp_path / "run", corpus=str(corpus), vocab_size=VOCAB), corpus


def test_edited_corpus_is_refused_and_the_folder_kept(small_run: tuple[Run, Path]) -> None:
    run, corpus = small_run
    recorded = run.config["corpus_fingerprint"]
    assert recorded == data.corpus_fingerprint(corpus) and recorded["files"] == 12
    assert Run.prepare(run.path, corpus=str(corpus), vocab_size=VOCAB).config == run.config  # unchanged: reopens
    with (corpus / "d03.txt").open("a") as handle:
        handle.write("one more line\n")
    before = _snapshot(run.path)
    with pytest.raises(ValueError, match=r"corpus '.*corpus' changed since this folder's tokens were made \(then "
                                         r"12 files, .*fresh run folder.*overwrite=True"):
        Run.prepare(run.path, corpus=str(corpus), vocab_size=VOCAB)
    assert _snapshot(run.path) == before
    rebuilt = Run.prepare(run.path, corpus=str(corpus), vocab_size=VOCAB, overwrite=True)
    assert rebuilt.config["corpus_fingerprint"] == data.corpus_fingerprint(corpus) != recorded


def test_renamed_file_changes_the_fingerprint(tmp_path: Path) -> None:
    _write(tmp_path, ["a.txt", "b.txt"])
    first = data.corpus_fingerprint(tmp_path)
    os.replace(tmp_path / "b.txt", tmp_path / "c.txt")
    assert data.corpus_fingerprint(tmp_path)["sha256"] != first["sha256"]


def test_folder_without_fingerprint_opens_with_a_warning(small_run: tuple[Run, Path]) -> None:
    run, corpus = small_run
    cfg = run.config
    del cfg["corpus_fingerprint"]
    run.config_path.write_text(json.dumps(cfg))
    before = _snapshot(run.path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Run.prepare(run.path, corpus=str(corpus), vocab_size=VOCAB)
    assert any("records no fingerprint" in str(w.message) for w in caught)
    assert _snapshot(run.path) == before


def test_embedded_fingerprint_is_recorded_and_cheap(prepared_run: Run) -> None:
    start = time.perf_counter()
    now = data.corpus_fingerprint("shakespeare")
    assert time.perf_counter() - start < 1.0  # measured 3 ms (2 MB)
    assert prepared_run.config["corpus_fingerprint"] == now == data.corpus_fingerprint(None)


def test_hub_corpus_fingerprinted_by_its_texts() -> None:
    loaded = datasets.DatasetDict({s: datasets.Dataset.from_dict({"text": [f"{s} text"]}) for s in data.SPLITS})
    assert data.corpus_fingerprint("user/some-corpus") is None  # reopening: not read again
    first = data.corpus_fingerprint("user/some-corpus", loaded)
    assert first["hub"] == "user/some-corpus" and first["documents"] == 3
    loaded["test"] = datasets.Dataset.from_dict({"text": ["test text, revised"]})
    later = data.corpus_fingerprint("user/some-corpus", loaded)
    with pytest.raises(ValueError, match=r"changed since.*then 3 documents"):
        corpus_checks.check_unchanged(Path("r"), {"corpus": "user/some-corpus", "corpus_fingerprint": first}, later)


def test_damaged_fingerprint_is_named() -> None:
    now = {"sha256": "ab", "files": 1, "bytes": 2}
    with pytest.raises(ValueError, match="config.json has corpus_fingerprint 'x', not a fingerprint"):
        corpus_checks.check_unchanged(Path("r"), {"corpus": "c", "corpus_fingerprint": "x"}, now)


# -- a corpus too small for what is asked -----------------------------------------------------------------------
def test_vocabulary_the_corpus_cannot_reach_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, text in enumerate(_docs(12)):
        (corpus / f"d{i:02d}.txt").write_text(text * 5)
    reached = len(tokens.train_tokenizer(data.load_corpus(corpus)["train"]["text"], vocab_size=5000))
    assert reached < 5000
    with pytest.raises(ValueError, match=rf"^vocab_size: 5000 is more than corpus '.*corpus' gives: byte-level BPE "
                                         rf"found {reached} tokens .*give vocab_size={reached} or less"):
        Run.prepare(tmp_path / "run", corpus=str(corpus), vocab_size=5000)
    assert not (tmp_path / "run").exists()
    run = Run.prepare(tmp_path / "run", corpus=str(corpus), vocab_size=reached)  # the size it names works
    assert run.config["vocab_size"] == run.config["tokenizer_size"] == reached == len(run.tokenizer())


def test_one_line_corpus_advice_names_what_exists(tmp_path: Path) -> None:
    path = tmp_path / "one.txt"
    path.write_text("To be, or not to be, that is the question.\n")
    with pytest.raises(ValueError, match=r"too small to split \(1 document\(s\), 43 characters\): \['validation', "
                                         r"'test'\] would be empty \(.*\); .*train, validation and test") as e:
        Run.prepare(tmp_path / "run", corpus=str(path), vocab_size=300)
    assert "val_fraction" not in str(e.value) and "test_fraction" not in str(e.value)
    assert not (tmp_path / "run").exists()
    splits = tmp_path / "splits"  # what it advises works, even one line each
    splits.mkdir()
    for name in ("train", "validation", "test"):
        (splits / f"{name}.txt").write_text(f"One line of {name} text.\n")
    assert [len(data.load_corpus(splits)[s]) for s in data.SPLITS] == [1, 1, 1]


# -- a corpus path is taken literally -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "decoy"), [("g[1]", "g1"), ("texts [v2]", "texts v"), ("a*", "ab"),
                                             ("$HOME", None)])
def test_corpus_path_is_read_literally_and_fingerprinted_as_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, decoy: str | None) -> None:
    """A folder name with glob characters or a ``$VARIABLE`` is that folder: no other folder is read in its place."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for folder, tag in ((tmp_path / name, "meant"), (tmp_path / (decoy or "home"), "decoy")):
        for split in data.SPLITS:
            (folder / f"{split}.txt").parent.mkdir(parents=True, exist_ok=True)
            (folder / f"{split}.txt").write_text(f"{tag} {split} text.\nA second line.\n")
    meant = tmp_path / name
    dd = data.load_corpus(str(meant))
    texts = [t for s in data.SPLITS for t in dd[s]["text"]]
    assert len(texts) == 3 and all(t.startswith("meant ") for t in texts), texts
    files = sorted(meant.iterdir())
    assert data.corpus_fingerprint(str(meant)) == corpus_checks.fingerprint_files(files, meant)
    one = data.load_corpus([str(meant / f"{s}.txt") for s in data.SPLITS])
    assert all(t.startswith("meant ") for s in data.SPLITS for t in one[s]["text"])
