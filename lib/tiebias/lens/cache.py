"""The frozen model's activations for lens training, computed once so steps skip the model (bench/lens_cache.py),
in training's micro-batch shape; declined where that would change the lens or exceed ``max_bytes``."""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from tiebias.config.checks import is_int
from tiebias.config.lens import LENS_BATCH_SIZE, LENS_SEQ_LEN, LensFit
from tiebias.lens.fit import LensTarget, check_train_args, frozen_forward
from tiebias.lens.lenses import new_lens
from tiebias.models.anatomy import check_model
from tiebias.system.threads import loop_threads

MAX_BYTES = 1 << 30  # default cap on a cache's size
MIN_VISITS = 1.5  # build a cache only when training draws each sequence this often (building: one forward each)


def _micro_batch(tokens_per_step: int, seq_len: int, batch_size: int) -> int | None:
    """Sequences per micro-batch of lens training; None when micro-batches are uneven."""
    per_step = tokens_per_step // seq_len
    return None if per_step % min(batch_size, per_step) else min(batch_size, per_step)


def _fingerprint(model: PreTrainedModel) -> str:
    """SHA-256 of every parameter and buffer (names and bytes): which frozen model the cache holds."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class LensCache:
    """Per-sequence ``hidden_states[:-1]`` and target statistics of one frozen model on one token stream."""

    hidden: list[Tensor]
    stats: tuple[Tensor, Tensor, Tensor]
    chunk: int
    sequences: Tensor
    model_sha256: str

    def check(self, model: PreTrainedModel, sequences: Tensor, *, tokens_per_step: int, batch_size: int) -> None:
        """Raise ValueError (naming the parameter) unless the cache is of ``model``, ``sequences``, these micro-batches."""
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
        micro = _micro_batch(tokens_per_step, sequences.shape[1], batch_size)
        if micro != self.chunk:
            got = "uneven micro-batches" if micro is None else f"micro-batches of {micro} sequences"
            raise ValueError(
                f"batch_size: tokens_per_step and batch_size give {got}, but the cache was computed in micro-batches "
                f"of {self.chunk} (bit-identity needs the same shape); build it with these settings or pass cache=None"
            )
        if _fingerprint(model) != self.model_sha256:
            raise ValueError("model: its weights differ from the model the cache was built from; "
                             "build the cache from this model")

    def take(self, idx: Tensor) -> tuple[list[Tensor], tuple[Tensor, Tensor, Tensor]]:
        """(hidden_states[:-1], target statistics) of the sequences ``idx``, as one forward on them would give."""
        idx = idx.to(self.stats[0].device)
        return [h[idx] for h in self.hidden], (self.stats[0][idx], self.stats[1][idx], self.stats[2][idx])


def _chunks(n: int, chunk: int) -> list[tuple[Tensor, slice]]:
    """(indices of a full chunk, its rows to store) covering 0..n-1 once; the tail is the last ``chunk`` sequences
    (cycled when fewer), so every forward has training's shape."""
    out = []
    for start in range(0, n, chunk):
        first = min(start, max(n - chunk, 0))
        out.append(((torch.arange(chunk) + first) % n, slice(start - first, min(chunk, n - first))))
    return out


def build_cache(model: PreTrainedModel, tokens: Tensor, *, seq_len: int = LENS_SEQ_LEN, tokens_per_step: int = 512,
                batch_size: int = LENS_BATCH_SIZE, max_bytes: int = MAX_BYTES,
                num_threads: int | Literal["auto"] | None = "auto", progress: bool = False) -> LensCache | None:
    """``model`` run once over every sequence of ``tokens`` in training's forward shape; None where declined."""
    check_model(model)
    shape = LensFit(steps=1, seq_len=seq_len, tokens_per_step=tokens_per_step, warmup_steps=0, batch_size=batch_size)
    seqs = check_train_args(model, tokens, shape, num_threads)
    if not is_int(max_bytes) or max_bytes < 0:
        raise ValueError(f"max_bytes: must be an int >= 0, got {max_bytes!r}")
    micro = _micro_batch(tokens_per_step, seq_len, batch_size)
    cfg = model.config  # the cache's bytes: hidden states, then the float32 target statistics
    per_position = cfg.num_hidden_layers * cfg.hidden_size * model.dtype.itemsize + (cfg.hidden_size + 2) * 4
    if micro is None or len(seqs) * seq_len * per_position > max_bytes:
        return None
    n, dev = len(seqs), model.device
    hidden: list[Tensor] = []
    stats: list[Tensor] = []
    was_training = model.training
    model.eval()
    try:
        target = LensTarget.of(new_lens(model), low_precision=False)
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
        cache = LensCache(hidden, (stats[0], stats[1], stats[2]), micro, seqs.cpu().clone(), _fingerprint(model))
        # one forward on sequences of other chunks, in another order, must reproduce the cache bit for bit
        idx = torch.linspace(0, n - 1, micro).round().long().flip(0)
        hs, st = frozen_forward(model, target, cache.sequences[idx].to(dev))
        cached_hs, cached_st = cache.take(idx)
        same = all(torch.equal(a, b) for a, b in zip((*hs, *st), (*cached_hs, *cached_st), strict=True))
    finally:
        model.train(was_training)
    if not same:
        warnings.warn("lens activation cache declined: a sequence's activations depend on the other sequences "
                      "of its batch here, so the lens would differ; training runs the model", stacklevel=2)
        return None
    return cache
