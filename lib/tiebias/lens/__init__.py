"""Claim 3: tuned lenses for any decoder model, trained in budget ladders and read under two protocols.

Lowest first: ``lenses`` (a lens for a model, save / load), ``inputs``, ``frozen``, ``precision``, ``cache`` and
``fit`` (training one lens), ``evaluate`` (per-layer KL), ``rungs`` (one model's ladder), ``ladder`` (a run's
models, a pair, checkpoints), ``tables`` (gaps with intervals, convergence), ``bigram_bound``, ``readings`` (the four
readings), ``mechanism`` (why the paper's reading costs a tied model at row 1), ``depth``. Settings:
:class:`tiebias.config.lens.LensSettings`.
"""

from tiebias.lens import (
    bigram_bound,
    cache,
    depth,
    evaluate,
    fit,
    frozen,
    inputs,
    ladder,
    lenses,
    mechanism,
    precision,
    readings,
    rungs,
    tables,
)

__all__ = ["bigram_bound", "cache", "depth", "evaluate", "fit", "frozen", "inputs", "ladder", "lenses", "mechanism",
           "precision", "readings", "rungs", "tables"]
