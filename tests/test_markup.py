"""Text from a run folder in Markdown and HTML: it reads as itself and runs nothing, whatever it holds."""

import pytest
from _rendered import HOSTILE, rendered, tags, unsafe

from tiebias.output.markup import md_code, md_fence, md_text, safe_html


def _page(text: str) -> str:
    """A page with ``text`` in a paragraph, in a table cell and as a code span."""
    return (f"Run folder {md_code(text)}, profile **{md_text(text)}**.\n\n| a | b |\n| --- | --- |\n"
            f"| {md_text(text)} | **{md_text(text)}** |\n\n{md_fence(text, 'sh')}\n")


@pytest.mark.parametrize("text", [HOSTILE, "`", "``x``", " lead", "- list", "1. one", "a|b", "&amp;", "\\`x`\\", "",
                                  "# title", "<!-- c", "$x$ ~~s~~ _u_ [^1]"])
def test_untrusted_text_renders_as_itself_and_runs_nothing(text: str) -> None:
    for renderer, page in rendered(_page(text)).items():
        assert unsafe(page) == [], (renderer, text)
        found = [t for t, _ in tags(page)]
        assert found.count("p") == 1 and found.count("code") == 2 and found.count("td") == 2, (renderer, found)
        assert found.count("tr") == 2 and not {"h1", "ul", "ol", "em", "a", "del", "img"} & set(found), (renderer, found)


def test_the_text_survives_escaping() -> None:
    page = rendered(f"{md_text('a <b> & c|d [e](f) *g*')}\n\n{md_code('x `y` z')}")["markdown-it"]
    assert "a &lt;b&gt; &amp; c|d [e](f) *g*" in page and "<code>x `y` z</code>" in page
    assert md_text("line one\nline two\r\n- x") == "line one line two - x"
    assert md_text("plain words, 0.5 (i - 1)") == "plain words, 0.5 (i - 1)"  # ordinary text is left as it is


def test_a_code_span_fence_is_longer_than_any_backtick_run() -> None:
    assert md_code("a``b") == "```a``b```" and md_code("`a") == "`` `a ``" and md_code("runs/class") == "`runs/class`"
    assert md_fence("```\nx") == "````\n```\nx\n````"


def test_safe_html_keeps_tables_and_drops_what_runs() -> None:
    frag = ('<style>.x{color:red}</style><div><table border="1" class="dataframe" onclick="alert(1)">'
            '<tr style="text-align: right;"><th>a&lt;b</th><td colspan="2">1</td></tr></table></div>'
            '<script>alert(1)</script><img src=x onerror="alert(1)"><iframe src="https://x.org"></iframe>'
            '<a href="javascript:alert(1)">link</a><br/>after<svg onload="alert(1)"></svg><!-- note -->')
    out = safe_html(frag)
    # a style's or script's content goes with it (a page never shows it); another dropped tag's text stays, as text
    assert out == ('<div><table border="1" class="dataframe"><tbody><tr><th>a&lt;b</th><td colspan="2">1</td></tr>'
                   '</tbody></table></div>link<br>after')
    assert unsafe(out) == [] and "<script" not in out and "onerror" not in out and "javascript:" not in out
