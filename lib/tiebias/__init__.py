"""tiebias: a study kit for weight-tying bias in token embeddings."""

__version__ = "0.1.0"
