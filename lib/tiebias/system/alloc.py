"""Keep freed memory in the process during hot loops, so large tensors are not mapped anew every step.

glibc's ``malloc`` serves every large block (32 MiB or more, and by its dynamic threshold often smaller ones) with a
fresh ``mmap`` and gives it back to the system on ``free``. A training step allocates and frees several such tensors
(the logits and their gradient), so each step would pay page faults and the kernel's zeroing of those pages again.
Keeping freed memory makes steps faster with the same weights bit for bit (the allocator decides where numbers live,
never what they are); ``bench/train_throughput.py`` measures the gain, the README's "Measured here" quotes it.

:func:`kept_heap` sets ``M_MMAP_MAX = 0`` and a high ``M_TRIM_THRESHOLD`` for the block (``mallopt``),
and on leaving the outermost block restores glibc's defaults and returns the freed memory
(``malloc_trim``). The price is some peak memory: large blocks now share the heap with small ones and fragment it.
For the KNN of :mod:`tiebias.align.neighbours` the gain was too small for its memory, so that stays on glibc's
defaults. It does nothing where the C library is not glibc, where the user has set glibc's ``MALLOC_*_`` variables
or preloaded another allocator (jemalloc, tcmalloc: their choice wins), and with ``TIEBIAS_MALLOC=default``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MALLOC_ENV = "TIEBIAS_MALLOC"
"""``keep`` (default): keep freed memory during hot loops; ``default``: leave glibc's settings alone."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_DEFAULT_TRIM_THRESHOLD = 128 * 1024  # glibc's defaults, restored on leaving
_DEFAULT_MMAP_MAX = 65536
_KEEP_TRIM_THRESHOLD = 2**31 - 1  # an int: mallopt takes one

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
    """glibc with ``mallopt`` and ``malloc_trim``, or None where it is not the allocator in use."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    if any(v in os.environ for v in _USER_SETTINGS):
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


_LIBC: Any | None = None
_LOOKED_UP = False


def libc() -> Any | None:
    """The C library :func:`kept_heap` adjusts (looked up once), or None when it leaves the allocator alone."""
    global _LIBC, _LOOKED_UP
    if not _LOOKED_UP:
        _LIBC, _LOOKED_UP = _libc(), True
    return _LIBC


@contextmanager
def kept_heap() -> Iterator[bool]:
    """Keep freed memory in the process for the block (nested and concurrent blocks share one setting).

    Yields whether the allocator was adjusted. See the module docstring for what, why and when not.
    """
    global _depth
    lib = libc() if mode() == "keep" else None
    if lib is None:
        yield False
        return
    with _lock:
        _depth += 1
        if _depth == 1:
            lib.mallopt(_M_MMAP_MAX, 0)
            lib.mallopt(_M_TRIM_THRESHOLD, _KEEP_TRIM_THRESHOLD)
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                lib.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                lib.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
                lib.malloc_trim(0)


__all__ = ["MALLOC_ENV", "kept_heap", "libc", "mode"]
