"""Hugging Face models: the kit's tied / untied builders (``build``), what any decoder checkpoint is made of
(``anatomy``: text config, tying, layer layout) and external model pairs by hub id or local path (``sources``)."""

from tiebias.models import anatomy, build, sources

__all__ = ["anatomy", "build", "sources"]
