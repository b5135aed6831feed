"""The parameter vocabulary and the names every layer shares, without torch (``python -m tiebias profiles`` loads
none)."""

from tiebias.config import choices, environment, params, profiles, training
from tiebias.config.lens import LensSettings
from tiebias.config.variants import Variant, model_key

__all__ = ["LensSettings", "Variant", "choices", "environment", "model_key", "params", "profiles", "training"]
