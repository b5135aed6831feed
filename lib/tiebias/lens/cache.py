"""The frozen model's activations for tuned-lens training, computed once per (model, token stream).

Each lens step runs the frozen model on its sequences (``hidden_states[:-1]``) and reduces its final
logits to the loss's target statistics (:func:`tiebias.lens.frozen.frozen_forward`): about 30% of a step
for the kit's ``small`` model, and a 1000-step ladder over ~900 validation sequences sees every
sequence about four times. :class:`LensCache` stores these per sequence, so
:func:`tiebias.lens.fit.train_lens` can skip the model.

**Bit for bit.** A sequence's activations do not depend on the other sequences of its batch, but they
may depend on the batch's shape (kernels pick blockings by shape). The cache is therefore computed in
chunks of exactly the micro-batch shape training runs (``min(batch_size, tokens_per_step // seq_len)``
sequences of ``seq_len``), the tail as a full-size chunk of the last sequences, and a lens trained
through the cache equals the one trained on the model (tested on tiny Llama and GPT-NeoX models, and
checked by hand on the ``small`` model). :func:`build_cache` checks the premise on one mixed batch and
declines (with a warning) where it fails. Uneven micro-batches (``tokens_per_step // seq_len`` not a
multiple of ``batch_size``) get no cache.

**Memory.** Hidden states are kept in the model's dtype, target statistics in float32, on the model's
device: ``sequences x seq_len x (layers x width x itemsize + (width + 2) x 4)`` bytes (405 MiB for the
``small`` model's 924 validation sequences). Above ``max_bytes`` (default :data:`MAX_BYTES`, 1 GiB)
:func:`build_cache` returns None and training runs the model as before.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from tiebias.config.checks import is_int
from tiebias.config.lens import LENS_BATCH_SIZE, LENS_SEQ_LEN, LensFit
from tiebias.lens.frozen import LensTarget, frozen_forward
from tiebias.lens.inputs import check_train_args, sequences
from tiebias.lens.lenses import check_model, new_lens
from tiebias.system.threads import loop_threads

__all__ = ["MAX_BYTES", "MIN_VISITS", "LensCache", "build_cache", "cache_bytes", "micro_batch", "pays_off"]

MAX_BYTES = 1 << 30
"""Default cap on a cache's size (1 GiB): above it :func:`build_cache` declines and training runs the model."""

MIN_VISITS = 1.5
"""Build a cache only when training draws each sequence at least this often on average: building costs one
forward per sequence, so a short lens run over a long stream (the smoke profile: 160 draws, 1,850 sequences)
is cheaper without one. The default ladder draws each validation sequence about 4.3 times."""


def pays_off(draws: int, n_sequences: int) -> bool:
    """Whether a cache saves time for a training that draws ``draws`` sequences from ``n_sequences`` (see MIN_VISITS)."""
    return draws >= MIN_VISITS * n_sequences


def micro_batch(tokens_per_step: int, seq_len: int, batch_size: int) -> int | None:
    """Sequences per micro-batch of :func:`tiebias.lens.fit.train_lens`; None when micro-batches are uneven."""
    per_step = tokens_per_step // seq_len
    return None if per_step % min(batch_size, per_step) else min(batch_size, per_step)


def cache_bytes(model: PreTrainedModel, n_sequences: int, seq_len: int) -> int:
    """Size of a cache of ``n_sequences`` sequences of ``seq_len`` for ``model``, in bytes (allocated up front)."""
    cfg = model.config
    per_position = cfg.num_hidden_layers * cfg.hidden_size * model.dtype.itemsize + (cfg.hidden_size + 2) * 4
    return n_sequences * seq_len * per_position


def model_fingerprint(model: PreTrainedModel) -> str:
    """SHA-256 of every parameter and buffer (names and bytes): which frozen model the cache holds (~10 ms, small)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class LensCache:
    """Per-sequence ``hidden_states[:-1]`` and target statistics of one frozen model on one token stream.

    ``hidden[i][s]`` is layer i's input to translator i for sequence s; ``stats`` are (target_mean,
    target_bias, neg_entropy) with the sequence as the first axis. ``chunk`` is the micro-batch size
    they were computed at; ``sequences`` the token sequences (n, seq_len); ``model_sha256`` the model's
    :func:`model_fingerprint`.
    """

    hidden: list[Tensor]
    stats: tuple[Tensor, Tensor, Tensor]
    chunk: int
    sequences: Tensor
    model_sha256: str

    @property
    def nbytes(self) -> int:
        """Bytes held by the activations (the sequences themselves not counted)."""
        return sum(t.numel() * t.element_size() for t in (*self.hidden, *self.stats))

    def check(self, model: PreTrainedModel, sequences: Tensor, *, tokens_per_step: int, batch_size: int) -> None:
        """Raise ValueError (naming the parameter) unless this cache belongs to ``model``, the (n, seq_len)
        ``sequences`` and the micro-batches of ``tokens_per_step`` and ``batch_size``."""
        if sequences.shape[1] != self.sequences.shape[1]:
            raise ValueError(f"seq_len: {sequences.shape[1]}, but the cache holds sequences of "
                             f"seq_len={self.sequences.shape[1]}; build the cache with this seq_len")
        if sequences.shape != self.sequences.shape:
            raise ValueError(
                f"tokens: {sequences.shape[0]} sequences of seq_len={sequences.shape[1]}, but the cache holds "
                f"{self.sequences.shape[0]} of seq_len={self.sequences.shape[1]}; build the cache from these tokens"
            )
        if not torch.equal(sequences.cpu(), self.sequences):
            raise ValueError("tokens: differ from the token stream the cache was built from; build it from these")
        micro = micro_batch(tokens_per_step, sequences.shape[1], batch_size)
        if micro != self.chunk:
            got = "uneven micro-batches" if micro is None else f"micro-batches of {micro} sequences"
            raise ValueError(
                f"batch_size: tokens_per_step and batch_size give {got}, but the cache was computed in micro-batches "
                f"of {self.chunk} (bit-identity needs the same shape); build it with these settings or pass cache=None"
            )
        if model_fingerprint(model) != self.model_sha256:
            raise ValueError("model: its weights differ from the model the cache was built from; "
                             "build the cache from this model")

    def take(self, idx: Tensor) -> tuple[list[Tensor], tuple[Tensor, Tensor, Tensor]]:
        """(hidden_states[:-1], target statistics) of the sequences ``idx``, as one forward on them would give."""
        idx = idx.to(self.stats[0].device)
        return [h[idx] for h in self.hidden], (self.stats[0][idx], self.stats[1][idx], self.stats[2][idx])


def _chunks(n: int, chunk: int) -> list[tuple[Tensor, slice]]:
    """(sequence indices of a full-size chunk, the rows of it to store) covering sequences 0..n-1 once each.

    The tail is the last ``chunk`` sequences (cycled when there are fewer), so every forward has training's shape."""
    out = []
    for start in range(0, n, chunk):
        if start + chunk <= n:
            out.append((torch.arange(start, start + chunk), slice(0, chunk)))
        elif n >= chunk:
            out.append((torch.arange(n - chunk, n), slice(start - (n - chunk), chunk)))
        else:
            out.append((torch.arange(chunk) % n, slice(0, n)))
    return out


