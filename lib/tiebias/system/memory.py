"""Free memory on a device, the one measure every "will it fit?" check compares its estimate against."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def free_memory(device: str | torch.device = "cpu") -> int:
    """Bytes free: CUDA's free memory, else MemAvailable (/proc/meminfo), else the free physical pages (cautious)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        return next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
