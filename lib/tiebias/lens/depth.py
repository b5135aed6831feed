"""Claim 3 at several model depths (notebook 03, the ``depth`` profile): does the early-layer gap grow with depth?

:func:`train_depth_models` trains tied and untied models of another shape in ``<run>/depth/<preset>/``,
sharing the run's data, tokenizer, recipe and seeds, so two depths differ only in their number of layers.
:func:`depth_table` applies claim 3's rule (:func:`tiebias.verdicts.claims.claim3`) to each depth under each lens
protocol; :func:`depth_trend` fits the per-seed gaps against the number of layers (a slope with its
t-interval) and :func:`describe_depth` says in one sentence whether the gap grows with depth.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from tiebias import stats
from tiebias.run.folder import Run

__all__ = ["depth_table", "depth_trend", "describe_depth", "train_depth_models"]


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


def depth_table(tables: Mapping[str, pd.DataFrame], protocols: Sequence[str], *, level: float = 0.95) -> pd.DataFrame:
    """Claim 3 per depth and lens protocol: one row each, from each depth's lens-ladder table (``train_lens_ladders``).

    Columns: preset, n_layers, protocol, gap (early-layer tied - untied KL, bits), ci_low, ci_high, n_seeds,
    budget, converged, verdict, per_seed (the per-seed gaps :func:`depth_trend` fits).
    """
    from tiebias.verdicts.claims import claim3

    if not tables:
        raise ValueError("tables: need at least one depth")
    rows = []
    for preset, table in tables.items():
        for protocol in protocols:
            v = claim3(table, protocol=protocol, level=level)
            rows.append({"preset": preset, "n_layers": int(table.layer.max()), "protocol": protocol,
                         "gap": v.value, "ci_low": v.details["ci_low"], "ci_high": v.details["ci_high"],
                         "n_seeds": v.n_seeds, "budget": v.details["budget"], "converged": v.details["converged"],
                         "verdict": v.status, "per_seed": _per_seed(table, protocol)})
    return pd.DataFrame(rows).sort_values(["protocol", "n_layers"], kind="stable").reset_index(drop=True)


def _per_seed(table: pd.DataFrame, protocol: str) -> list[float]:
    """The per-seed early-layer gaps of the verdict's lens (first recipe, largest budget) under ``protocol``."""
    from tiebias.lens.tables import at_budget, at_protocol, early_gap

    return [float(x) for x in early_gap(at_budget(at_protocol(table, protocol)))["per_seed"]]


def depth_trend(table: pd.DataFrame, protocol: str, *, level: float = 0.95) -> stats.Slope:
    """Slope of the per-seed early-layer gap against the number of layers under ``protocol`` (bits per layer)."""
    rows = table[table.protocol == protocol]
    if rows.empty:
        raise ValueError(f"protocol: {protocol!r} is not in the table; have {sorted(set(table.protocol))}")
    x = [n for n, gaps in zip(rows.n_layers, rows.per_seed, strict=True) for _ in gaps]
    y = [g for gaps in rows.per_seed for g in gaps]
    return stats.slope(x, y, level=level)


def describe_depth(table: pd.DataFrame, *, per: int = 10, level: float = 0.95) -> str:
    """One plain sentence per protocol: the gap at each depth, and whether it grows with depth (slope CI above 0)."""
    out = []
    for protocol in dict.fromkeys(table.protocol):
        rows = table[table.protocol == protocol]
        at = ", ".join(f"{g:+.3g} bits [{lo:+.3g}, {hi:+.3g}] at {n} layers ({v})" for n, g, lo, hi, v in
                       zip(rows.n_layers, rows.gap, rows.ci_low, rows.ci_high, rows.verdict, strict=True))
        if rows.n_layers.nunique() < 2:
            out.append(f"{protocol} reading: {at}; one depth only, so nothing to say about a trend.")
            continue
        s = depth_trend(table, protocol, level=level)
        change = (f"{per * s.slope:+.3g} bits per {per} layers"
                  + ("" if math.isnan(s.ci_low) else f" [{per * s.ci_low:+.3g}, {per * s.ci_high:+.3g}]"))
        if s.ci_low > 0:
            trend = "the gap grows with depth"
        elif s.ci_high < 0:
            trend = "the gap shrinks with depth"
        else:
            trend = "no measurable trend with depth (the interval of the slope includes 0)"
        out.append(f"{protocol} reading: {at}; fitted change {change}: {trend}.")
    return " ".join(out)