def build_cache(
    model: PreTrainedModel,
    tokens: Tensor,
    *,
    seq_len: int = LENS_SEQ_LEN,
    tokens_per_step: int = 512,
    batch_size: int = LENS_BATCH_SIZE,
    max_bytes: int = MAX_BYTES,
    num_threads: int | Literal["auto"] | None = "auto",
    progress: bool = False,
) -> LensCache | None:
    """Run ``model`` once over every ``seq_len`` sequence of ``tokens`` for :func:`tiebias.lens.fit.train_lens`.

    ``seq_len``, ``tokens_per_step`` and ``batch_size`` must be those of the training calls (they fix the
    forward's shape). Returns None (train without a cache) when micro-batches are uneven, the cache
    would exceed ``max_bytes``, or a sequence's activations turn out to depend on its batch mates.
    """
    check_model(model)
    shape = LensFit(steps=1, seq_len=seq_len, tokens_per_step=tokens_per_step, warmup_steps=0, batch_size=batch_size)
    tokens = check_train_args(model, tokens, shape, num_threads)
    if not is_int(max_bytes) or max_bytes < 0:
        raise ValueError(f"max_bytes: must be an int >= 0, got {max_bytes!r}")
    seqs = sequences(tokens, seq_len)
    micro = micro_batch(tokens_per_step, seq_len, batch_size)
    if micro is None or cache_bytes(model, len(seqs), seq_len) > max_bytes:
        return None
    was_training = model.training
    model.eval()
    try:
        target = LensTarget.of(new_lens(model), low_precision=False)
        cache = LensCache(*_fill(model, target, seqs, micro, num_threads, progress), micro, seqs.cpu().clone(),
                          model_fingerprint(model))
        same = _rows_independent(model, target, cache)
    finally:
        model.train(was_training)
    if not same:
        warnings.warn("lens activation cache declined: a sequence's activations depend on the other sequences "
                      "of its batch here, so the lens would differ; training runs the model", stacklevel=2)
        return None
    return cache


def _fill(model: PreTrainedModel, target: LensTarget, seqs: Tensor, micro: int, num_threads: Any,
          progress: bool) -> tuple[list[Tensor], tuple[Tensor, Tensor, Tensor]]:
    """The cache's tensors, computed chunk by chunk with :func:`tiebias.lens.frozen.frozen_forward`."""
    n, dev = len(seqs), model.device
    hidden: list[Tensor] = []
    stats: list[Tensor] = []
    with loop_threads(num_threads, dev.type) as tuner:
        for idx, rows in tqdm(_chunks(n, micro), desc="lens activation cache", disable=not progress):
            with tuner.step():
                hs, st = frozen_forward(model, target, seqs[idx].to(dev))
            if not hidden:
                hidden = [torch.empty((n, *h.shape[1:]), dtype=h.dtype, device=dev) for h in hs]
                stats = [torch.empty((n, *s.shape[1:]), dtype=s.dtype, device=dev) for s in st]
            dst = idx[rows].to(dev)
            for buf, src in zip((*hidden, *stats), (*hs, *st), strict=True):
                buf[dst] = src[rows]
    return hidden, (stats[0], stats[1], stats[2])


def _rows_independent(model: PreTrainedModel, target: LensTarget, cache: LensCache) -> bool:
    """Whether one forward on sequences from other chunks, in another order, reproduces the cache bit for bit."""
    n = len(cache.sequences)
    idx = torch.linspace(0, n - 1, cache.chunk).round().long().flip(0)
    hs, st = frozen_forward(model, target, cache.sequences[idx].to(model.device))
    hidden, stats = cache.take(idx)
    return all(torch.equal(a, b) for a, b in zip((*hs, *st), (*hidden, *stats), strict=True))
