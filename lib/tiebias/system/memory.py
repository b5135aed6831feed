"""Free memory on a device, the one measure every "will it fit?" check compares its estimate against."""

from __future__ import annotations

import os
from pathlib import Path

import torch

__all__ = ["free_memory"]


def free_memory(device: str | torch.device = "cpu") -> int:
    """Bytes free on ``device``: the CUDA allocator's free memory, else MemAvailable from /proc/meminfo.

    MemAvailable is what the kernel can hand out without swapping (page cache included); where /proc/meminfo is
    missing (not Linux), the free physical pages are used instead, a smaller and so cautious number.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
