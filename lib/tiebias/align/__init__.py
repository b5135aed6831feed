"""Claims 1 and 4's geometry: embedding matrices from any HF model, vocabulary matching, the alignment maps, KNN
overlap (by frequency: ``knn_bins``), per-token statistics and the Table 1 / 5 rows with noise floors."""

from tiebias.align import comparisons, embeddings, knn_bins, maps, neighbours, token_stats, tokenizers

__all__ = ["comparisons", "embeddings", "knn_bins", "maps", "neighbours", "token_stats", "tokenizers"]
