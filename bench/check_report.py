"""Open a run's report and figures in headless Chromium and check that every plotly figure draws.

For each HTML file (report.html, report/*.html, figures/*.html) Chromium loads the page, runs its
scripts, and dumps the DOM; a plotly figure has drawn when its ``plotly-graph-div`` holds a
``main-svg``. Optionally writes PNGs of the figures (``--screenshots DIR``, drawn from each figure's JSON by
``tiebias.output.plotting.export``: no toolbar, no blank margin); ``python -m tiebias.output.plotting.export RUN_DIR``
refreshes just the README's images.
Skips with exit code 0 and a message when no Chromium is installed (``apt-get install chromium``).

    python bench/check_report.py runs/default [--screenshots notebooks/figures]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=15000"]


def chromium() -> str | None:
    """Path of a Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def rendered_dom(browser: str, page: Path) -> str:
    """The DOM after the page's scripts ran (plotly draws into SVG elements)."""
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
                             capture_output=True, text=True, timeout=180)
    return res.stdout


def screenshot(page: Path, out: Path) -> None:
    """PNG of the figure saved next to ``page`` (``<name>.json``), at its own size, without the plotly toolbar."""
    import plotly.io as pio

    from tiebias.output.plotting import export

    export.write_pngs([pio.read_json(page.with_suffix(".json"))], [out])


def check(run_dir: Path, shots: Path | None = None) -> list[tuple[str, int, int]]:
    """(page, plotly figures, figures drawn) for every page; raises SystemExit(1) if any did not draw."""
    browser = chromium()
    if browser is None:
        print("no Chromium found: skipped (apt-get install chromium)")
        return []
    pages = [run_dir / "report.html", *sorted((run_dir / "report").glob("*.html")),
             *sorted((run_dir / "figures").glob("*.html"))]
    rows = []
    for page in pages:
        if not page.exists():
            continue
        dom = rendered_dom(browser, page)
        starts = [m.start() for m in re.finditer(r'class="[^"]*plotly-graph-div', dom)] + [len(dom)]
        figs = len(starts) - 1
        # a figure has drawn when its div holds plotly's SVG before the next figure's div begins
        drawn = sum('class="main-svg"' in dom[a:b] for a, b in zip(starts, starts[1:], strict=False))
        iframes = len(re.findall(r"<iframe", dom))
        rows.append((str(page.relative_to(run_dir)), figs, drawn))
        status = "ok" if drawn >= figs else "NOT DRAWN"
        extra = f", {iframes} embedded figure pages" if iframes else ""
        print(f"{status:10s} {page.relative_to(run_dir)}: {figs} plotly figures, {drawn} drawn{extra}")
        if shots is not None and page.parent.name == "figures":
            shots.mkdir(parents=True, exist_ok=True)
            screenshot(page, shots / f"{page.stem}.png")
    bad = [r for r in rows if r[2] < r[1]]
    if bad:
        print(f"{len(bad)} page(s) with figures that did not draw")
        raise SystemExit(1)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--screenshots", type=Path, default=None, help="write PNGs of figures/*.html here")
    args = ap.parse_args()
    if not (args.run_dir / "report.html").exists():
        print(f"{args.run_dir}: no report.html (run `make study` first)", file=sys.stderr)
        raise SystemExit(2)
    check(args.run_dir, args.screenshots)


if __name__ == "__main__":
    main()
