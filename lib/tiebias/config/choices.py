"""The named options a parameter picks from: alignment methods, lens-training recipes and lens readings.

Each name set has its owner here (no torch), so the parameter vocabulary lists and checks them while
:mod:`tiebias.align.maps`, :mod:`tiebias.lens.ladder` and :mod:`tiebias.lens.evaluate` act on them.
"""

from __future__ import annotations

from typing import Any

METHODS: tuple[str, ...] = ("identity", "orthogonal", "linear")
"""Alignment maps of one embedding matrix onto another (:func:`tiebias.align.maps.align`)."""

LENS_RECIPES: dict[str, dict[str, Any]] = {
    "cpu": {"optimizer": "adam", "lr": 1e-2, "momentum": 0.9, "weight_decay": 1e-3},
    "package": {"optimizer": "sgd", "lr": 1.0, "momentum": 0.9, "weight_decay": 1e-3, "warmup_steps": 0},
}
"""Named lens-training recipes (keyword arguments of :func:`tiebias.lens.fit.train_lens`)."""

LENS_PROTOCOLS: tuple[str, ...] = ("package", "reference")
"""How a tuned lens's translators are matched to hidden states (:func:`tiebias.lens.evaluate.evaluate`)."""

INGREDIENTS: dict[str, str] = {
    "warmup10": "warmup over 10% of the steps (the paper: 1,000 of 10,000)",
    "no_embedding_decay": "no weight decay on the embedding matrices (AdamW decays every other matrix)",
    "sgd": "SGD with momentum instead of AdamW: no per-coordinate scaling of the update",
}
"""Claim 4's ingredients: one change of the training recipe each, under which the k = 1 and k = 5 tied models are
trained again (:mod:`tiebias.ablate.ingredients`), to see which brings the shift to the paper's size."""
