"""Tokenizers of the models compared: finding a model's tokenizer, its token strings, and the tokens two
vocabularies share (the one check that a pair is comparable, made by 02 on embeddings and by 03 on tokenizers)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from tiebias.data import tokens
from tiebias.models.sources import param_name
from tiebias.run.layout import TOKENIZER_FILE, TOKENIZER_SUBDIR

log = logging.getLogger(__name__)

_TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json", "tokenizer.model", "vocab.json")
_MISSING_TOKEN = "\x00missing-id:"  # placeholder for ids the tokenizer cannot name; never matched
_ANCESTOR_LEVELS = 4


def _has_tokenizer(p: Path) -> bool:
    """Whether folder ``p`` holds any tokenizer file."""
    return p.is_dir() and any((p / f).is_file() for f in _TOKENIZER_FILES)


def _find_tokenizer_dir(start: Path) -> Path | None:
    """``start`` or the nearest ancestor (<= 4 up) with tokenizer files or a ``tokenizer/`` subfolder."""
    p = start.resolve()
    for _ in range(_ANCESTOR_LEVELS + 1):
        if _has_tokenizer(p):
            return p
        if _has_tokenizer(p / TOKENIZER_SUBDIR):
            return p / TOKENIZER_SUBDIR
        if p.parent == p:
            break
        p = p.parent
    return None


def resolve_tokenizer(tokenizer: Any, local: Path | None, hub_id: str | None, revision: str | None,
                      label: str) -> Any:
    """The tokenizer to name rows with: the one given, else the model folder's (or an ancestor's), else the hub's."""
    from transformers import AutoTokenizer

    if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
        if not (hasattr(tokenizer, "convert_ids_to_tokens") and hasattr(tokenizer, "__len__")):
            raise ValueError(f"tokenizer must be a folder or a transformers tokenizer, "
                             f"got {type(tokenizer).__name__}")
        return tokenizer
    if tokenizer is not None:
        p = Path(tokenizer).expanduser()
        if p.is_dir():
            sub = p / TOKENIZER_SUBDIR
            found = p if _has_tokenizer(p) else (sub if _has_tokenizer(sub) else None)
            if found is None:
                raise ValueError(f"tokenizer: no tokenizer files in {str(tokenizer)!r}")
            return AutoTokenizer.from_pretrained(found)
        text = str(tokenizer)
        if isinstance(tokenizer, Path) or p.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1:
            raise FileNotFoundError(f"tokenizer: folder {text!r} does not exist; for a run folder, rerun "
                                    "Run.prepare (notebook 01_train) to rebuild its tokenizer/")
        return AutoTokenizer.from_pretrained(text, revision=revision)
    if local is not None:
        found = _find_tokenizer_dir(local)
        if found is not None:
            return AutoTokenizer.from_pretrained(found)
        raise ValueError(f"tokenizer: none found for {label!r} (looked in the folder, in up to "
                         f"{_ANCESTOR_LEVELS} parent folders and their tokenizer/ subfolders); "
                         "pass tokenizer=")
    if hub_id is not None:
        try:
            return AutoTokenizer.from_pretrained(hub_id, revision=revision)
        except OSError as exc:
            raise ValueError(f"tokenizer: could not load one for {hub_id!r}; pass tokenizer= ({exc})") from exc
    raise ValueError(f"tokenizer: none known for {label!r}; pass tokenizer=")


def load_tokenizer(source: str | Path, *, revision: str | None = None) -> Any:
    """The tokenizer of a model or tokenizer folder (or of the nearest ancestor holding one), or of a hub id."""
    path = Path(source).expanduser()
    if path.is_dir():
        return resolve_tokenizer(None, path, None, revision, str(source))
    return resolve_tokenizer(None, None, str(source), revision, str(source))


def token_strings(tokenizer: Any, n: int | None = None) -> list[str]:
    """Token strings of ids 0..n-1 (every id by default): what :func:`match_tokens` compares; an id the tokenizer
    cannot name gets a never-matching placeholder."""
    raw = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer) if n is None else n)))
    return [t if isinstance(t, str) else f"{_MISSING_TOKEN}{i}" for i, t in enumerate(raw)]


class VocabMatch(NamedTuple):
    """Row indices into two vocabularies that name the same token string, in the first one's id order."""

    idx_a: Tensor
    idx_b: Tensor
    tokens: list[str]


def match_tokens(a: list[str], b: list[str], a_name: str = "a", b_name: str = "b") -> VocabMatch:
    """Ids of the token strings ``a`` and ``b`` share; ValueError naming both when they share none (02 and 03's check
    that a pair is comparable)."""
    pos_b: dict[str, int] = {}
    for i, t in enumerate(b):
        if not t.startswith(_MISSING_TOKEN):
            pos_b.setdefault(t, i)
    seen: set[str] = set()
    ia: list[int] = []
    ib: list[int] = []
    for i, t in enumerate(a):
        j = pos_b.get(t)
        if j is not None and t not in seen:
            seen.add(t)
            ia.append(i)
            ib.append(j)
    if not ia:
        raise ValueError(f"no shared tokens between {a_name!r} and {b_name!r}")
    log.info("match_vocab: kept %d shared tokens (%s: %d, %s: %d)", len(ia), a_name, len(a), b_name, len(b))
    return VocabMatch(torch.tensor(ia), torch.tensor(ib), [a[i] for i in ia])


MAX_UNKNOWN_SHARE = 0.01
"""Most of a corpus a tokenizer may write as its unknown token (byte-level tokenizers write none)."""


def check_tokenizers(models: dict[str, tuple[Any, Any]], texts: list[str], corpus: str) -> None:
    """Refuse, before any lens trains, tokenizers that cannot read ``texts`` (over :data:`MAX_UNKNOWN_SHARE` unknown) or
    share no token with the first one (label -> (model, tokenizer)); errors name ``<label>_source``."""
    labels = list(models)
    for label, (model, tok) in models.items():
        share = tokens.unknown_share(tok, texts)
        if share > MAX_UNKNOWN_SHARE:
            unk = tok.convert_ids_to_tokens(tokens.unknown_id(tok))
            raise ValueError(
                f"{param_name(label)}: the tokenizer of {_name(model)!r} writes {share:.0%} of the corpus {corpus!r} "
                f"as its unknown token {unk!r}, so a lens would be measured on that token, not on the text; allowed: "
                f"at most {MAX_UNKNOWN_SHARE:.0%}. Give a corpus the tokenizer reads (corpus=...), or a model whose "
                "tokenizer covers this text")
    for label in labels[1:]:
        a, b = models[labels[0]], models[label]
        try:
            match_tokens(token_strings(a[1]), token_strings(b[1]), _name(a[0]), _name(b[0]))
        except ValueError as e:
            raise ValueError(f"{param_name(labels[0])}, {param_name(label)}: {e}; a pair is compared on the tokens its "
                             "vocabularies share (02 refuses this pair too); allowed: models whose tokenizers share "
                             "tokens") from None


def _name(model: Any) -> str:
    """What a loaded model was loaded from (folder or hub id), for messages."""
    return str(getattr(model, "name_or_path", "") or type(model).__name__)
