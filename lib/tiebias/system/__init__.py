"""The machine: files written in place (never through a link), CPU thread settings, the allocator during hot loops, jobs side by side, free memory."""

from tiebias.system import alloc, atomic, memory, parallel, threads

__all__ = ["alloc", "atomic", "memory", "parallel", "threads"]
