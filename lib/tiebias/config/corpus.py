"""Names of the data a study reads (embedded corpus, hub names, file kinds, the tokenizer's alphabet), without
``datasets``."""

from __future__ import annotations

import os
import re

EMBEDDED_CORPUS = "shakespeare"
SPLITS: tuple[str, str, str] = ("train", "validation", "test")
FILE_BUILDERS: dict[str, str] = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
# Endings that mark a string as a (mistyped) file path rather than a hub dataset name.
_PATH_ENDINGS = (*FILE_BUILDERS, ".gz", ".csv", ".tsv", ".arrow", ".zip", ".xz", ".bz2")
# "name", "user/name", optionally ":config"; anything else that does not exist is a bad path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?(:[\w.\-]+)?$")

EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS: tuple[str, ...] = (EOS_TOKEN,)
BYTE_ALPHABET_SIZE = 256  # a byte-level BPE vocabulary holds every byte, then the specials, then merges


def looks_like_hub_name(text: str) -> bool:
    """True for ``name``/``user/name``(``:config``) strings that cannot be mistaken for a file path."""
    if text.startswith((".", "~", "/")) or "\\" in text or (os.altsep and os.altsep in text):
        return False
    if text.lower().split(":", 1)[0].endswith(_PATH_ENDINGS):
        return False
    return bool(_HUB_ID.match(text))
