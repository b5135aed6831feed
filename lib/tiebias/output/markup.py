"""Untrusted run-folder text (names, config values, notebook HTML) made safe for the kit's Markdown and HTML pages:
every piece goes through :func:`md_text`, :func:`md_code`, :func:`md_fence`, :func:`safe_html` or :func:`render`."""

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


def md_text(value: object) -> str:
    """``value`` as Markdown that reads as that text in a line or GFM table cell: line breaks become spaces,
    ``& < > |`` entities; what opens code, emphasis, links, math, headings or a list is backslash-escaped."""
    text = _CONTROL.sub(" ", str(value)).strip()
    text = "".join(_ENTITIES.get(ch) or ("\\" + ch if ch in _BACKSLASHED else ch) for ch in text)
    m = _LEADING.match(text)
    if m and m.group(1) in "-+=":
        return "\\" + text
    return f"{text[:m.end()]}\\{text[m.end():]}" if m else text


def md_code(value: object) -> str:
    """``value`` as a one-line code span fenced longer than any backtick run inside (not for a table cell)."""
    text = _CONTROL.sub(" ", str(value))
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
    """An HTML fragment with only harmless tags and attributes left, every text escaped; a script's or style's
    content goes with its tag (``bleach`` would keep it as text)."""
    import bleach
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(fragment, "html.parser")
    for hidden in soup(["script", "style", "template", "noscript"]):
        hidden.decompose()
    return bleach.clean(str(soup), tags=HTML_TAGS, attributes=sorted(HTML_ATTRIBUTES), protocols=[], strip=True,
                        strip_comments=True)


_PAGES = Path(__file__).with_name("templates")
_OPTIONS = dict(loader=jinja2.FileSystemLoader(_PAGES), undefined=jinja2.StrictUndefined, trim_blocks=True,
                lstrip_blocks=True, keep_trailing_newline=True)
_HTML = jinja2.Environment(autoescape=True, **_OPTIONS)
_MARKDOWN = jinja2.Environment(autoescape=False, **_OPTIONS,
                               finalize=lambda v: v if isinstance(v, Markup) else md_text(v))
_MARKDOWN.filters["code"] = lambda v: Markup(md_code(v))


def render(template: str, **values: object) -> str:
    """A page from ``templates/<template>``, every value escaped (HTML) or through :func:`md_text` (``*.md.j2``;
    ``|code``: :func:`md_code`); a :class:`~markupsafe.Markup` value is written as it is."""
    return (_MARKDOWN if template.endswith(".md.j2") else _HTML).get_template(template).render(**values)
