"""Checks on a user's corpus files, before (or instead of) a long traceback from the loader: which split a file
belongs to, whether it is text, where a failed load tripped, and the fingerprint that notices an edited corpus."""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

# Words in a file or folder name that put a local file into a split (what each means).
SPLIT_WORDS: dict[str, str] = {"train": "train", "training": "train", "validation": "validation",
                               "valid": "validation", "val": "validation", "dev": "validation", "test": "test",
                               "testing": "test"}
_SHOWN = 10  # file names listed in an error before "and N more"
_BLOCK = 1 << 20  # bytes read at a time


def _split_label(path: Path, root: Path | None) -> str | None:
    """Split named by a file's own name, else by its nearest folder below ``root`` that names one."""
    names = [path.stem]
    if root is not None:
        names += list(reversed(path.relative_to(root).parts[:-1]))
    for name in names:
        found = {SPLIT_WORDS[w] for w in re.split(r"[^a-z0-9]+", name.lower()) if w in SPLIT_WORDS}
        if len(found) > 1:
            raise ValueError(f"source: file '{path}': the name '{name}' names the splits {sorted(found)}; "
                             "rename it so that it names one split (train, validation/valid/val/dev or test)")
        if found:
            return found.pop()
    return None


def _listed(names: list[str]) -> str:
    """Names for a message: the first few and a count of the rest."""
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def split_groups(files: list[Path], root: Path | None) -> dict[str, list[Path]]:
    """Files per split: a file whose name (or a folder below ``root``) holds a split word as a whole word keeps that
    split. When none does, all are training files; when some do, every file must, and one must be train."""
    labels = [_split_label(f, root) for f in files]
    if not any(labels):
        return {"train": list(files)}
    where = f"folder '{root}'" if root is not None else "the listed files"
    names = [str(f.relative_to(root)) if root is not None else str(f) for f in files]
    unnamed = [n for n, lab in zip(names, labels, strict=True) if lab is None]
    if unnamed:
        named = [f"{n}: {lab}" for n, lab in zip(names, labels, strict=True) if lab]
        raise ValueError(
            f"source: {where}: some files name a split ({_listed(named)}) and {len(unnamed)} do not "
            f"({_listed(unnamed)}); those would be trained on without saying so. Name each file (or a folder "
            "it is in) by its split: train, validation (valid/val/dev) or test, e.g. move the others into a "
            "train/ folder; or remove the split names from all files to have the documents split at random")
    if "train" not in labels:
        raise ValueError(
            f"source: {where} names splits {sorted(set(filter(None, labels)))} but no train file; name the "
            "training files (or their folder) train, e.g. train.txt or train/")
    return {s: [f for f, lab in zip(files, labels, strict=True) if lab == s] for s in dict.fromkeys(labels)}


def check_text_bytes(path: Path) -> None:
    """Refuse a text/json file that is not UTF-8 or holds a NUL byte, naming the offset (and line) of the bad byte."""
    data = path.read_bytes()  # the loader holds the whole corpus in memory next
    nul = data.find(b"\0")
    try:
        data[: nul if nul >= 0 else None].decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"source: file '{path}' is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start} "
            "does not decode); convert it to UTF-8, e.g. "
            f"`iconv -f latin1 -t utf-8 '{path.name}' > out{path.suffix}`") from None
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise ValueError(
            f"source: file '{path}' holds a NUL byte (offset {nul}, line {line}): it looks "
            "like a binary file, not text; remove it from the corpus, or if it is text, delete the NUL bytes "
            f"(e.g. `tr -d '\\000' < '{path.name}' > clean{path.suffix}`)")


