"""Plotly figures as PNG images drawn by plotly.js itself (``Plotly.toImage``, what kaleido does) in one headless
Chromium start: no toolbar, no blank margin, no second browser download."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_WIDTH, DEFAULT_HEIGHT = 900, 500  # pixels, for a figure whose layout sets no size
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--virtual-time-budget=120000"]
PAGE = """<!doctype html><html><head><meta charset="utf-8"><script src="plotly.min.js"></script></head><body>
<pre id="out">pending</pre><script>
const FIGS = %s, SCALE = %s;
Promise.all(FIGS.map(f => Plotly.toImage({data: f.data || [], layout: f.layout || {}},
    {format: "png", scale: SCALE, width: (f.layout || {}).width || %d, height: (f.layout || {}).height || %d})))
  .then(urls => { document.getElementById("out").textContent = JSON.stringify(urls); })
  .catch(e => { document.getElementById("out").textContent = "ERROR " + e; });
</script></body></html>"""


def chromium() -> str:
    """Path of a Chromium (or Chrome) binary; a RuntimeError saying how to install one otherwise."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("no Chromium found: figures are drawn as PNG by plotly.js in headless Chromium; install it "
                       "(apt-get install chromium, or brew install --cask chromium)")


def figures_to_png(figures: Sequence[dict[str, Any]], scale: float = 1.5, timeout: float = 600) -> list[bytes]:
    """PNG images of plotly figures (their JSON: ``data`` and ``layout``), in order, drawn in one browser start."""
    from plotly.offline import get_plotlyjs

    if not figures:
        return []
    if not isinstance(scale, (int, float)) or not 0.25 <= scale <= 4:
        raise ValueError(f"scale: {scale!r} is not allowed; need a number in [0.25, 4]")
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="tiebias-png-") as tmp:
        folder = Path(tmp)
        (folder / "plotly.min.js").write_text(get_plotlyjs(), encoding="utf-8")
        page = folder / "figures.html"
        page.write_text(PAGE % (json.dumps(list(figures)).replace("</", "<\\/"), scale, DEFAULT_WIDTH,
                                DEFAULT_HEIGHT), encoding="utf-8")
        res = subprocess.run([browser, *FLAGS, f"--user-data-dir={folder / 'profile'}", "--dump-dom",
                              page.as_uri()], capture_output=True, text=True, timeout=timeout)
    found = re.search(r'<pre id="out">(.*?)</pre>', res.stdout, re.S)
    text = html.unescape(found.group(1)) if found else ""
    if not text.startswith("["):
        raise RuntimeError(f"Chromium did not draw the figures ({text[:200] or res.stderr[-300:]})")
    urls = json.loads(text)
    return [base64.b64decode(u.split(",", 1)[1]) for u in urls]
