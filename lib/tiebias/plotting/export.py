"""Static PNGs of plotly figures (e.g. the README's images), drawn by headless Chromium.

The page holds the figure alone, at its own size, without the mode bar (toolbar), and the browser window
has exactly that size, so the image carries no toolbar and no blank margin. Chromium is used because
it is what renders the figures in the notebooks and the report (no kaleido needed).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import plotly.graph_objects as go

DEFAULT_WIDTH = 1000  # pixels, when the figure sets no width (about a notebook's output area)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--force-device-scale-factor=1",
         "--virtual-time-budget=15000"]


def chromium() -> str | None:
    """Path of a Chromium (or Chrome) binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def page(fig: go.Figure) -> tuple[str, int, int]:
    """A standalone HTML page holding ``fig`` alone (no mode bar, no page margin), with its width and height."""
    from plotly.offline import get_plotlyjs

    width = int(fig.layout.width or DEFAULT_WIDTH)
    height = int(fig.layout.height or 450)
    body = go.Figure(fig).update_layout(width=width, height=height).to_html(
        include_plotlyjs=False, full_html=False, config={"displayModeBar": False, "staticPlot": True})
    html = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><script>{get_plotlyjs()}</script>"
            f"<style>html,body{{margin:0;padding:0;overflow:hidden;background:white}}</style></head>"
            f"<body>{body}</body></html>")
    return html, width, height


def write_png(fig: go.Figure, out: str | Path, browser: str | None = None) -> Path:
    """Write ``fig`` as a PNG of exactly its size (layout width, default ``DEFAULT_WIDTH``, and height).

    Raises RuntimeError naming the fix when no Chromium is installed or it wrote no image.
    """
    browser = browser or chromium()
    if browser is None:
        raise RuntimeError("no Chromium found: install it (apt-get install -y chromium) to write PNGs")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    html, width, height = page(fig)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "figure.html"
        src.write_text(html, encoding="utf-8")
        res = subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                              f"--screenshot={out.resolve()}", src.as_uri()], capture_output=True, text=True,
                             timeout=180)
    if not out.is_file():
        raise RuntimeError(f"{browser} wrote no image for {out} (exit {res.returncode}): {res.stderr[-500:]}")
    return out
