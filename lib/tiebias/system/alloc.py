"""Keep freed memory in the process during hot loops, so large tensors are not mapped anew every step.

glibc serves large blocks with a fresh ``mmap`` and gives them back on ``free``, so each training step would pay page
faults and the kernel's zeroing again for its logits and their gradient. :func:`kept_heap` sets ``M_MMAP_MAX = 0`` and
a high ``M_TRIM_THRESHOLD`` for the block (same numbers bit for bit: the allocator decides where they live), and on
leaving the outermost block restores glibc's defaults and returns the freed memory (``malloc_trim``); the price is
some peak memory. It does nothing where the C library is not glibc, where the user set glibc's ``MALLOC_*_``
variables or preloaded another allocator, and with ``TIEBIAS_MALLOC=default``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MALLOC_ENV = "TIEBIAS_MALLOC"
"""``keep`` (default): keep freed memory during hot loops; ``default``: leave glibc's settings alone."""

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULTS = {_M_MMAP_MAX: 65536, _M_TRIM_THRESHOLD: 128 * 1024}  # glibc's, restored on leaving
_KEEP = {_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 2**31 - 1}
_USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "GLIBC_TUNABLES")
_lock = threading.Lock()
_depth = 0


def mode() -> str:
    """``TIEBIAS_MALLOC``: ``keep`` (unset) or ``default``; anything else is a ValueError naming the variable."""
    raw = os.environ.get(MALLOC_ENV, "keep").strip().lower() or "keep"
    if raw not in ("keep", "default"):
        raise ValueError(f"{MALLOC_ENV}: {raw!r} is not allowed; use 'keep' (the default) or 'default'")
    return raw


def _libc() -> Any | None:
    """glibc with ``mallopt`` and ``malloc_trim``, or None where it is not the allocator in use (or the user's
    settings or preloaded allocator win)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or any(v in os.environ for v in _USER_SETTINGS):
        return None
    if any(name in os.environ.get("LD_PRELOAD", "") for name in ("jemalloc", "tcmalloc", "mimalloc")):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


libc = functools.cache(_libc)
"""The C library :func:`kept_heap` adjusts (looked up once), or None when it leaves the allocator alone."""


@contextmanager
def kept_heap() -> Iterator[bool]:
    """Keep freed memory in the process for the block (nested and concurrent blocks share one setting); yields
    whether the allocator was adjusted."""
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
