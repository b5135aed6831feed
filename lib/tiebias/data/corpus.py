"""Corpora split into train/validation/test: the embedded Shakespeare corpus, local files or a hub dataset, loaded
through ``datasets``; documents are split deterministically when the source does not name its splits."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from tiebias.config.corpus import EMBEDDED_CORPUS, FILE_BUILDERS, SPLITS, looks_like_hub_name
from tiebias.data.checks import (
    SPLIT_WORDS,
    check_text_bytes,
    fingerprint_files,
    fingerprint_texts,
    load_failure,
    split_groups,
)

DATA_ENV_VAR = "TIEBIAS_DATA_DIR"

_ALLOWED_EXTS = "/".join(FILE_BUILDERS)
_SNAP_WINDOW = 2000  # characters to look ahead for a line break when cutting a document

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None


def data_dir() -> Path:
    """Folder holding the embedded corpus: ``$TIEBIAS_DATA_DIR`` if set, else ``<repo>/data``."""
    override = os.environ.get(DATA_ENV_VAR)
    return Path(override).expanduser() if override else Path(__file__).resolve().parents[3] / "data"


def load_corpus(source: Source = None, *, text_column: str = "text", val_fraction: float = 0.05,
                test_fraction: float = 0.05, seed: int = 0) -> datasets.DatasetDict:
    """A corpus as a ``DatasetDict`` (train, validation, test; a "text" column each) from ``source``: None or
    "shakespeare" (the embedded corpus, split by work), a local txt/jsonl/json/parquet file, folder or list of files
    (files naming a split keep it), or a hub dataset ``name``, ``user/name``, optionally ``:config``. Missing splits
    are cut deterministically (``seed``); empty documents are dropped.

    Args:
        source: the corpus; text_column: its text; val_fraction, test_fraction, seed: how missing splits are cut.

    Returns:
        The ``DatasetDict``."""
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{name}: {value!r} is not a fraction; give a number in [0, 1)")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction, test_fraction: {val_fraction} + {test_fraction} leaves no training data; "
                         "their sum must be below 1")
    if not isinstance(text_column, str) or not text_column:
        raise ValueError(f"text_column: {text_column!r} is not a column name; give a non-empty string")

    if source is None or (isinstance(source, str) and source.strip().lower() == EMBEDDED_CORPUS):
        return _load_embedded()
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError(f"source: empty list of files; give at least one {_ALLOWED_EXTS} file")
        label = str(source)
        parts = _load_local(split_groups([_checked_file(Path(p).expanduser(), listed=True) for p in source], None),
                            text_column)
    elif not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source: {source!r} is a {type(source).__name__}; give None, 'shakespeare', a path, "
                        "a list of paths or a hub dataset name")
    else:
        label = os.fspath(source)
        path = Path(label).expanduser()
        if path.exists():
            parts = _load_local(split_groups(_checked_dir(path), path) if path.is_dir()
                                else {"train": [_checked_file(path)]}, text_column)
        elif isinstance(source, str) and looks_like_hub_name(label):
            parts = _load_hub(label, text_column)
        else:
            raise ValueError(f"source: path '{label}' does not exist; give the embedded corpus name "
                             f"'{EMBEDDED_CORPUS}', an existing {_ALLOWED_EXTS} file or folder, or a hub dataset name "
                             "('name' or 'user/name', optionally ':config')")
    return _complete_splits(parts, val_fraction, test_fraction, seed, label=label)


def corpus_fingerprint(source: str | os.PathLike[str] | None, loaded: datasets.DatasetDict | None = None) -> dict | None:
    """The fingerprint a run folder records to notice a corpus edited after its tokens were made: sha256 over the files
    read (embedded corpus, local files) or over the ``loaded`` texts of a hub dataset (None without them)."""
    if source is None or (isinstance(source, str) and source.strip().lower() == EMBEDDED_CORPUS):
        folder = data_dir()
        files = [folder / "shakespeare.jsonl.gz", folder / "splits.json"]
        return fingerprint_files(files, folder) if all(f.is_file() for f in files) else None
    path = Path(os.fspath(source)).expanduser()
    if path.is_dir():
        return fingerprint_files(_checked_dir(path), path)
    if path.is_file():
        return fingerprint_files([_checked_file(path)], None)
    return None if loaded is None else fingerprint_texts(os.fspath(source), {s: loaded[s]["text"] for s in SPLITS})


def _load_embedded() -> datasets.DatasetDict:
    """Read the shipped Shakespeare corpus and its fixed by-work split."""
    folder = data_dir()
    corpus_file, splits_file = folder / "shakespeare.jsonl.gz", folder / "splits.json"
    for needed in (corpus_file, splits_file):
        if not needed.is_file():
            raise FileNotFoundError(f"source: embedded corpus file '{needed}' is missing; set {DATA_ENV_VAR} to the "
                                    "folder holding shakespeare.jsonl.gz and splits.json, or rebuild them with "
                                    "scripts/make_corpus.py")
    with gzip.open(corpus_file, "rt", encoding="utf-8") as handle:
        works = {row["title"]: row["text"] for row in map(json.loads, handle) if row}
    plan = json.loads(splits_file.read_text(encoding="utf-8"))
    seen: set[str] = set()
    out = {}
    for split in SPLITS:
        titles = plan.get(split)
        if not isinstance(titles, list) or not titles:
            raise ValueError(f"{splits_file}: split '{split}' must be a non-empty list of work titles")
        unknown = [t for t in titles if t not in works]
        repeated = [t for t in titles if t in seen]
        if unknown or repeated:
            raise ValueError(f"{splits_file}: split '{split}' has unknown {unknown} or repeated {repeated} works")
        seen.update(titles)
        out[split] = datasets.Dataset.from_dict({"title": titles, "text": [works[t] for t in titles]})
    return datasets.DatasetDict(out)


def _checked_file(path: Path, *, listed: bool = False) -> Path:
    """``path`` if it is an existing file with a supported extension, else a ValueError naming ``source``."""
    if not path.exists():
        what = "listed file" if listed else "path"
        raise ValueError(f"source: {what} '{path}' does not exist; give existing {_ALLOWED_EXTS} files")
    if not path.is_file():
        raise ValueError(f"source: '{path}' is not a file; a list may only hold {_ALLOWED_EXTS} files")
    if path.suffix.lower() not in FILE_BUILDERS:
        raise ValueError(f"source: file '{path}' has extension '{path.suffix}'; allowed: {_ALLOWED_EXTS}")
    return path


def _checked_dir(folder: Path) -> list[Path]:
    """All supported data files under ``folder`` (recursive, sorted, hidden entries skipped)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in FILE_BUILDERS
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise ValueError(f"source: folder '{folder}' holds no {_ALLOWED_EXTS} files")
    return files


