"""The machine: CPU thread settings, the allocator during hot loops, jobs side by side, free memory."""

from tiebias.system import alloc, memory, parallel, threads

__all__ = ["alloc", "memory", "parallel", "threads"]
