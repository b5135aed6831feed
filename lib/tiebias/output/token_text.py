"""One notation for whitespace inside tokens, in every explorer table and trajectory figure: ``␣`` a space (the token
starts a word; byte-level BPE writes ``Ġ``, SentencePiece ``▁``), ``↵`` a newline, ``⇥`` a tab."""

from __future__ import annotations

SPACE, NEWLINE, TAB = "␣", "↵", "⇥"
LEGEND = f"{SPACE} = a space (the token starts a new word), {NEWLINE} = a newline, {TAB} = a tab"
_SHOW = {"Ġ": SPACE, "▁": SPACE, " ": SPACE, "Ċ": NEWLINE, "\n": NEWLINE, "ĉ": TAB, "\t": TAB, "č": "\\r", "\r": "\\r"}
_TYPED = {SPACE: "Ġ", NEWLINE: "Ċ", TAB: "ĉ"}  # the byte-level BPE spelling of a typed notation character


def show(token: str, max_chars: int | None = None) -> str:
    """A token string in the notation (``Ġking`` -> ``␣king``), cut to ``max_chars`` with "…"."""
    text = "".join(_SHOW.get(ch, ch) for ch in str(token))
    if max_chars is not None and len(text) > max_chars:
        text = text[: max(max_chars - 1, 1)] + "…"
    return text


def spellings(typed: str) -> list[str]:
    """The token strings ``typed`` may name: itself, and spelled the BPE or SentencePiece way (``␣king`` -> ``Ġking``,
    ``▁king``), so a token copied from a table can be typed back."""
    out = [typed]
    if any(ch in _TYPED for ch in typed):
        out += ["".join(_TYPED.get(ch, ch) for ch in typed), typed.replace(SPACE, "▁")]
    return list(dict.fromkeys(out))
