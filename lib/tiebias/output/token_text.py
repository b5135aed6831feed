"""One readable notation for whitespace inside tokens, used by every explorer table and trajectory figure.

Tokenizers mark whitespace with their own characters (byte-level BPE: ``Ġ`` for a space, ``Ċ`` for a
newline; SentencePiece: ``▁``). Shown tokens use ``␣`` (a space: the token starts a new word), ``↵``
(newline) and ``⇥`` (tab) instead, explained once by :data:`LEGEND`.
"""

from __future__ import annotations

SPACE, NEWLINE, TAB = "␣", "↵", "⇥"
LEGEND = f"{SPACE} = a space (the token starts a new word), {NEWLINE} = a newline, {TAB} = a tab"
_SHOW = {"Ġ": SPACE, "▁": SPACE, " ": SPACE, "Ċ": NEWLINE, "\n": NEWLINE, "ĉ": TAB, "\t": TAB, "č": "\\r", "\r": "\\r"}
_TYPED = {SPACE: "Ġ", NEWLINE: "Ċ", TAB: "ĉ"}  # the byte-level BPE spelling of a typed notation character


def show(token: str, max_chars: int | None = None) -> str:
    """A token string in the readable notation (``Ġking`` -> ``␣king``), cut to ``max_chars`` with "…"."""
    text = "".join(_SHOW.get(ch, ch) for ch in str(token))
    if max_chars is not None and len(text) > max_chars:
        text = text[: max(max_chars - 1, 1)] + "…"
    return text


def spellings(typed: str) -> list[str]:
    """Token strings that ``typed`` may name: itself, and its notation characters spelled the BPE or SentencePiece
    way (``␣king`` -> ``Ġking``, ``▁king``), so a token copied from a table can be typed back."""
    out = [typed]
    if any(ch in _TYPED for ch in typed):
        out.append("".join(_TYPED.get(ch, ch) for ch in typed))
        out.append(typed.replace(SPACE, "▁"))
    return list(dict.fromkeys(out))
