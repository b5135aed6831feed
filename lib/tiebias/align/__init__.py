"""Claims 1 and 4's geometry: embedding matrices from any HF model (``embeddings``), vocabulary matching
(``tokenizers``), the identity / orthogonal / linear maps (``maps``), nearest-neighbour overlap (``neighbours``, by
token frequency: ``knn_bins``), per-token statistics (``token_stats``) and the Table 1 / 5 rows with seed pairs and
noise floors (``comparisons``)."""

from tiebias.align import comparisons, embeddings, knn_bins, maps, neighbours, token_stats, tokenizers

__all__ = ["comparisons", "embeddings", "knn_bins", "maps", "neighbours", "token_stats", "tokenizers"]
