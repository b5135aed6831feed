"""Claim 3: tuned lenses for any decoder model, trained in budget ladders and read under two protocols.

Modules, lowest first: ``lenses`` (a lens for a model's layout, save / load), ``inputs`` and ``frozen`` (what lens
training reads: token sequences, the frozen model's hidden states and targets), ``precision``, ``cache`` (the
activation cache), ``fit`` (training one lens), ``evaluate`` (per-layer KL under each protocol), ``rungs`` (one
model's budget ladder), ``rung_eval``, ``ladder`` (ladders over a run's models, a pair, checkpoints), ``tables``
(per-layer tables, gaps with intervals, convergence), ``bigram_bound`` (layer 0 beside the bigram baseline), ``readings`` (the four readings), ``mechanism`` (why the paper's
reading costs a tied model at row 1), ``depth`` (other depths). What they all train and read with is one
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
                          rung_eval,
                          rungs,
                          tables,
)

__all__ = ["bigram_bound", "cache", "depth", "evaluate", "fit", "frozen", "inputs", "ladder", "lenses", "mechanism", "precision",
           "readings", "rung_eval", "rungs", "tables"]
