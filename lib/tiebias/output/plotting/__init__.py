"""Plotly figures, one module per analysis; ``style`` holds the shared look, ``export`` (a command) the README's PNGs."""

from tiebias.output.plotting import ablation, alignment, lens, style, training

__all__ = ["ablation", "alignment", "lens", "style", "training"]