def load_failure(files: list[Path], builder: str, text_column: str, err: BaseException) -> ValueError:
    """The error for a ``datasets`` load (or text column) that failed: the file, the line and what to do."""
    for path in files:
        if builder == "json" and path.suffix.lower() == ".json" and path.read_text("utf-8").lstrip().startswith("["):
            try:  # one JSON document, not JSON lines
                json.loads(path.read_text("utf-8"))
            except json.JSONDecodeError as e:
                return ValueError(f"source: file '{path}', line {e.lineno}, column {e.colno}: not valid JSON "
                                  f"({e.msg}); fix the file there")
        elif builder == "json":
            with path.open(encoding="utf-8") as handle:
                for n, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line.rstrip("\r\n"))
                    except json.JSONDecodeError as e:
                        problem = f"line {n}, column {e.colno}: not valid JSON ({e.msg})"
                    else:
                        if not isinstance(row, dict):
                            problem = f"line {n}: a JSON {type(row).__name__}, not an object"
                        elif row.get(text_column) is not None and not isinstance(row[text_column], str):
                            value = row[text_column]
                            problem = (f"line {n}: '{text_column}' holds {type(value).__name__} {str(value)[:40]!r}, "
                                       "not text")
                        else:
                            continue
                    return ValueError(f"source: file '{path}', {problem}; fix or delete that line (each line of a "
                                      "JSON-lines file is one object with a text field, such as "
                                      f"{{\"{text_column}\": \"...\"}})")
        elif builder == "parquet":
            import pyarrow.parquet as pq

            try:
                pq.read_schema(path)
            except Exception as bad:  # any reader failure: this is the file
                return ValueError(f"source: file '{path}' is not a readable parquet file ({bad}); "
                                  "replace it or remove it from the corpus")
    shown = _listed([str(f) for f in files])
    cause = err.__cause__ or err
    return ValueError(f"source: loading {shown} failed ({type(cause).__name__}: {cause}); "
                      "check these files' format, or remove them from the corpus")


def fingerprint_files(files: list[Path], root: Path | None) -> dict:
    """sha256 over the files' names (relative to ``root``, else base names) and bytes, sorted by name."""
    digest = hashlib.sha256()
    named = sorted((str(f.relative_to(root).as_posix()) if root is not None else f.name, f) for f in files)
    total = 0
    for name, path in named:
        size = path.stat().st_size
        digest.update(f"{name}\0{size}\0".encode())
        with path.open("rb") as handle:
            while chunk := handle.read(_BLOCK):
                digest.update(chunk)
        total += size
    return {"sha256": digest.hexdigest(), "files": len(named), "bytes": total}


def fingerprint_texts(name: str, splits: dict[str, Iterable[str]]) -> dict:
    """sha256 over a loaded corpus's split names and texts (a hub dataset: no files to hash)."""
    digest = hashlib.sha256()
    docs = 0
    for split, texts in splits.items():
        digest.update(f"\0split\0{split}\0".encode())
        for text in texts:
            data = text.encode("utf-8")
            digest.update(f"{len(data)}\0".encode())
            digest.update(data)
            docs += 1
    return {"sha256": digest.hexdigest(), "hub": name, "documents": docs}


def check_unchanged(run_path: Path, have: dict, now: dict | None) -> None:
    """Refuse a run folder whose recorded corpus fingerprint differs from the corpus's now (``now`` None or ``have``
    empty: nothing to check; a folder older than fingerprints opens with a warning)."""
    if now is None or not have:
        return
    then = have.get("corpus_fingerprint")
    corpus = have.get("corpus")
    if then is None:
        warnings.warn(f"run folder {run_path} records no fingerprint of its corpus '{corpus}' (made by an older "
                      "version): a change to the corpus since then cannot be detected; use a fresh run folder "
                      "if it changed", UserWarning, stacklevel=3)
        return
    if not isinstance(then, dict):
        raise ValueError(f"run folder {run_path}: config.json has corpus_fingerprint {then!r}, not a fingerprint; "
                         "use a fresh run folder, or Run.prepare(..., overwrite=True) to rebuild this one")
    if then.get("sha256") != now.get("sha256"):
        raise ValueError(
            f"run folder {run_path}: corpus '{corpus}' changed since this folder's tokens were made "
            f"(then {_described(then)}; now {_described(now)}); its tokenizer, tokens and models describe the "
            "old corpus. Use a fresh run folder (the run_dir parameter, e.g. --set run_dir=runs/new), or "
            "Run.prepare(..., overwrite=True) to empty this one and rebuild it from the corpus as it is now")


def _described(fingerprint: dict) -> str:
    """A fingerprint in words: its size and the start of its hash."""
    size = (f"{fingerprint['files']} files, {fingerprint.get('bytes')} bytes" if "files" in fingerprint
            else f"{fingerprint.get('documents')} documents")
    return f"{size}, sha256 {str(fingerprint.get('sha256'))[:12]}"
