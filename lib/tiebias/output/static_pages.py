"""Executed notebooks as pages that need no network: widgets drawn from their saved state, no CDN scripts.

nbconvert's HTML pages load require.js, MathJax, mermaid and the widget manager from CDNs; offline
the widgets (training progress bars, the explorers) collapse to nothing. :func:`expand_widgets`
replaces each widget output with ordinary outputs made from the widget's last saved state (a
progress bar as one text line, an explorer's text box, message and output area), so any renderer
shows them; :func:`export_offline_html` writes a page with plotly.js beside it and no remote script.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# the lab template's blocks that load scripts from CDNs, emptied (math stays as its TeX source)
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""

def _plain(value: str) -> str:
    """A widget's HTML value as one line of text (tags dropped, entities and figure spaces undone)."""
    return html.unescape(re.sub(r"<[^>]+>", "", value)).replace("\u2007", " ").replace("\u200b", "").strip()


def _bar(state: dict, width: int = 20) -> str:
    """A progress widget's last value as a text bar."""
    lo, hi, v = state.get("min", 0) or 0, state.get("max", 1) or 1, state.get("value", 0) or 0
    filled = round(width * min(max((v - lo) / (hi - lo), 0.0), 1.0)) if hi > lo else width
    return "|" + "█" * filled + " " * (width - filled) + "|"


def _line(mid: str, models: dict) -> str:
    """A widget (and its children) as one line of text: how a tqdm bar's HBox reads."""
    m = models.get(mid, {})
    name, st = m.get("model_name", ""), m.get("state", {})
    if name in ("HBoxModel", "VBoxModel", "BoxModel"):
        return " ".join(t for t in (_line(c.removeprefix("IPY_MODEL_"), models) for c in st.get("children", [])) if t)
    if name in ("FloatProgressModel", "IntProgressModel"):
        return _bar(st)
    if name in ("HTMLModel", "LabelModel"):
        return _plain(str(st.get("value", "")))
    return ""


def _stream(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text + "\n"}


def widget_outputs(model_id: str, models: dict) -> list[dict]:
    """The outputs a widget showed when the notebook was saved, from its state (empty if it was not saved)."""
    m = models.get(model_id)
    if m is None:
        return []
    name, st = m.get("model_name", ""), m.get("state", {})
    if name in ("VBoxModel", "BoxModel", "GridBoxModel"):
        return [o for c in st.get("children", []) for o in widget_outputs(c.removeprefix("IPY_MODEL_"), models)]
    if name == "OutputModel":
        return list(st.get("outputs", []))
    if name in ("TextModel", "TextareaModel"):
        shown = st.get("value") or f"({st.get('placeholder') or 'empty'})"
        return [_stream(f"{st.get('description') or 'input'}: [{shown}]  (a text box: type into it in the running "
                        "notebook)")]
    if name in ("HTMLModel", "HTMLMathModel"):
        return [{"output_type": "display_data", "metadata": {}, "data": {"text/html": str(st.get("value", ""))}}]
    line = _line(model_id, models)
    return [_stream(line)] if line else []


def expand_widgets(nb: Any) -> Any:
    """Replace every widget output of a notebook by the outputs of its saved state; drop the widget state."""
    models = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        if "outputs" not in cell:
            continue
        new = []
        for out in cell["outputs"]:
            view = out.get("data", {}).get(WIDGET_VIEW)
            new.extend(widget_outputs(view["model_id"], models) if view else [out])
        cell["outputs"] = new
    return nb


def export_offline_html(notebook_path: str | Path, out_path: str | Path) -> Path:
    """An executed notebook as an HTML page that works offline; plotly.js is written once beside it."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import Preprocessor

    from tiebias.output.notebook import _plotly_html_preprocessor, write_plotlyjs
    from tiebias.run.files import write_text_atomic

    class StaticWidgets(Preprocessor):  # type: ignore[misc]
        """Widget outputs as the outputs of their saved state (see :func:`expand_widgets`)."""

        def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
            """Expand the widgets before the page is rendered."""
            return nbformat.from_dict(expand_widgets(nb)), resources

    notebook_path, out_path = Path(notebook_path), Path(out_path)
    if not notebook_path.is_file():
        raise ValueError(f"notebook_path: {str(notebook_path)!r} is not a file")
    exporter = HTMLExporter(extra_loaders=[jinja2.DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})],
                            template_file="offline.html.j2")
    exporter.register_preprocessor(StaticWidgets(), enabled=True)
    exporter.register_preprocessor(_plotly_html_preprocessor("directory"), enabled=True)
    body, _ = exporter.from_filename(str(notebook_path))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_path, body)
    write_plotlyjs(out_path.parent)
    return out_path
