"""The early-layer gap against model depth (notebook 03, the ``depth`` profile): numbers only; the verdicts are
:mod:`tiebias.verdicts.depth`'s."""

from __future__ import annotations

import pandas as pd

from tiebias import stats
from tiebias.lens.tables import at_budget, at_protocol, early_gap
from tiebias.stats import LEVEL

__all__ = ["depth_trend", "per_seed_gaps"]


def per_seed_gaps(table: pd.DataFrame, protocol: str) -> list[float]:
    """The per-seed early-layer gaps of claim 3's lens (first recipe, largest budget) under ``protocol``: what
    :func:`depth_trend` fits."""
    return [float(x) for x in early_gap(at_budget(at_protocol(table, protocol)))["per_seed"]]


def depth_trend(table: pd.DataFrame, protocol: str, *, level: float = LEVEL) -> stats.Slope:
    """Slope of the per-seed early-layer gap against the number of layers under ``protocol`` (bits per layer)."""
    rows = table[table.protocol == protocol]
    if rows.empty:
        raise ValueError(f"protocol: {protocol!r} is not in the table; have {sorted(set(table.protocol))}")
    x = [n for n, gaps in zip(rows.n_layers, rows.per_seed, strict=True) for _ in gaps]
    y = [g for gaps in rows.per_seed for g in gaps]
    return stats.slope(x, y, level=level)
