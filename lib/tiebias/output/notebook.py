"""Notebook conveniences: plotly figures as a mimetype in notebooks, with plotly.js added once in HTML exports.

In JupyterLab (and Notebook 7, VS Code) the ``jupyterlab-plotly`` extension shipped with plotly renders
the ``application/vnd.plotly.v1+json`` mimetype, so saved notebooks hold each figure's data only, not the
4.8 MB plotly.js bundle the ``notebook`` renderer would embed. nbconvert does not know that mimetype:
:func:`export_html` adds an HTML rendering of every plotly output and plotly.js once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from tiebias.config import profiles
from tiebias.run import kernel_times
from tiebias.run.files import RunFolderError, write_text_atomic

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly.min.js"


def table_number(x: float) -> str:
    """A float as tables print it: at most 6 decimals, trailing zeros dropped, never "-0" (a rounded -0.0002)."""
    return np.format_float_positional(float(x) + 0.0, precision=6, unique=True, trim="-")


def setup() -> None:
    """Render plotly figures as the plotly mimetype (drawn by JupyterLab, no plotly.js in the notebook), print table
    floats with :func:`table_number` (a tiny negative rounded by ``.round(3)`` shows 0, not -0.0); quiet HF bars; once
    the notebook's parameters are resolved, its cells' times are recorded (:mod:`tiebias.run.kernel_times`)."""
    from transformers.utils import logging as hf_logging

    pio.renderers.default = "plotly_mimetype"
    pio.templates.default = "plotly_white"
    pd.set_option("display.float_format", table_number)
    hf_logging.disable_progress_bar()  # no "Loading weights" bar per model load in executed notebooks
    if kernel_times.record_cells not in profiles.RESOLVED:  # in a JupyterLab kernel: its cells' times, for the report
        profiles.RESOLVED.append(kernel_times.record_cells)


def save_figure(fig: go.Figure, folder: str | Path, name: str) -> Path:
    """Write a figure as standalone HTML (plotly.js once per folder, works offline) and as plotly JSON.

    Args:
        fig: the plotly figure.
        folder: where the files go (made if missing; ``plotly.min.js`` is written beside them).
        name: the file name without extension (``<name>.html`` and ``<name>.json``).

    Returns:
        The HTML file's path.
    """
    folder = Path(folder)
    if folder.is_symlink():
        raise RunFolderError(f"{folder}: is a symbolic link (to {os.readlink(folder)}); the kit never writes through a "
                             "link, which could put its files outside the run folder. Replace the link by a real "
                             "folder (rm that path) and run again.")
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / f"{name}.html", fig.to_html(include_plotlyjs="directory", full_html=True))
    write_text_atomic(folder / f"{name}.json", fig.to_json())
    write_plotlyjs(folder)
    return folder / f"{name}.html"


def write_plotlyjs(folder: Path) -> None:
    """``plotly.min.js`` into ``folder`` for the pages there, unless a file of that name is there (a link there is
    replaced, never written through: :func:`tiebias.run.files.write_text_atomic`)."""
    js = folder / PLOTLY_JS
    if js.is_symlink() or not js.exists():
        from plotly.offline import get_plotlyjs

        write_text_atomic(js, get_plotlyjs())


def _plotly_html_preprocessor(include_plotlyjs: bool | str) -> Any:
    """An nbconvert preprocessor giving every plotly output an HTML rendering; plotly.js goes with the first."""
    from nbconvert.preprocessors import Preprocessor

    class PlotlyHTML(Preprocessor):  # type: ignore[misc]
        """Adds ``text/html`` (a plotly div) next to each plotly mimetype output that has none."""

        def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
            """Render the figures in order, plotly.js (or its script tag) with the first only."""
            first = True
            for cell in nb.cells:
                for out in cell.get("outputs", []):
                    bundle = out.get("data", {})
                    if PLOTLY_MIME in bundle and "text/html" not in bundle:
                        bundle["text/html"] = pio.to_html(bundle[PLOTLY_MIME], full_html=False, validate=False,
                                                          include_plotlyjs=include_plotlyjs if first else False)
                        first = False
            return nb, resources

    return PlotlyHTML()


def export_html(notebook_path: str | Path, out_path: str | Path,
                plotlyjs: Literal["directory", "inline"] = "directory") -> Path:
    """Convert an executed notebook to HTML with its plotly figures drawn.

    ``plotlyjs="directory"`` writes ``plotly.min.js`` once next to the page (shared by every page in that
    folder, works offline); ``"inline"`` embeds it once in the page (self-contained, 4.8 MB larger).
    """
    from nbconvert import HTMLExporter

    if plotlyjs not in ("directory", "inline"):
        raise ValueError(f"plotlyjs: must be 'directory' or 'inline', got {plotlyjs!r}")
    notebook_path, out_path = Path(notebook_path), Path(out_path)
    if not notebook_path.is_file():
        raise ValueError(f"notebook_path: {str(notebook_path)!r} is not a file")
    exporter = HTMLExporter()
    exporter.register_preprocessor(_plotly_html_preprocessor("directory" if plotlyjs == "directory" else True),
                                   enabled=True)
    body, _ = exporter.from_filename(str(notebook_path))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_path, body)
    if plotlyjs == "directory":
        write_plotlyjs(out_path.parent)
    return out_path
