"""The byte-level BPE tokenizer (``tokenizers``) trained on the training split, the token stream a model trains on,
token frequencies and the unigram baseline loss a model must beat."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tiebias.config.checks import is_int
from tiebias.config.corpus import BYTE_ALPHABET_SIZE, EOS_TOKEN, SPECIAL_TOKENS
from tiebias.config.training import DEFAULT_PROFILE
from tiebias.data.bigram import as_ids
from tiebias.system.atomic import atomic_path

_ENCODE_BATCH = 256  # documents per batched tokenizer call
# Longest run of non-whitespace the BPE trainer sees as one piece: its cost grows with the square of a word's length
# (a megabyte without a space would take hours); the embedded corpus's longest run is 63 characters.
MAX_TRAIN_RUN = 1000
_LONG_RUN = re.compile(rf"((?<!\S)\S{{{MAX_TRAIN_RUN + 1},}})")


def train_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_PROFILE["vocab_size"]) -> PreTrainedTokenizerFast:
    """A deterministic byte-level BPE tokenizer (GPT-2 style, lossless, no prefix space, merges seen at least twice)
    wrapped for ``transformers``; ``<|endoftext|>`` (id 0) is bos/eos/unk/pad, then the 256 bytes, then merges
    (possibly fewer than asked)."""
    minimum = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
    if not is_int(vocab_size) or vocab_size < minimum:
        raise ValueError(f"vocab_size: {vocab_size!r} is too small; byte-level BPE needs at least {minimum} "
                         f"({BYTE_ALPHABET_SIZE} byte tokens + {len(SPECIAL_TOKENS)} special token)")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(_bounded(t for t in texts if t), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=EOS_TOKEN, eos_token=EOS_TOKEN,
                                   unk_token=EOS_TOKEN, pad_token=EOS_TOKEN, clean_up_tokenization_spaces=False)


def _bounded(texts: Iterable[str]) -> Iterator[str]:
    """The texts, each run of more than ``MAX_TRAIN_RUN`` non-whitespace characters yielded in pieces of that length
    (the text around it apart); a text without such a run passes unchanged."""
    for text in texts:
        parts = _LONG_RUN.split(text)  # the runs at odd places
        for i, part in enumerate(parts):
            if i % 2:
                yield from (part[j : j + MAX_TRAIN_RUN] for j in range(0, len(part), MAX_TRAIN_RUN))
            elif part or len(parts) == 1:
                yield part


def tokenizer_fingerprint(path: str | os.PathLike[str]) -> str:
    """sha256 of a saved ``tokenizer.json`` in canonical form (keys sorted, merges as ``"a b"``), whichever
    ``tokenizers`` version saved it."""
    source = Path(path)
    try:
        saved = json.loads(source.read_text(encoding="utf-8"))
        model = saved["model"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        vocab = sorted(model["vocab"].items(), key=lambda kv: (kv[1], kv[0]))
        canonical = {**{k: v for k, v in saved.items() if k != "version"},
                     "model": {**model, "vocab": vocab, "merges": merges},
                     "added_tokens": sorted(saved.get("added_tokens", []), key=lambda t: t["id"])}
        text = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"path: {source} is not a saved tokenizer ({type(e).__name__}: {e})") from None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _ids(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> Iterator[np.ndarray]:
    """Token ids of each document (no special tokens added), in batched calls to the Rust tokenizer."""
    items = iter(texts)
    while batch := list(itertools.islice(items, _ENCODE_BATCH)):
        encoded = tokenizer.backend_tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        yield from (np.asarray(e.ids, dtype=np.int64) for e in encoded)


def token_frequencies(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> np.ndarray:
    """Count every token id over ``texts`` (the documents' own tokens, no separators): int64, ``len(tokenizer)`` long."""
    size = len(tokenizer)
    counts = np.zeros(size, dtype=np.int64)
    for ids in _ids(tokenizer, texts):
        if ids.size:
            counts += np.bincount(ids, minlength=size)[:size]
    return counts


def unknown_id(tokenizer: PreTrainedTokenizerFast) -> int | None:
    """Id of the token a tokenizer writes for text it cannot spell; None when it has none (byte-level BPE)."""
    backend = tokenizer.backend_tokenizer
    model = json.loads(backend.to_str())["model"]
    if "unk_id" in model:  # Unigram (sentencepiece) models name it by id
        return model["unk_id"]
    return None if model.get("unk_token") is None else backend.token_to_id(model["unk_token"])


def unknown_share(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> float:
    """Share of the documents' tokens that are the unknown token: how much of the text the tokenizer cannot read."""
    counts = token_frequencies(tokenizer, texts)
    unk, total = unknown_id(tokenizer), int(counts.sum())
    return float(counts[unk] / total) if unk is not None and 0 <= unk < len(counts) and total else 0.0


def encode(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> torch.Tensor:
    """Tokenize documents into one 1-D ``torch.long`` stream, the eos id between documents (not before or after).

    Args:
        tokenizer: one with an eos token; texts: the documents.

    Returns:
        The token stream.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(f"tokenizer: has no eos token (expected '{EOS_TOKEN}') to separate documents")
    sep = np.array([int(eos)], dtype=np.int64)
    pieces: list[np.ndarray] = []
    for ids in _ids(tokenizer, texts):
        pieces += [sep, ids] if pieces else [ids]
    return torch.from_numpy(np.concatenate(pieces)) if pieces else torch.zeros(0, dtype=torch.long)


def save_frequencies(path: str | os.PathLike[str], tokenizer: PreTrainedTokenizerFast, counts: np.ndarray) -> Path:
    """Write counts as CSV (``id``, ``token`` in the tokenizer's string form, ``count``), atomically, never through a
    link (:func:`tiebias.system.atomic.atomic_path`)."""
    backend, out = tokenizer.backend_tokenizer, Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame({"id": range(len(counts)), "token": [backend.id_to_token(i) or "" for i in range(len(counts))],
                          "count": counts.astype(np.int64)})
    with atomic_path(out) as tmp:
        table.to_csv(tmp, index=False, lineterminator="\r\n", encoding="utf-8")
    return out


def load_frequencies(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a CSV written by ``save_frequencies`` back into an int64 array indexed by token id."""
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"path: frequency file '{source}' does not exist")
    try:
        table = pd.read_csv(source, usecols=["id", "count"], dtype="int64")
    except ValueError as e:
        raise ValueError(f"path: '{source}' lacks integer id and count columns ({e})") from None
    ids = table["id"].to_numpy()
    if not np.array_equal(np.sort(ids), np.arange(len(ids))):
        raise ValueError(f"path: ids in '{source}' are not exactly 0..{len(ids) - 1}")
    counts = np.zeros(len(ids), dtype=np.int64)
    counts[ids] = table["count"].to_numpy()
    return counts


def unigram_loss(train_counts: np.ndarray | Sequence[int], val_ids: torch.Tensor | np.ndarray | Sequence[int]) -> float:
    """Cross-entropy (nats per token) on ``val_ids`` of the add-one unigram ``p(t) = (count(t) + 1) / (N + V)``: a
    model that learned anything from context must beat it.

    Args:
        train_counts: per-token training counts, one per id (V of them).
        val_ids: the validation token ids, each in [0, V).

    Returns:
        Nats per token.
    """
    counts = np.asarray(train_counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0 or (counts < 0).any():
        raise ValueError(f"train_counts: need a 1-D array of per-token counts >= 0, got shape {counts.shape}")
    ids = as_ids(val_ids, counts.size, "val_ids")
    if ids.size == 0:
        raise ValueError("val_ids: empty token stream; give at least one token id")
    log_probs = np.log(counts + 1.0) - np.log(counts.sum() + counts.size)
    return float(-log_probs[ids].mean())
