"""The run folder, the interface every notebook reads and writes: ``layout`` names its paths, ``folder``'s ``Run``
reads and writes under a writer lock, ``files`` the strict and atomic file I/O, ``guard`` which folders may be written,
``inventory`` which models are finished, ``history`` what ran on it (study commands, JupyterLab's cell times)."""

from tiebias.run import inventory
from tiebias.run.folder import Run

__all__ = ["Run", "inventory"]
