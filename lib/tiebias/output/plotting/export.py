"""Plotly figures as PNGs drawn by plotly.js (``Plotly.toImage``, as kaleido does) in one headless Chromium start.

``python -m tiebias.output.plotting.export RUN_DIR [OUT_DIR] [NAME ...]``: the README's PNGs from a run's figures."""

from __future__ import annotations

import argparse
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

import plotly.graph_objects as go
import plotly.io as pio

from tiebias.run.layout import RunLayout

DEFAULT_WIDTH, DEFAULT_HEIGHT = 1000, 450  # pixels, a README figure that sets no size (about a notebook's output)
PAGE_WIDTH, PAGE_HEIGHT = 900, 500  # pixels, a figure drawn by figures_to_png whose layout sets no size
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
        if path := shutil.which(name):
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
        page.write_text(PAGE % (json.dumps(list(figures)).replace("</", "<\\/"), scale, PAGE_WIDTH, PAGE_HEIGHT),
                        encoding="utf-8")
        res = subprocess.run([browser, *FLAGS, f"--user-data-dir={folder / 'profile'}", "--dump-dom",
                              page.as_uri()], capture_output=True, text=True, timeout=timeout)
    found = re.search(r'<pre id="out">(.*?)</pre>', res.stdout, re.S)
    text = html.unescape(found.group(1)) if found else ""
    if not text.startswith("["):
        raise RuntimeError(f"Chromium did not draw the figures ({text[:200] or res.stderr[-300:]})")
    return [base64.b64decode(u.split(",", 1)[1]) for u in json.loads(text)]


def sized(fig: go.Figure) -> dict:
    """The figure's JSON with its width and height set (``DEFAULT_WIDTH`` / ``DEFAULT_HEIGHT`` when it has none)."""
    return json.loads(go.Figure(fig).update_layout(width=int(fig.layout.width or DEFAULT_WIDTH),
                                                   height=int(fig.layout.height or DEFAULT_HEIGHT)).to_json())


def write_pngs(figs: list[go.Figure], outs: list[str | Path]) -> list[Path]:
    """Each figure as a PNG of exactly its size, in one browser start; RuntimeError naming the fix without Chromium."""
    paths = [Path(o) for o in outs]
    for data, path in zip(figures_to_png([sized(f) for f in figs], scale=1), paths, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return paths


def from_run(run_dir: str | Path, out_dir: str | Path, names: list[str] | None = None) -> list[Path]:
    """PNGs of a run's saved figures into ``out_dir``; ``names`` None: those already there; missing ones skipped."""
    layout, out_dir = RunLayout(Path(run_dir)), Path(out_dir)
    if not layout.figure_path("x").parent.is_dir():
        raise ValueError(f"run_dir: {str(run_dir)!r} has no figures/ folder (run the notebooks on it first)")
    found = []
    for name in sorted(p.stem for p in out_dir.glob("*.png")) if names is None else names:
        if layout.figure_path(name, "json").is_file():
            found.append(name)
        else:
            print(f"skipped {name}: {layout.figure_path(name, 'json')} does not exist")
    written = write_pngs([pio.read_json(layout.figure_path(n, "json")) for n in found],
                         [out_dir / f"{n}.png" for n in found])
    for path in written:
        print(f"wrote {path}")
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="the README's PNGs redrawn from a run's saved figures")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path, nargs="?", default=Path("notebooks/figures"))
    ap.add_argument("names", nargs="*", help="figure names (default: the PNGs already in OUT_DIR)")
    args = ap.parse_args(argv)
    from_run(args.run_dir, args.out_dir, args.names or None)


if __name__ == "__main__":
    main()
