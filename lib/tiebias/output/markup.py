"""Text from a run folder made safe to put into the Markdown and HTML pages the kit writes.

A run folder is untrusted: its name, the profile, preset and corpus names in its config, a claim's status or unit,
a notebook's HTML output may hold backticks, HTML tags or Markdown links. Renderers that pass raw HTML through
(markdown-it and mistune as configured by many sites, a local preview) would run their scripts. Every piece of such
text goes through one of these before it reaches a page: :func:`md_text` (inside a line or a table cell),
:func:`md_code` (an inline code span), :func:`md_fence` (a code block), :func:`safe_html` (an HTML output), or a
page's template through :func:`render` (jinja2: HTML autoescaped, Markdown through :func:`md_text`).
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
from markupsafe import Markup

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;"}
_BACKSLASHED = set("\\`*_[]~$#")
_LEADING = re.compile(r"^([-+=]|\d{1,9}(?=[.)]))")
HTML_TAGS = frozenset({"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "div",
                       "span", "p", "br", "hr", "b", "i", "em", "strong", "code", "pre", "sub", "sup", "small",
                       "ul", "ol", "li", "details", "summary", "h1", "h2", "h3", "h4", "h5", "h6"})
HTML_ATTRIBUTES = frozenset({"colspan", "rowspan", "border", "class", "align", "valign", "open"})


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

    ``bleach`` drops scripts, styles, comments, links, images, frames and event attributes, keeping a dropped tag's
    text, escaped; what a page never shows as text (a ``<style>``'s or ``<script>``'s content) goes with its tag.
    """
    import bleach
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(fragment, "html.parser")
    for hidden in soup(["script", "style", "template", "noscript"]):
        hidden.decompose()
    return bleach.clean(str(soup), tags=HTML_TAGS, attributes=sorted(HTML_ATTRIBUTES), protocols=[], strip=True,
                        strip_comments=True)


def _md_value(value: object) -> object:
    return value if isinstance(value, Markup) else md_text(value)


_PAGES = Path(__file__).with_name("templates")
_OPTIONS = dict(loader=jinja2.FileSystemLoader(_PAGES), undefined=jinja2.StrictUndefined, trim_blocks=True,
                lstrip_blocks=True, keep_trailing_newline=True)
_HTML = jinja2.Environment(autoescape=True, **_OPTIONS)
_MARKDOWN = jinja2.Environment(autoescape=False, finalize=_md_value, **_OPTIONS)
_MARKDOWN.filters["code"] = lambda v: Markup(md_code(v))


def render(template: str, **values: object) -> str:
    """A page from ``templates/<template>``: in HTML every value escaped (autoescape); in Markdown (``*.md.j2``) every
    value through :func:`md_text`, or :func:`md_code` with ``|code`` (a :class:`~markupsafe.Markup` value is written
    as it is: the kit's own text or a table already escaped)."""
    return (_MARKDOWN if template.endswith(".md.j2") else _HTML).get_template(template).render(**values)
