"""report.html and its notebook pages load nothing from the network; widgets show their saved state."""

from pathlib import Path

import nbformat
import plotly.graph_objects as go
from _rendered import remote_references
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tiebias.output import notebook, report
from tiebias.output.static_pages import (
    WIDGET_STATE,
    WIDGET_VIEW,
    expand_widgets,
    export_offline_html,
)
from tiebias.run.folder import Run
from tiebias.verdicts import records


def _model(name: str, **state: object) -> dict:
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
            "state": state}


def executed_notebook() -> nbformat.NotebookNode:
    """A small executed notebook as papermill saves one: a tqdm bar, an explorer and a plotly figure."""
    models = {
        "bar": _model("HBoxModel", children=["IPY_MODEL_left", "IPY_MODEL_prog", "IPY_MODEL_right"]),
        "left": _model("HTMLModel", value="tied-s0: 100%"),
        "prog": _model("FloatProgressModel", value=40, min=0, max=40),
        "right": _model("HTMLModel", value="\u200740/40\u2007[00:01&lt;00:00,\u200731.18it/s]"),
        "box": _model("VBoxModel", children=["IPY_MODEL_text", "IPY_MODEL_msg", "IPY_MODEL_out"]),
        "text": _model("TextModel", description="word", value="king"),
        "msg": _model("HTMLModel", value="<span>Type a word, then Enter.</span>"),
        "out": _model("OutputModel", outputs=[{"output_type": "stream", "name": "stdout", "text": "queen 0.91\n"}]),
    }
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]))

    def view(mid: str) -> object:
        return new_output("display_data", {WIDGET_VIEW: {"model_id": mid, "version_major": 2, "version_minor": 0},
                                           "text/plain": f"{mid} at 0%"})

    code = new_code_cell("train()", outputs=[view("bar")], execution_count=1)
    explorer = new_code_cell("explore()", outputs=[view("box")], execution_count=2)
    plot = new_code_cell("fig", outputs=[new_output("display_data", {notebook.PLOTLY_MIME: fig.to_plotly_json()})],
                         execution_count=3)
    nb = new_notebook(cells=[new_markdown_cell("# Title\n\nThe cosine $\\cos(a, b)$."), code, explorer, plot])
    nb.metadata["widgets"] = {WIDGET_STATE: {"state": models, "version_major": 2, "version_minor": 0}}
    return nb


def test_remote_references_finds_what_a_browser_would_fetch() -> None:
    page = ('<script src="https://cdn/require.js"></script><script src="plotly.min.js"></script>'
            '<link rel="stylesheet" href="//cdn/x.css"><a href="https://example.org">a link is not fetched</a>'
            '<script type="module">const m = await import("https://cdn/mermaid.mjs");</script>')
    found = remote_references(page)
    assert len(found) == 3 and all("plotly.min.js" not in f for f in found)


def test_widgets_expand_to_their_saved_state() -> None:
    nb = expand_widgets(executed_notebook())
    assert "widgets" not in nb.metadata
    bar = nb.cells[1].outputs[0]["text"]
    assert bar.startswith("tied-s0: 100% |" + "█" * 20 + "| 40/40 [00:01<00:00, 31.18it/s]")
    texts = [o.get("text") or o["data"]["text/html"] for o in nb.cells[2].outputs]
    assert texts[0].startswith("word: [king]") and "Type a word" in texts[1] and texts[2] == "queen 0.91\n"


def test_notebook_page_needs_no_network(tmp_path: Path) -> None:
    src = tmp_path / "nb.ipynb"
    nbformat.write(executed_notebook(), src)
    from nbconvert import HTMLExporter

    online, _ = HTMLExporter().from_filename(str(src))
    assert remote_references(online)  # nbconvert's own page loads require.js, MathJax and widgets from CDNs
    page = export_offline_html(src, tmp_path / "offline" / "nb.html").read_text()
    assert remote_references(page) == []
    assert 'src="plotly.min.js"' in page and (tmp_path / "offline" / notebook.PLOTLY_JS).stat().st_size > 1e6
    assert "plotly-graph-div" in page and "31.18it/s" in page and "queen 0.91" in page


def test_report_pages_need_no_network(fresh_run: Run) -> None:
    fresh_run.notebooks_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(executed_notebook(), fresh_run.notebooks_dir / "01_train.ipynb")
    records.record(fresh_run, records.Headline("claim2_gradient_flow", value=0.8, threshold=0.5, statement="s"))
    pages = [report.write_report(fresh_run), *sorted(fresh_run.report_dir.glob("*.html"))]
    assert [p.name for p in pages] == ["report.html", "01_train.html"]
    for p in pages:
        assert remote_references(p.read_text()) == [], p
    assert "40/40" in pages[1].read_text()
