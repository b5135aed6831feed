"""Claim 4: the gradient-scaling sweep (plan with a time estimate, training, alignment and perplexity tables), its
ingredients taken apart (``ingredients``), claims 1, 2 and 4 against model size (``scale``), and the alignment levels
at every saved checkpoint (``checkpoint_levels``)."""

from tiebias.ablate import checkpoint_levels, ingredients, scale, sweep

__all__ = ["checkpoint_levels", "ingredients", "scale", "sweep"]
