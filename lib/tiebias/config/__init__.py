"""The parameter vocabulary, torch-free: every parameter's schema (``params``), the TOML profiles (``profiles``),
model shapes (``presets``), the training recipe and its defaults (``training``), the tuned-lens settings
(``lens``: :class:`LensSettings`), variant names and model keys
(``variants``), corpus names and special tokens (``corpus``), allowed choices (``choices``), the repository's paths
(``paths``), the shared value checks (``checks``) and the machine's environment variables (``environment``). It
imports nothing else of the kit, so ``python -m tiebias profiles`` answers without loading torch."""

from tiebias.config import (
    checks,
    choices,
    corpus,
    environment,
    lens,
    params,
    paths,
    presets,
    profiles,
    training,
    variants,
)
from tiebias.config.lens import LensSettings
from tiebias.config.training import TrainConfig
from tiebias.config.variants import Variant, model_key, parse_key

__all__ = ["LensSettings", "TrainConfig", "Variant", "checks", "choices", "corpus", "environment", "lens", "model_key",
           "params", "parse_key", "paths", "presets", "profiles", "training", "variants"]
