"""The machine: atomic writes that never follow a link (``atomic``), CPU threads (``threads``), the allocator during
hot loops (``alloc``), jobs side by side (``parallel``), free memory (``memory``)."""
