"""Model shapes by name (a profile's ``preset``) and the model families, built by :mod:`tiebias.models.build`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAMILIES = ("llama", "neox")


@dataclass(frozen=True)
class Preset:
    """Shape of a decoder: width, depth, heads and MLP width (SwiGLU width for llama, 4d for neox)."""

    hidden: int
    layers: int
    heads: int
    max_positions: int = 1024
    note: str = ""

    def intermediate(self, family: str) -> int:
        """MLP width: 4d for GELU MLPs, about 8d/3 (rounded up to 8) for SwiGLU, same parameter count."""
        if family == "neox":
            return 4 * self.hidden
        return int(8 * ((8 * self.hidden / 3 + 7) // 8))


PRESETS: dict[str, Preset] = {
    "tiny": Preset(32, 2, 2, 256, "unit tests: seconds"),
    "tiny-w16": Preset(16, 2, 2, 256, "tiny's depth at width 16: the smoke profile's scale axis (plumbing)"),
    "tiny-w64": Preset(64, 2, 2, 256, "tiny's depth at width 64: the smoke profile's scale axis (plumbing)"),
    "mini": Preset(64, 4, 4, 512, "smoke profile: a minute on a laptop CPU"),
    "small": Preset(128, 6, 4, 1024, "default CPU study: a few minutes per model on 2 cores"),
    "small-w64": Preset(64, 6, 4, 1024, "small's depth at width 64: the width axis of the scale profile"),
    "small-w256": Preset(256, 6, 4, 1024, "small's depth at width 256: the width axis of the scale profile"),
    "small-deep": Preset(128, 10, 4, 1024, "small's width with 10 layers: the depth comparison of 03_lens"),
    "small-16": Preset(128, 16, 4, 1024, "small's width with 16 layers: the deepest model of the depth profile"),
    "base": Preset(256, 8, 8, 1024, "a larger CPU run: about 4x the cost of small"),
    "gpu-20m": Preset(384, 8, 6, 2048, "single GPU, about 20M parameters with a 50k vocabulary"),
    "gpu-60m": Preset(640, 10, 10, 2048, "single GPU, about 60M parameters with a 50k vocabulary"),
    "gpu-150m": Preset(896, 14, 14, 2048, "single GPU, about 150M parameters with a 50k vocabulary"),
}


def get_preset(name: str) -> Preset:
    """Look a preset up by name, with an error that lists the allowed names."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown value {name!r}; allowed: {', '.join(PRESETS)}")
    return PRESETS[name]


MODEL_TYPES = {"llama": "llama", "neox": "gpt_neox"}  # the model_type a family's config.json records


def config_sizes(preset: str, family: str, vocab_size: int) -> dict[str, Any]:
    """The config.json keys that size a model: models are built from these, and a folder's are checked against them."""
    p = get_preset(preset)
    if family not in FAMILIES:
        raise ValueError(f"family: unknown value {family!r}; allowed: {', '.join(FAMILIES)}")
    sizes: dict[str, Any] = dict(model_type=MODEL_TYPES[family], vocab_size=vocab_size, hidden_size=p.hidden,
                                 intermediate_size=p.intermediate(family), num_hidden_layers=p.layers,
                                 num_attention_heads=p.heads, max_position_embeddings=p.max_positions)
    if family == "llama":
        sizes["num_key_value_heads"] = p.heads
    return sizes
