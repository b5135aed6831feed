"""Models of several depths (notebook 03, the ``depth`` profile) and the numbers of the early-layer gap against depth.

:func:`train_depth_models` trains tied and untied models of another shape in ``<run>/depth/<preset>/``,
sharing the run's data, tokenizer, recipe and seeds, so two depths differ only in their number of layers.
:func:`per_seed_gaps` gives each depth's per-seed early-layer gaps and :func:`depth_trend` fits them against the
number of layers (a slope with its t-interval). The verdicts per depth and on the trend are
:mod:`tiebias.verdicts.depth`'s.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from tiebias import stats
from tiebias.lens.tables import at_budget, at_protocol, early_gap
from tiebias.run.folder import Run

__all__ = ["depth_trend", "per_seed_gaps", "train_depth_models"]


def train_depth_models(run: Run, preset: str, seeds: Sequence[int], config: Any, progress: bool = True) -> Run:
    """Train (or reuse) tied and untied models of ``preset`` in ``<run>/depth/<preset>/``; returns that sub-run.

    Everything but the preset (data, tokenizer, steps, batch, learning rate, seeds) is the run's, so the
    depths differ only in shape. Finished models are reused; an interrupted one resumes from its checkpoint.
    """
    from tiebias.models.build import get_preset
    from tiebias.train.sweeps import train_many

    get_preset(preset)
    sub = Run(run.depth_dir(preset))
    if not sub.config_path.exists():
        _prepare_sub_run(run, sub, preset)
    train_many(sub, [(v, seed) for seed in seeds for v in ("tied", "untied")], replace(config, preset=preset),
               progress=progress)
    return sub


def _prepare_sub_run(run: Run, sub: Run, preset: str) -> None:
    """Copy the run's data into ``sub`` as a whole: built in a temporary folder, then renamed, under the run's writer
    lock, so an interrupted copy leaves nothing half-made (a leftover without config.json is rebuilt)."""
    from tiebias.run.guard import mark

    with run.writing(f"preparing the {preset} models' folder"):
        tmp = sub.path.with_name(f".{preset}.tmp")
        for leftover in (tmp, sub.path):
            if leftover.exists():
                shutil.rmtree(leftover)
        part = Run(tmp)
        tmp.mkdir(parents=True)
        shutil.copytree(run.tokenizer_dir, part.tokenizer_dir)
        shutil.copytree(run.tokens_dir, part.tokens_dir)
        shutil.copy2(run.frequencies_path, part.frequencies_path)
        shutil.copy2(run.config_path, part.config_path)
        mark(tmp, "run")
        tmp.rename(sub.path)


def per_seed_gaps(table: pd.DataFrame, protocol: str) -> list[float]:
    """The per-seed early-layer gaps of claim 3's lens (first recipe, largest budget) under ``protocol``: what
    :func:`depth_trend` fits."""
    return [float(x) for x in early_gap(at_budget(at_protocol(table, protocol)))["per_seed"]]


def depth_trend(table: pd.DataFrame, protocol: str, *, level: float = 0.95) -> stats.Slope:
    """Slope of the per-seed early-layer gap against the number of layers under ``protocol`` (bits per layer)."""
    rows = table[table.protocol == protocol]
    if rows.empty:
        raise ValueError(f"protocol: {protocol!r} is not in the table; have {sorted(set(table.protocol))}")
    x = [n for n, gaps in zip(rows.n_layers, rows.per_seed, strict=True) for _ in gaps]
    y = [g for gaps in rows.per_seed for g in gaps]
    return stats.slope(x, y, level=level)
