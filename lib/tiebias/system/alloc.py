"""Memory: how much is free on a device (the one measure every "will it fit?" check compares its estimate against),
and freed memory kept in the process during hot loops (glibc otherwise maps and zeroes each step's large blocks
afresh): ``mallopt`` for the block, glibc's defaults restored after; the same numbers bit for bit. Left alone off
glibc, under the user's ``MALLOC_*_`` settings or another allocator, or with ``TIEBIAS_MALLOC=default``."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

MALLOC_ENV = "TIEBIAS_MALLOC"  # keep (default) or default (glibc's settings left alone)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULTS = {_M_MMAP_MAX: 65536, _M_TRIM_THRESHOLD: 128 * 1024}  # glibc's, restored on leaving
_KEEP = {_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 2**31 - 1}
_USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "GLIBC_TUNABLES", "jemalloc", "tcmalloc", "mimalloc")  # variables, or libraries in LD_PRELOAD
_lock = threading.Lock()
_depth = 0


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


def mode() -> str:
    raw = os.environ.get(MALLOC_ENV, "keep").strip().lower() or "keep"
    if raw not in ("keep", "default"):
        raise ValueError(f"{MALLOC_ENV}: {raw!r} is not allowed; use 'keep' (the default) or 'default'")
    return raw


@functools.cache
def libc() -> Any | None:
    """glibc with ``mallopt`` and ``malloc_trim``, or None where it is not the allocator in use or the user's wins."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or any(
            v in os.environ or v in os.environ.get("LD_PRELOAD", "") for v in _USER_SETTINGS):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


@contextmanager
def kept_heap() -> Iterator[bool]:
    """Keep freed memory for the block (nested and concurrent blocks share one setting); yields whether it did."""
    global _depth
    lib = libc() if mode() == "keep" else None
    if lib is None:
        yield False
        return
    with _lock:
        _depth += 1
        for param, value in _KEEP.items() if _depth == 1 else ():
            lib.mallopt(param, value)
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for param, value in _DEFAULTS.items():
                    lib.mallopt(param, value)
                lib.malloc_trim(0)
