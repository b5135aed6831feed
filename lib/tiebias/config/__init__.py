"""The parameter vocabulary and the names every layer shares, without torch (``python -m tiebias profiles`` loads
none): parameters (``params``), profiles, model shapes, the training and lens recipes, variants, paths, checks."""

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
