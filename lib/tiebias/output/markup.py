"""Text from a run folder made safe to put into the Markdown and HTML pages the kit writes.

A run folder is untrusted: its name, the profile, preset and corpus names in its config, a claim's status or unit,
a notebook's HTML output may hold backticks, HTML tags or Markdown links. Renderers that pass raw HTML through
(markdown-it and mistune as configured by many sites, a local preview) would run their scripts. Every piece of such
text goes through one of these before it reaches a page: :func:`md_text` (inside a line or a table cell),
:func:`md_code` (an inline code span), :func:`md_fence` (a code block), :func:`safe_html` (an HTML output).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;"}
_BACKSLASHED = set("\\`*_[]~$#")
_LEADING = re.compile(r"^([-+=]|\d{1,9}(?=[.)]))")
HTML_TAGS = frozenset({"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "div",
                       "span", "p", "br", "hr", "b", "i", "em", "strong", "code", "pre", "sub", "sup", "small",
                       "ul", "ol", "li", "details", "summary", "h1", "h2", "h3", "h4", "h5", "h6"})
"""The tags :func:`safe_html` keeps (what pandas tables and the explorers' text use); others are dropped."""
HTML_ATTRIBUTES = frozenset({"colspan", "rowspan", "border", "class", "align", "valign", "open"})
"""The attributes :func:`safe_html` keeps: none can load or run anything."""


def _one_line(value: object) -> str:
    """``value`` as text on one line: line breaks and other control characters become one space."""
    return _CONTROL.sub(" ", str(value))


def md_text(value: object) -> str:
    """``value`` as Markdown that reads as exactly that text, inside a line or a GFM table cell.

    Line breaks become spaces (no new block can start); ``& < > |`` become entities (no HTML, no autolink, no
    cell break); the characters that open code, emphasis, links, strike-through, math or headings are
    backslash-escaped, and so is a leading list or heading marker.
    """
    text = _one_line(value).strip()
    text = "".join(_ENTITIES.get(ch) or ("\\" + ch if ch in _BACKSLASHED else ch) for ch in text)
    m = _LEADING.match(text)
    if m and m.group(1) in "-+=":
        return "\\" + text
    return f"{text[:m.end()]}\\{text[m.end():]}" if m else text


def md_code(value: object) -> str:
    """``value`` as an inline code span, on one line, whose fence is longer than any backtick run inside.

    Code spans show their text literally (no HTML, no links); for a paragraph, not a table cell (a ``|`` there
    would still split the cell: use :func:`md_text`).
    """
    text = _one_line(value)
    if not text.strip():
        return "` `"
    ticks = "`" * (1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def md_fence(text: str, lang: str = "") -> str:
    """``text`` in a fenced code block whose fence is longer than any backtick run inside (no line can close it)."""
    ticks = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def safe_html(fragment: str) -> str:
    """An HTML fragment with only harmless tags and attributes left (tables, text markup), every text escaped.

    ``bleach`` (the sanitiser nbconvert's stack already installs) does the work: scripts, styles, comments, links,
    images, frames and event attributes are dropped; the text of a dropped tag stays, escaped, so it shows as
    text and runs nothing. What a page never shows as text, the content of ``<style>``, ``<script>``, ``<template>``
    and ``<noscript>`` (a pandas table's CSS), goes with its tag (BeautifulSoup, before bleach).
    """
    import bleach
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(fragment, "html.parser")
    for hidden in soup(list(HIDDEN_TAGS)):
        hidden.decompose()
    return bleach.clean(str(soup), tags=HTML_TAGS, attributes=sorted(HTML_ATTRIBUTES), protocols=[], strip=True,
                        strip_comments=True)


HIDDEN_TAGS = frozenset({"script", "style", "template", "noscript"})
"""Elements whose content a browser does not show as text: :func:`safe_html` drops them whole."""


__all__ = ["HIDDEN_TAGS", "HTML_ATTRIBUTES", "HTML_TAGS", "md_code", "md_fence", "md_text", "safe_html"]
