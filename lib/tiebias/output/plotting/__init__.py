"""Plotly figures, one module per analysis (training, alignment, lens, ablation); ``style`` holds the shared look.

``export`` (``python -m tiebias.output.plotting.export RUN``, the README's images) is a command, not imported here."""

from tiebias.output.plotting import ablation, alignment, lens, style, training

__all__ = ["ablation", "alignment", "lens", "style", "training"]
