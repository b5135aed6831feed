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


def from_run(run_dir: str | Path, out_dir: str | Path, names: list[str] | None = None) -> list[Path]:
    """PNGs of a run's saved figures (``figures/<name>.json``, written by the notebooks) into ``out_dir``.

    ``names`` defaults to the PNGs already in ``out_dir`` (the README's images), so the same images are
    refreshed; a name the run has no figure for is reported and skipped.
    """
    import plotly.io as pio

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not (run_dir / "figures").is_dir():
        raise ValueError(f"run_dir: {str(run_dir)!r} has no figures/ folder (run the notebooks on it first)")
    names = sorted(p.stem for p in out_dir.glob("*.png")) if names is None else names
    written = []
    for name in names:
        src = run_dir / "figures" / f"{name}.json"
        if not src.is_file():
            print(f"skipped {name}: {src} does not exist")
            continue
        written.append(write_png(pio.read_json(src), out_dir / f"{name}.png"))
        print(f"wrote {written[-1]}")
    return written


def main(argv: list[str] | None = None) -> None:
    """``python -m tiebias.plotting.export RUN_DIR [OUT_DIR] [NAME ...]``: refresh the README's PNGs from a run."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path, nargs="?", default=Path("notebooks/figures"))
    ap.add_argument("names", nargs="*", help="figure names (default: the PNGs already in OUT_DIR)")
    args = ap.parse_args(argv)
    from_run(args.run_dir, args.out_dir, args.names or None)


if __name__ == "__main__":
    main()
