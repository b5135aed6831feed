"""Will a training fit? A rough peak-memory estimate of one training process, checked before allocating."""

from __future__ import annotations

from typing import Any

import torch

from tiebias.config.presets import get_preset
from tiebias.system.memory import free_memory

__all__ = ["check_memory", "estimate_memory"]


def estimate_memory(cfg: Any, vocab_size: int, processes: int = 1) -> int:
    """Rough peak bytes of one training process (``cfg``: a TrainConfig): weights, grads, AdamW state, activations, logits."""
    p = get_preset(cfg.preset)
    d, L = p.hidden, p.layers
    ffn = p.intermediate(cfg.family)
    params = 2 * vocab_size * d + L * (4 * d * d + 3 * d * ffn)
    rows = max(cfg.batch_size // processes, 1)
    tokens = rows * cfg.seq_len
    activations = tokens * L * (16 * d + 3 * ffn) * 4 + rows * p.heads * cfg.seq_len**2 * 4 * L
    logits = tokens * vocab_size * 4 * 3
    return int(16 * params + activations + logits)


def check_memory(cfg: Any, vocab_size: int, device: torch.device, processes: int = 1) -> None:
    """Refuse, before allocating, a preset/batch that cannot fit in the device's free memory."""
    need = estimate_memory(cfg, vocab_size, processes)
    free = free_memory(device)
    if device.type != "cuda":
        free //= max(processes, 1)  # the processes share the machine's memory
    if need > 0.9 * free:
        raise ValueError(f"preset: {cfg.preset!r} with batch_size={cfg.batch_size}, seq_len={cfg.seq_len} needs "
                         f"about {need / 2**30:.1f} GiB per process but {device} has {free / 2**30:.1f} GiB free; "
                         "choose a smaller preset, batch or sequence length")
