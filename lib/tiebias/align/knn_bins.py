"""Table 5's KNN@k overlap per token-frequency bin, beside chance (k / (V - 1), what two unrelated matrices share) and
the ceiling (two tied matrices of different seeds in the same bin)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from tiebias.align import token_stats
from tiebias.align.embeddings import Embeddings
from tiebias.align.neighbours import check_knn_k, nearest, neighbour_overlap

TABLE = "knn_by_frequency"
"""The table's name in the run folder (``metrics/<TABLE>.csv``)."""
CEILING = "tied -> tied (noise floor)"
"""The comparison whose overlap is the ceiling: two tied matrices of different seeds."""
COMPARISONS = {  # label (as in Table 1's rows): (source kind, matrix, target kind, matrix)
    "untied output -> tied": ("untied", "output", "tied", "input"),
    "untied input -> tied": ("untied", "input", "tied", "input"),
    "untied input -> untied output": ("untied", "input", "untied", "output"),
    CEILING: ("tied", "input", "tied", "input"),
}
COLUMNS = ["comparison", "pairing", "bin", "count_min", "count_max", "n_tokens", "overlap", "sd", "n_pairs", "chance",
           "ceiling", "over_chance"]


def knn_by_frequency(models: dict[int, dict[str, Embeddings]], counts: Any, k: int = 10,
                     bins: int = 5) -> pd.DataFrame:
    """Per comparison and frequency bin of one run's models: the mean over pairs of models of the bin's mean overlap,
    beside chance and the ceiling (NaN with one seed).

    Args:
        models: seed -> tied and untied embeddings of one run.
        counts: training count per token id.
        k: the neighbourhood size.
        bins: frequency quantile bins of the seen tokens.

    Returns:
        A frame of :data:`COLUMNS`.
    """
    seeds = sorted(models)
    sizes = {m.vocab_size for s in seeds for m in models[s].values()}
    c = np.asarray(counts)
    if len(sizes) != 1 or c.shape != (next(iter(sizes)),):
        raise ValueError(f"models / counts: every matrix needs one row per token id of one vocabulary and counts one "
                         f"entry per id; got vocabularies {sorted(sizes)} and {c.shape[0] if c.ndim else 0} counts "
                         "(an external pair with two tokenizers has no shared frequency bins)")
    vocab = next(iter(sizes))
    k = check_knn_k(k, vocab, "k")
    near: dict[tuple[int, str, str], Any] = {}

    def idx(seed: int, kind: str, which: str) -> Any:
        key = (seed, kind, "input" if kind == "tied" else which)
        if key not in near:
            near[key] = nearest(models[seed][kind].matrix(key[2]), k)
        return near[key]

    frames = []
    for label, (ka, wa, kb, wb) in COMPARISONS.items():
        # cross seed with two seeds or more (Table 1's headline), else the same seed; within the untied model
        if label == "untied input -> untied output":
            pairing, pairs = "within model", [(s, s) for s in seeds]
        elif len(seeds) < 2:
            pairing, pairs = "same seed", ([] if label == CEILING else [(s, s) for s in seeds])
        else:
            pairing, order = "cross seed", itertools.combinations if label == CEILING else itertools.permutations
            pairs = list(order(seeds, 2))
        for sa, sb in pairs:
            _, per = neighbour_overlap(idx(sa, ka, wa), idx(sb, kb, wb))
            t = token_stats.by_frequency(per.numpy(), c, bins=bins)
            frames.append(t.assign(comparison=label, pairing=pairing))
    long = pd.concat(frames, ignore_index=True)
    g = long.groupby(["comparison", "pairing", "bin"], sort=False)
    out = g.agg(count_min=("count_min", "first"), count_max=("count_max", "first"), n_tokens=("n", "first"),
                overlap=("mean", "mean"), sd=("mean", lambda x: x.std(ddof=1) if len(x) > 1 else np.nan),
                n_pairs=("mean", "size")).reset_index()
    out["chance"] = k / (vocab - 1)
    ceiling = out[out.comparison == CEILING].set_index("bin").overlap
    out["ceiling"] = out.bin.map(ceiling).astype(float)
    out["over_chance"] = out.overlap / out.chance
    return out[COLUMNS]


def cell(table: pd.DataFrame, comparison: str) -> dict[str, float]:
    """One comparison's overlap, chance, ceiling and tokens over all bins (weighted by their tokens)."""
    t = table[table.comparison == comparison]
    if t.empty:
        raise ValueError(f"comparison: no row for {comparison!r}; have {sorted(set(table.comparison))}")
    w = t.n_tokens.to_numpy(dtype=float)
    mean = lambda col: float(np.average(t[col].to_numpy(dtype=float), weights=w))  # noqa: E731
    return {"overlap": mean("overlap"), "chance": float(t.chance.iloc[0]), "ceiling": mean("ceiling"),
            "n_tokens": int(w.sum())}
