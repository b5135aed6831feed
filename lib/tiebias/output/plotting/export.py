"""Static PNGs of plotly figures (e.g. the README's images), at their own size, without the toolbar.

The drawing is :func:`tiebias.output.figure_png.figures_to_png` (plotly.js in headless Chromium, the same as the
walkthrough's pictures); this module sizes the figures and writes the README's images from a run.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from tiebias.output.figure_png import chromium, figures_to_png
from tiebias.run.layout import RunLayout

__all__ = ["DEFAULT_HEIGHT", "DEFAULT_WIDTH", "chromium", "from_run", "sized", "write_png", "write_pngs"]

DEFAULT_WIDTH, DEFAULT_HEIGHT = 1000, 450  # pixels, when the figure sets no size (about a notebook's output area)


def sized(fig: go.Figure) -> dict:
    """The figure's JSON with its width and height set (``DEFAULT_WIDTH`` / ``DEFAULT_HEIGHT`` when it has none)."""
    out = go.Figure(fig).update_layout(width=int(fig.layout.width or DEFAULT_WIDTH),
                                       height=int(fig.layout.height or DEFAULT_HEIGHT))
    return json.loads(out.to_json())


def write_pngs(figs: list[go.Figure], outs: list[str | Path]) -> list[Path]:
    """Write each figure as a PNG of exactly its size, in one browser start; RuntimeError naming the fix without
    Chromium."""
    images = figures_to_png([sized(f) for f in figs], scale=1)
    paths = [Path(o) for o in outs]
    for data, path in zip(images, paths, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return paths


def write_png(fig: go.Figure, out: str | Path) -> Path:
    """Write one figure as a PNG of exactly its size (:func:`write_pngs`)."""
    return write_pngs([fig], [out])[0]


def from_run(run_dir: str | Path, out_dir: str | Path, names: list[str] | None = None) -> list[Path]:
    """PNGs of a run's saved figures (``figures/<name>.json``, written by the notebooks) into ``out_dir``.

    ``names`` defaults to the PNGs already in ``out_dir`` (the README's images), so the same images are
    refreshed; a name the run has no figure for is reported and skipped.
    """
    import plotly.io as pio

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    layout = RunLayout(run_dir)
    if not layout.figure_path("x").parent.is_dir():
        raise ValueError(f"run_dir: {str(run_dir)!r} has no figures/ folder (run the notebooks on it first)")
    names = sorted(p.stem for p in out_dir.glob("*.png")) if names is None else names
    found = []
    for name in names:
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
    """``python -m tiebias.output.plotting.export RUN_DIR [OUT_DIR] [NAME ...]``: refresh the README's PNGs from a run."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path, nargs="?", default=Path("notebooks/figures"))
    ap.add_argument("names", nargs="*", help="figure names (default: the PNGs already in OUT_DIR)")
    args = ap.parse_args(argv)
    from_run(args.run_dir, args.out_dir, args.names or None)


if __name__ == "__main__":
    main()
