"""What lens training and evaluation take in: the checked token stream and its sequences, cut the same way everywhere."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel

from tiebias.config.checks import is_int
from tiebias.config.lens import LensFit
from tiebias.system.parallel import check_should_stop
from tiebias.system.threads import check_num_threads

__all__ = ["check_tokens", "check_train_args", "read_sequences", "sequences"]


def check_tokens(tokens: Any, seq_len: int, vocab_size: int, name: str = "tokens") -> Tensor:
    """Validate a 1-D integer token stream holding at least one sequence."""
    if not is_int(seq_len) or seq_len < 2:
        raise ValueError(f"seq_len: must be an int >= 2, got {seq_len!r}")
    if not isinstance(tokens, Tensor) or tokens.dim() != 1 or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"{name}: expected a 1-D torch.LongTensor token stream, got {shape}")
    if tokens.numel() < seq_len:
        raise ValueError(f"{name}: the text has {tokens.numel()} tokens, fewer than one sequence of seq_len={seq_len}; "
                         f"pass at least {seq_len} tokens or lower seq_len")
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size - 1}] (vocab_size), got range [{lo}, {hi}]")
    return tokens.long()


def sequences(tokens: Tensor, seq_len: int) -> Tensor:
    """Non-overlapping (n, seq_len) chunks of the stream; the tail shorter than seq_len is dropped."""
    n = tokens.numel() // seq_len
    return tokens[: n * seq_len].view(n, seq_len)


def read_sequences(tokens: Any, seq_len: int, vocab_size: int, max_tokens: int, batch_size: int) -> Tensor:
    """The checked sequences a lens reading scores: the stream's first ``max_tokens`` tokens, with its batch size checked."""
    tokens = check_tokens(tokens, seq_len, vocab_size)
    if not is_int(max_tokens) or max_tokens < seq_len:
        raise ValueError(f"max_tokens: must be an int >= seq_len={seq_len}, got {max_tokens!r}")
    if not is_int(batch_size) or batch_size <= 0:
        raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")
    return sequences(tokens, seq_len)[: max_tokens // seq_len]


def check_train_args(model: PreTrainedModel, tokens: Any, fit: LensFit, num_threads: int | str | None,
                     should_stop: object = None) -> Tensor:
    """Validate :func:`tiebias.lens.fit.train_lens`'s arguments (ValueError naming the first bad one); the tokens."""
    if not isinstance(fit, LensFit):
        raise ValueError(f"fit: expected a tiebias.config.lens.LensFit, got {type(fit).__name__}")
    check_num_threads(num_threads)
    check_should_stop(should_stop)
    return check_tokens(tokens, fit.seq_len, model.config.vocab_size)
