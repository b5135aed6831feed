"""The named options a parameter picks from: alignment methods, lens recipes and readings, claim 4's ingredients."""

from __future__ import annotations

from typing import Any

METHODS: tuple[str, ...] = ("identity", "orthogonal", "linear")  # alignment maps (tiebias.align.maps.align)

LENS_RECIPES: dict[str, dict[str, Any]] = {
    "cpu": {"optimizer": "adam", "lr": 1e-2, "momentum": 0.9, "weight_decay": 1e-3},
    "package": {"optimizer": "sgd", "lr": 1.0, "momentum": 0.9, "weight_decay": 1e-3, "warmup_steps": 0},
}
"""Named lens-training recipes (:class:`tiebias.config.lens.LensFit` fields)."""

LENS_PROTOCOLS: tuple[str, ...] = ("package", "reference")  # how a lens's translators meet the hidden states

INGREDIENTS: dict[str, str] = {
    "warmup10": "warmup over 10% of the steps (the paper: 1,000 of 10,000)",
    "no_embedding_decay": "no weight decay on the embedding matrices (AdamW decays every other matrix)",
    "sgd": "SGD with momentum instead of AdamW: no per-coordinate scaling of the update",
}
"""Claim 4's ingredients: one change of recipe each, under which the k = 1 and k = 5 tied models train again."""
