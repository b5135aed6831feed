"""Plotly figures, one module per analysis (training, alignment, lens, ablation); ``style`` holds the shared look."""

from tiebias.output.plotting import ablation, alignment, export, lens, style, training

__all__ = ["ablation", "alignment", "export", "lens", "style", "training"]
