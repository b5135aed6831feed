"""Claim 4: the gradient-scaling sweep (plan with a time estimate, training, alignment and perplexity tables), its
ingredients taken apart (``ingredients``), and claims 1, 2 and 4 against model size (``scale``)."""

from tiebias.ablate import ingredients, scale, sweep

__all__ = ["ingredients", "scale", "sweep"]
