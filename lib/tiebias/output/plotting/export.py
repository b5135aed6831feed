"""``python -m tiebias.output.plotting.export RUN_DIR [OUT_DIR] [NAME ...]``: the README's PNGs redrawn from a run's
saved figures (``figures/<name>.json``), each at its own size (:func:`tiebias.output.figure_png.figures_to_png`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from tiebias.output.figure_png import figures_to_png
from tiebias.run.layout import RunLayout

DEFAULT_WIDTH, DEFAULT_HEIGHT = 1000, 450  # pixels, when the figure sets no size (about a notebook's output area)


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
    """PNGs of a run's saved figures into ``out_dir``; ``names`` (None: the PNGs already there, the README's images);
    a name the run has no figure for is reported and skipped."""
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
    ap = argparse.ArgumentParser(description=__doc__.split(":", 1)[1].strip())
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path, nargs="?", default=Path("notebooks/figures"))
    ap.add_argument("names", nargs="*", help="figure names (default: the PNGs already in OUT_DIR)")
    args = ap.parse_args(argv)
    from_run(args.run_dir, args.out_dir, args.names or None)


if __name__ == "__main__":
    main()
