"""A toy batch of token ids drawn as in text, for 01's "how it works" cell and its coding exercise."""

from __future__ import annotations

import torch

from tiebias.config.checks import is_int

TOY_VOCAB = 64
"""Toy vocabulary: small enough that a batch of 128 Zipf-distributed tokens leaves many tokens unseen."""


def toy_batch(vocab: int = TOY_VOCAB, shape: tuple[int, int] = (4, 32), seed: int = 0) -> torch.Tensor:
    """Token ids drawn from a Zipf-like law (p ~ 1/rank), as in text: a few frequent tokens, many rare ones.

    Args:
        vocab: the vocabulary size. shape: (batch, sequence). seed: the generator's seed.

    Returns:
        A long tensor of token ids of that shape.
    """
    if not is_int(vocab) or vocab < 2:
        raise ValueError(f"vocab: {vocab!r} is not a vocabulary size; need an int >= 2")
    p = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(p / p.sum(), shape[0] * shape[1], replacement=True, generator=gen).view(shape)
