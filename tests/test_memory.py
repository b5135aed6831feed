"""system.alloc.free_memory: one measure of free memory for every "will it fit?" check (external models and training)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tiebias.system.alloc import free_memory
from tiebias.train import trainer as memory


def _meminfo(key: str) -> int:
    return next(int(x.split()[1]) * 1024 for x in Path("/proc/meminfo").read_text().splitlines()
                if x.startswith(f"{key}:"))


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="no /proc/meminfo (not Linux)")
def test_free_memory_is_what_the_kernel_can_hand_out() -> None:
    free = free_memory("cpu")
    assert 0 < free <= _meminfo("MemTotal")
    # read twice, a moment apart: other processes move it by far less than a GiB in that time
    assert abs(free - _meminfo("MemAvailable")) < 2**30


def test_training_compares_its_estimate_with_the_same_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = SimpleNamespace(preset="tiny", family="llama", batch_size=8, seq_len=64)  # what a TrainConfig gives
    monkeypatch.setattr(memory, "free_memory", lambda device: 2**60)
    need = memory.check_memory(cfg, 300, torch.device("cpu"), processes=2)
    # each of two processes gets half of what is free: 2.3x the need fits, 1.7x does not (need must be < 0.9 x share)
    monkeypatch.setattr(memory, "free_memory", lambda device: int(2.3 * need))
    memory.check_memory(cfg, 300, torch.device("cpu"), processes=2)
    monkeypatch.setattr(memory, "free_memory", lambda device: int(1.7 * need))
    with pytest.raises(ValueError, match=r"preset: .* needs about .* GiB per process but cpu has .* GiB free"):
        memory.check_memory(cfg, 300, torch.device("cpu"), processes=2)
