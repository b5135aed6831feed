"""Tokenizers of the models compared: finding a model's tokenizer, its token strings, and the tokens two
vocabularies share (the one check that a pair is comparable, made by 02 on embeddings and by 03 on tokenizers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tiebias.data import tokens
from tiebias.run.layout import TOKENIZER_FILE, TOKENIZER_SUBDIR

_TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json", "tokenizer.model", "vocab.json")
_MISSING_TOKEN = "\x00missing-id:"  # placeholder for ids the tokenizer cannot name; never matched
_ANCESTOR_LEVELS = 4


def _find_tokenizer_dir(start: Path, levels: int) -> Path | None:
    """``start`` or its nearest ancestor (up to ``levels`` up) holding tokenizer files, itself or in ``tokenizer/``."""
    for p in [start.resolve(), *start.resolve().parents][:levels + 1]:
        for d in (p, p / TOKENIZER_SUBDIR):
            if d.is_dir() and any((d / f).is_file() for f in _TOKENIZER_FILES):
                return d
    return None


def resolve_tokenizer(tokenizer: Any, local: Path | None, hub_id: str | None, revision: str | None,
                      label: str) -> Any:
    """The tokenizer to name rows with: the one given, else the model folder's (or an ancestor's), else the hub's."""
    from transformers import AutoTokenizer

    if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
        if not (hasattr(tokenizer, "convert_ids_to_tokens") and hasattr(tokenizer, "__len__")):
            raise ValueError(f"tokenizer must be a folder or a transformers tokenizer, got {type(tokenizer).__name__}")
        return tokenizer
    if tokenizer is not None:
        p, text = Path(tokenizer).expanduser(), str(tokenizer)
        if p.is_dir():
            found = _find_tokenizer_dir(p, 0)
            if found is None:
                raise ValueError(f"tokenizer: no tokenizer files in {text!r}")
            return AutoTokenizer.from_pretrained(found)
        if isinstance(tokenizer, Path) or p.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1:
            raise FileNotFoundError(f"tokenizer: folder {text!r} does not exist; for a run folder, rerun "
                                    "Run.prepare (notebook 01_train) to rebuild its tokenizer/")
        return AutoTokenizer.from_pretrained(text, revision=revision)
    found = None if local is None else _find_tokenizer_dir(local, _ANCESTOR_LEVELS)
    if found is not None:
        return AutoTokenizer.from_pretrained(found)
    if local is not None:
        raise ValueError(f"tokenizer: none found for {label!r} (looked in the folder, in up to {_ANCESTOR_LEVELS} "
                         "parent folders and their tokenizer/ subfolders); pass tokenizer=")
    if hub_id is None:
        raise ValueError(f"tokenizer: none known for {label!r}; pass tokenizer=")
    try:
        return AutoTokenizer.from_pretrained(hub_id, revision=revision)
    except OSError as exc:
        raise ValueError(f"tokenizer: could not load one for {hub_id!r}; pass tokenizer= ({exc})") from exc


def load_tokenizer(source: str | Path, *, revision: str | None = None) -> Any:
    """The tokenizer of a model or tokenizer folder (or of the nearest ancestor holding one), or of a hub id."""
    path = Path(source).expanduser()
    local = path if path.is_dir() else None
    return resolve_tokenizer(None, local, None if local else str(source), revision, str(source))


def token_strings(tokenizer: Any, n: int | None = None) -> list[str]:
    """Token strings of ids 0..n-1 (every id by default): what :func:`match_tokens` compares; an id the tokenizer
    cannot name gets a never-matching placeholder."""
    raw = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer) if n is None else n)))
    return [t if isinstance(t, str) else f"{_MISSING_TOKEN}{i}" for i, t in enumerate(raw)]


def match_tokens(a: list[str], b: list[str], a_name: str = "a", b_name: str = "b") -> tuple[Tensor, Tensor]:
    """The token strings two vocabularies share, each once, in ``a``'s id order (every row when the vocabularies are
    equal); ValueError naming both when they share none (02 and 03's check that a pair is comparable).

    Args:
        a, b: the two vocabularies' token strings, by id.
        a_name, b_name: their names in the error.

    Returns:
        Row indices into ``a`` and into ``b``.
    """
    if a == b:
        return torch.arange(len(a)), torch.arange(len(a))
    pos_b: dict[str, int] = {}
    for i, t in enumerate(b):
        if not t.startswith(_MISSING_TOKEN):
            pos_b.setdefault(t, i)
    ia, ib = [], []
    for i, t in enumerate(a):
        if pos_b.get(t) is not None:
            ia.append(i)
            ib.append(pos_b.pop(t))  # each shared string once, at its first id in a
    if not ia:
        raise ValueError(f"no shared tokens between {a_name!r} and {b_name!r}")
    return torch.tensor(ia), torch.tensor(ib)


MAX_UNKNOWN_SHARE = 0.01
"""Most of a corpus a tokenizer may write as its unknown token (byte-level tokenizers write none)."""


def check_tokenizers(models: dict[str, tuple[Any, Any]], texts: list[str], corpus: str) -> None:
    """Refuse, before any lens trains, tokenizers that cannot read ``texts`` (over :data:`MAX_UNKNOWN_SHARE` unknown) or
    share no token with the first one (label -> (model, tokenizer)); errors name ``<label>_source``."""
    labels = list(models)
    name = lambda m: str(getattr(m, "name_or_path", "") or type(m).__name__)  # noqa: E731 - its folder or hub id
    for label, (model, tok) in models.items():
        share = tokens.unknown_share(tok, texts)
        if share > MAX_UNKNOWN_SHARE:
            unk = tok.convert_ids_to_tokens(tokens.unknown_id(tok))
            raise ValueError(
                f"{label}_source: the tokenizer of {name(model)!r} writes {share:.0%} of the corpus {corpus!r} "
                f"as its unknown token {unk!r}, so a lens would be measured on that token, not on the text; allowed: "
                f"at most {MAX_UNKNOWN_SHARE:.0%}. Give a corpus the tokenizer reads (corpus=...), or a model whose "
                "tokenizer covers this text")
    for label in labels[1:]:
        a, b = models[labels[0]], models[label]
        try:
            match_tokens(token_strings(a[1]), token_strings(b[1]), name(a[0]), name(b[0]))
        except ValueError as e:
            raise ValueError(f"{labels[0]}_source, {label}_source: {e}; a pair is compared on the tokens its "
                             "vocabularies share (02 refuses this pair too); allowed: models whose tokenizers share "
                             "tokens") from None
