"""Claim 4: the gradient-scaling sweep (plan with a time estimate, training, alignment and perplexity tables)."""

from tiebias.ablate import sweep

__all__ = ["sweep"]
