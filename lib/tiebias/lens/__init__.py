"""Claim 3: tuned lenses (the ``tuned_lens`` package's) for any decoder, trained in budget ladders, read two ways.

``lenses`` (build, save, load), ``fit`` (train one lens), ``evaluate`` (per-layer KL), ``ladder`` (one model's ladder,
a run's, a pair's, checkpoints'), ``tables``, ``bigram_bound``, ``readings``, ``mechanism``.
"""

from tiebias.lens import (
    bigram_bound,
    cache,
    evaluate,
    fit,
    ladder,
    lenses,
    mechanism,
    readings,
    tables,
)

__all__ = ["bigram_bound", "cache", "evaluate", "fit", "ladder", "lenses", "mechanism", "readings", "tables"]