def _load_local(groups: dict[str, list[Path]], text_column: str) -> dict[str, datasets.Dataset]:
    """Local files (grouped by split) through ``datasets`` builders, every text/json file checked first."""
    for path in (f for fs in groups.values() for f in fs):
        if FILE_BUILDERS[path.suffix.lower()] in ("text", "json"):
            check_text_bytes(path)
    return {s: _load_files(fs, text_column) for s, fs in groups.items() if fs}


def _load_files(files: list[Path], text_column: str) -> datasets.Dataset:
    """One "text"-only ``Dataset`` from files of mixed formats, read into memory from a private cache."""
    pieces = []
    for builder in dict.fromkeys(FILE_BUILDERS[f.suffix.lower()] for f in files):
        chosen = [f for f in files if FILE_BUILDERS[f.suffix.lower()] == builder]
        kwargs = {"sample_by": "document"} if builder == "text" else {}
        with tempfile.TemporaryDirectory(prefix="tiebias-corpus-") as private:
            # links (or copies) named 00000.txt...: datasets reads a path as a glob and expands $VARIABLES and ~,
            # so g[1]/train.txt would read g1/train.txt
            names = [str(Path(private) / f"{i:05d}{f.suffix.lower()}") for i, f in enumerate(chosen)]
            for f, name in zip(chosen, names, strict=True):
                try:
                    os.symlink(f.resolve(), name)
                except OSError:
                    shutil.copyfile(f, name)
            try:
                ds = datasets.load_dataset(builder, data_files={"data": names},
                                           split="data", cache_dir=str(Path(private) / "cache"),
                                           keep_in_memory=True, **kwargs)
            except (datasets.exceptions.DatasetGenerationError, pa.ArrowException) as err:
                raise load_failure(chosen, builder, text_column, err) from None
        column = "text" if builder == "text" else text_column
        if builder == "json" and column in ds.column_names and not _is_text(ds.features[column]):
            raise load_failure(chosen, builder, text_column, ValueError(f"column '{column}' is not text"))
        pieces.append(_text_only(ds, column, where=", ".join(map(str, chosen))))
    return pieces[0] if len(pieces) == 1 else datasets.concatenate_datasets(pieces)


def _is_text(feature: object) -> bool:
    """Whether a ``datasets`` feature is a string column."""
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def _text_only(ds: datasets.Dataset, column: str, *, where: str) -> datasets.Dataset:
    """Keep only ``column`` (renamed to "text"), checking that it exists and holds strings."""
    if column not in ds.column_names:
        raise ValueError(f"text_column: column '{column}' not found in {where}; available columns: {ds.column_names}")
    feature = ds.features[column]
    if not _is_text(feature):
        raise ValueError(f"text_column: column '{column}' in {where} holds {feature}, not text")
    ds = ds.select_columns([column])
    return ds.rename_column(column, "text") if column != "text" else ds


