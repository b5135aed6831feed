"""Executed notebooks as pages that need no network: nbconvert's page without CDN scripts, each widget shown as its
saved state showed it, plotly figures drawn by the ``plotly.min.js`` beside the page."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _line(mid: str, models: dict) -> str:
    """A widget and its children as one line of text (a tqdm bar's HBox), a progress bar 20 cells wide."""
    m = models.get(mid, {})
    name, st = m.get("model_name", ""), m.get("state", {})
    if name in ("HBoxModel", "VBoxModel", "BoxModel"):
        return " ".join(t for t in (_line(c.removeprefix("IPY_MODEL_"), models) for c in st.get("children", [])) if t)
    if name in ("FloatProgressModel", "IntProgressModel"):
        lo, hi, v = st.get("min", 0) or 0, st.get("max", 1) or 1, st.get("value", 0) or 0
        filled = round(20 * min(max((v - lo) / (hi - lo), 0.0), 1.0)) if hi > lo else 20
        return "|" + "█" * filled + " " * (20 - filled) + "|"
    if name in ("HTMLModel", "LabelModel"):  # tags dropped, entities and figure spaces undone
        return html.unescape(re.sub(r"<[^>]+>", "", str(st.get("value", "")))).replace("\u2007", " ").replace(
            "\u200b", "").strip()
    return ""


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
        line = f"{st.get('description') or 'input'}: [{shown}]  (a text box: type into it in the running notebook)"
    elif name in ("HTMLModel", "HTMLMathModel"):
        return [{"output_type": "display_data", "metadata": {}, "data": {"text/html": str(st.get("value", ""))}}]
    else:
        line = _line(model_id, models)
    return [{"output_type": "stream", "name": "stdout", "text": line + "\n"}] if line else []


def expand_widgets(nb: Any) -> Any:
    """Replace every widget output of a notebook by the outputs of its saved state; drop the widget state."""
    models = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for out in cell["outputs"] for o in (
                widget_outputs(out["data"][WIDGET_VIEW]["model_id"], models)
                if WIDGET_VIEW in out.get("data", {}) else [out])]
    return nb


def _offline(nb: Any, resources: dict) -> tuple[Any, dict]:
    """nbconvert preprocessor: widgets expanded, each plotly output drawn as HTML (the first loads plotly.min.js)."""
    import nbformat
    import plotly.io as pio

    from tiebias.output.notebook import PLOTLY_MIME

    nb = nbformat.from_dict(expand_widgets(nb))
    first = True
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            bundle = out.get("data", {})
            if PLOTLY_MIME in bundle and "text/html" not in bundle:
                bundle["text/html"] = pio.to_html(bundle[PLOTLY_MIME], full_html=False, validate=False,
                                                  include_plotlyjs="directory" if first else False)
                first = False
    return nb, resources


def export_offline_html(notebook_path: str | Path, out_path: str | Path) -> Path:
    """An executed notebook as an HTML page that works offline; plotly.js is written once beside it."""
    import jinja2
    from nbconvert import HTMLExporter

    from tiebias.output.notebook import write_plotlyjs
    from tiebias.run.files import write_text_atomic

    notebook_path, out_path = Path(notebook_path), Path(out_path)
    if not notebook_path.is_file():
        raise ValueError(f"notebook_path: {str(notebook_path)!r} is not a file")
    exporter = HTMLExporter(extra_loaders=[jinja2.FileSystemLoader(Path(__file__).with_name("templates"))],
                            template_file="offline.html.j2")
    exporter.register_preprocessor(_offline, enabled=True)
    body, _ = exporter.from_filename(str(notebook_path))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_path, body)
    write_plotlyjs(out_path.parent)
    return out_path
