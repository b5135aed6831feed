"""What tuned-lens training and evaluation take in: the checked token stream, its sequences, the training settings.

One owner for these checks and the chunking, shared by :mod:`tiebias.lens.evaluate`, :mod:`tiebias.lens.fit` and
:mod:`tiebias.lens.cache`, so a stream is validated and cut into sequences the same way wherever a lens reads it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel

from tiebias.config.checks import is_int
from tiebias.system.parallel import check_should_stop
from tiebias.system.threads import check_num_threads

__all__ = ["check_tokens", "check_train_args", "sequences"]


def check_tokens(tokens: Any, seq_len: int, vocab_size: int, name: str = "tokens") -> Tensor:
    """Validate a 1-D integer token stream holding at least one sequence."""
    if not is_int(seq_len) or seq_len < 2:
        raise ValueError(f"seq_len: must be an int >= 2, got {seq_len!r}")
    if (
        not isinstance(tokens, Tensor)
        or tokens.dim() != 1
        or tokens.dtype.is_floating_point
        or tokens.dtype == torch.bool
    ):
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"{name}: expected a 1-D torch.LongTensor token stream, got {shape}")
    if tokens.numel() < seq_len:
        raise ValueError(
            f"{name}: the text has {tokens.numel()} tokens, fewer than one sequence of "
            f"seq_len={seq_len}; pass at least {seq_len} tokens or lower seq_len"
        )
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name}: token ids must lie in [0, {vocab_size - 1}] (vocab_size), got range [{lo}, {hi}]"
        )
    return tokens.long()


def sequences(tokens: Tensor, seq_len: int) -> Tensor:
    """Non-overlapping (n, seq_len) chunks of the stream; the tail shorter than seq_len is dropped."""
    n = tokens.numel() // seq_len
    return tokens[: n * seq_len].view(n, seq_len)


def check_train_args(
    model: PreTrainedModel,
    tokens: Any,
    *,
    steps: int,
    seq_len: int,
    tokens_per_step: int,
    warmup_steps: int,
    lr: float,
    optimizer: str,
    batch_size: int,
    num_threads: int | str | None,
    should_stop: object = None,
) -> Tensor:
    """Validate :func:`tiebias.lens.fit.train_lens`'s arguments (ValueError naming the first bad one); return the token stream."""
    if not is_int(steps) or steps <= 0:
        raise ValueError(f"steps: must be a positive int, got {steps!r}")
    check_num_threads(num_threads)
    check_should_stop(should_stop)
    tokens = check_tokens(tokens, seq_len, model.config.vocab_size)
    if not is_int(tokens_per_step) or tokens_per_step < seq_len or tokens_per_step % seq_len:
        raise ValueError(
            f"tokens_per_step: must be a positive multiple of seq_len={seq_len}, got {tokens_per_step!r}"
        )
    if not is_int(warmup_steps) or not 0 <= warmup_steps < steps:
        raise ValueError(f"warmup_steps: must be an int in [0, steps={steps}), got {warmup_steps!r}")
    if lr <= 0:
        raise ValueError(f"lr: must be > 0, got {lr!r}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer: must be 'adam' or 'sgd', got {optimizer!r}")
    if not is_int(batch_size) or batch_size <= 0:
        raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")
    return tokens
