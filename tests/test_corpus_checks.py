"""A user's own corpus: long runs of text without whitespace keep tokenizer training linear.

The embedded corpus gives the same tokenizer and tokens as before.
"""

from __future__ import annotations

import hashlib
import json
import time

from tiebias import data, tokens
from tiebias.runs import Run


def _docs(n: int, tag: str = "doc") -> list[str]:
    return [f"{tag} {i} says a first line.\nAnd {tag} {i} has a second line.\n" for i in range(n)]




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