def _load_hub(name: str, text_column: str) -> dict[str, datasets.Dataset]:
    """Load a hub dataset (network), normalise split names and keep only the text column."""
    repo, _, config = name.partition(":")
    try:
        loaded = datasets.load_dataset(repo, config or None)
    except Exception as err:  # re-raised with the context a user needs
        raise ValueError(f"source: '{name}' is not an existing local path, and loading it as a hub dataset failed "
                         f"({type(err).__name__}: {err}); give '{EMBEDDED_CORPUS}', an existing {_ALLOWED_EXTS} file "
                         "or folder, or a reachable hub dataset name") from err
    renamed: dict[str, datasets.Dataset] = {}
    for split, ds in loaded.items():
        key = SPLIT_WORDS.get(str(split).lower(), str(split))
        renamed[key] = _text_only(ds, text_column, where=f"hub dataset '{name}' split '{split}'")
    if "train" not in renamed:
        renamed = {"train": datasets.concatenate_datasets(list(renamed.values()))}
    return {s: renamed[s] for s in SPLITS if s in renamed}


def _complete_splits(parts: dict[str, datasets.Dataset], val_fraction: float, test_fraction: float, seed: int, *,
                     label: str) -> datasets.DatasetDict:
    """Drop empty documents and cut whichever of validation/test is missing out of train: by document (seeded
    shuffle) when there are >= 3, else each document by character ranges at line breaks."""
    for s, ds in parts.items():
        keep = [i for i, t in enumerate(ds["text"]) if t and not t.isspace()]
        parts[s] = ds if len(keep) == len(ds) else ds.select(keep)
    if sum(len(ds) for ds in parts.values()) == 0:
        raise ValueError(f"source: corpus '{label}' has no non-empty documents")
    vf = 0.0 if "validation" in parts else val_fraction
    tf = 0.0 if "test" in parts else test_fraction
    ds, n = parts["train"], len(parts["train"])
    if (vf or tf) and n >= 3:  # by document (seeded shuffle)
        n_val = max(1, round(n * vf)) if vf > 0 else 0
        n_test = max(1, round(n * tf)) if tf > 0 else 0
        while n_val + n_test > n - 1:  # keep at least one training document
            if n_val >= n_test and n_val > 1:
                n_val -= 1
            else:
                n_test -= 1
        order = np.random.default_rng(seed).permutation(n)
        parts["train"] = ds.select(sorted(order[n_val + n_test :].tolist()))
        parts.setdefault("validation", ds.select(sorted(order[:n_val].tolist())))
        parts.setdefault("test", ds.select(sorted(order[n_val : n_val + n_test].tolist())))
    elif vf or tf:  # fewer than 3 documents: each cut by character ranges, at line breaks
        pieces: dict[str, list[str]] = {s: [] for s in SPLITS}
        for text in ds["text"]:
            cut_a = _snap(text, int(len(text) * (1 - vf - tf)))
            cut_b = max(cut_a, _snap(text, int(len(text) * (1 - tf))))
            for split, piece in zip(SPLITS, (text[:cut_a], text[cut_a:cut_b], text[cut_b:]), strict=True):
                if piece and not piece.isspace():
                    pieces[split].append(piece)
        short = [s for s, wanted in zip(SPLITS, (True, vf > 0, tf > 0), strict=True) if wanted and not pieces[s]]
        if short:
            chars = sum(len(t) for t in ds["text"])
            raise ValueError(f"source: corpus '{label}' is too small to split ({n} document(s), {chars} characters): "
                             f"{short} would be empty (validation and test are cut from the end of each document, at "
                             "line breaks); give more text, in several lines or documents, or the splits themselves: a "
                             "folder of files whose names say train, validation and test (e.g. train.txt, "
                             "validation.txt, test.txt)")
        parts["train"] = datasets.Dataset.from_dict({"text": pieces["train"]})
        for s in ("validation", "test"):
            parts.setdefault(s, datasets.Dataset.from_dict({"text": pieces[s]}))
    empty = datasets.Dataset.from_dict({"text": []}, features=datasets.Features({"text": datasets.Value("string")}))
    return datasets.DatasetDict({s: parts.get(s, empty) for s in SPLITS})


def _snap(text: str, pos: int) -> int:
    """Move a cut position to just after the next line break, if one is near; keeps lines whole."""
    if pos <= 0 or pos >= len(text):
        return max(0, min(pos, len(text)))
    newline = text.find("\n", pos, pos + _SNAP_WINDOW)
    return newline + 1 if newline >= 0 else pos
