"""Pages as common Markdown renderers turn them into HTML (raw HTML passed through, as many sites configure them),
and what in that HTML could run or load something."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import mistune
from markdown_it import MarkdownIt

HOSTILE = ("x`<script>alert(1)</script>`` <img src=x onerror=alert(1)> [click](javascript:alert(1)) "
           "<a href='javascript:alert(2)'>a</a>\n# injected heading\n\n| cell | break |\n*em* &lt;b&gt;")
"""Text that closes a code span, opens tags, links to script, starts new blocks and breaks table rows."""
RUNNABLE = {"script", "style", "iframe", "object", "embed", "form", "input", "textarea", "svg", "math", "link",
            "meta", "base"}


def rendered(markdown: str) -> dict[str, str]:
    """The page's HTML from markdown-it (CommonMark, raw HTML on, GFM tables) and from mistune's default HTML."""
    return {"markdown-it": MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown),
            "mistune": mistune.html(markdown)}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))


def tags(page: str) -> list[tuple[str, dict[str, str]]]:
    """Every start tag of an HTML page with its attributes."""
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser.tags


def unsafe(page: str, images: str = "images/") -> list[str]:
    """What in an HTML page could run script or load from elsewhere: such tags, event attributes, script links,
    images from anywhere but ``images``."""
    bad = []
    for tag, attrs in tags(page):
        if tag in RUNNABLE:
            bad.append(f"<{tag}>")
        bad += [f"<{tag} {k}>" for k in attrs if k.startswith("on")]
        bad += [f"<{tag} {k}={v!r}>" for k, v in attrs.items()
                if k in ("href", "src") and "".join(v.split()).lower().startswith(("javascript:", "vbscript:", "data:"))]
        if tag == "img" and not attrs.get("src", "").startswith(images):
            bad.append(f"<img src={attrs.get('src')!r}>")
    return bad


REMOTE = re.compile(r"""(?:<script[^>]*\bsrc|<link[^>]*\bhref|<iframe[^>]*\bsrc)\s*=\s*["']?(https?:)?//"""
                     r"""|\bimport\b[^;\n]*["'](https?:)?//|@import\s+(?:url\()?["']?(https?:)?//""", re.I)


def remote_references(page: str) -> list[str]:
    """The script, stylesheet, frame or module URLs a page would fetch from the network (http, https, //)."""
    return [m.group(0) for m in REMOTE.finditer(page)]


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG image, from its header."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("data: not a PNG image")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
