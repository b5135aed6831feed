"""Notebook conveniences: a plotly renderer that works in JupyterLab and in exported HTML."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio


def setup() -> None:
    """Render plotly figures live (JupyterLab mimetype) and in nbconvert HTML (inline plotly.js); quiet HF bars."""
    from transformers.utils import logging as hf_logging

    pio.renderers.default = "plotly_mimetype+notebook"
    pio.templates.default = "plotly_white"
    hf_logging.disable_progress_bar()  # no "Loading weights" bar per model load in executed notebooks


def save_figure(fig: go.Figure, folder: str | Path, name: str) -> Path:
    """Write a figure as standalone HTML (plotly.js once per folder, works offline) and as plotly JSON."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fig.write_html(folder / f"{name}.html", include_plotlyjs="directory", full_html=True)
    fig.write_json(folder / f"{name}.json")
    return folder / f"{name}.html"
