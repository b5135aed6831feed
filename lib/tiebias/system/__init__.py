"""The machine: atomic writes that never follow a link (``atomic``), CPU threads (``threads``), free memory and the
allocator during hot loops (``alloc``), jobs side by side (``parallel``)."""
