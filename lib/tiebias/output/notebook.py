"""Notebook setup (plotly figures as their mimetype, not the 4.8 MB plotly.js; floats without "-0") and figures
saved as offline HTML and JSON."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from tiebias.config import profiles
from tiebias.run import history
from tiebias.run.files import RunFolderError, write_text_atomic

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly.min.js"


def table_number(x: float) -> str:
    """A float as tables print it: at most 6 decimals, trailing zeros dropped, never "-0" (a rounded -0.0002)."""
    return np.format_float_positional(float(x) + 0.0, precision=6, unique=True, trim="-")


def setup() -> None:
    """Plotly figures as their mimetype, floats by :func:`table_number`, no HF progress bars, cells' times recorded."""
    from transformers.utils import logging as hf_logging

    pio.renderers.default = "plotly_mimetype"
    pio.templates.default = "plotly_white"
    pd.set_option("display.float_format", table_number)
    hf_logging.disable_progress_bar()  # no "Loading weights" bar per model load in executed notebooks
    if history.record_cells not in profiles.RESOLVED:  # in a JupyterLab kernel: its cells' times, for the report
        profiles.RESOLVED.append(history.record_cells)


def save_figure(fig: go.Figure, folder: str | Path, name: str) -> Path:
    """``<folder>/<name>.html`` (offline, ``plotly.min.js`` once per folder) and ``<name>.json``; a linked folder is
    refused.

    Args: fig: the figure; folder: where it goes; name: the file name without suffix.
    Returns: the path of ``<name>.html``."""
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
    """``plotly.min.js`` into ``folder`` unless there (a link there is replaced, never written through)."""
    js = folder / PLOTLY_JS
    if js.is_symlink() or not js.exists():
        from plotly.offline import get_plotlyjs

        write_text_atomic(js, get_plotlyjs())
