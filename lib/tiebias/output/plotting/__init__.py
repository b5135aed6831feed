"""Plotly figures, one module per analysis (training, alignment, lens, ablation)."""
