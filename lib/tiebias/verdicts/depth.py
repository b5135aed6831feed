"""Claim 3 at several model depths (notebook 03, the ``depth`` profile): the verdict per depth and on the trend.

:func:`depth_table` applies claim 3's rule (:func:`tiebias.verdicts.claims.claim3`) to each depth under each lens
protocol; :func:`describe_depth` says in one sentence per protocol whether the gap grows with depth (the slope's
interval from :func:`tiebias.lens.depth.depth_trend` above 0) and :func:`final_point` puts a depth's final models on
the scale axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from tiebias import stats
from tiebias.lens.depth import depth_trend, per_seed_gaps
from tiebias.lens.tables import at_budget, at_protocol, gaps
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.verdicts.claims import Verdict, claim3

TREND_WORDS = {"above 0": "the gap grows with depth", "below 0": "the gap shrinks with depth",
               "includes 0": "no measurable trend with depth (the interval of the slope includes 0)"}
"""What the slope's interval against 0 says about the gap and depth."""


def depth_table(tables: Mapping[str, pd.DataFrame], protocols: Sequence[str], *, level: float = LEVEL) -> pd.DataFrame:
    """Claim 3 per depth and lens protocol: one row each, from each depth's lens-ladder table (``train_lens_ladders``).

    Args:
        tables: preset -> that depth's per-sequence lens-ladder table (at least one).
        protocols: the lens protocols read.
        level: confidence level of the intervals.

    Returns:
        Sorted by protocol then depth. Columns: preset, n_layers, protocol, gap (early-layer tied - untied KL, bits),
        ci_low, ci_high, n_seeds, budget, converged, verdict, row1_gap with row1_ci_low / row1_ci_high (the gap at
        layer 1 alone: the early window grows with depth, while the paper's reading's penalty sits at row 1), per_seed
        (the per-seed gaps :func:`depth_trend` fits).
    """
    if not tables:
        raise ValueError("tables: need at least one depth")
    rows = []
    for preset, table in tables.items():
        for protocol in protocols:
            v = claim3(table, protocol=protocol, level=level)
            row1 = gaps(at_budget(at_protocol(table, protocol)), level=level).set_index("layer").loc[1]
            rows.append({"preset": preset, "n_layers": int(table.layer.max()), "protocol": protocol,
                         "gap": v.value, "ci_low": v.details["ci_low"], "ci_high": v.details["ci_high"],
                         "n_seeds": v.n_seeds, "budget": v.details["budget"], "converged": v.details["converged"],
                         "verdict": v.status, "row1_gap": float(row1.gap), "row1_ci_low": float(row1.ci_low),
                         "row1_ci_high": float(row1.ci_high), "per_seed": per_seed_gaps(table, protocol)})
    return pd.DataFrame(rows).sort_values(["protocol", "n_layers"], kind="stable").reset_index(drop=True)


MIN_DEPTHS_FOR_SLOPE = 4
"""Fewer depths than this: the fitted line is shown but not read as a trend (three points fit almost any line)."""


def _against_first(rows: pd.DataFrame, col: str) -> str:
    """How each deeper depth's interval of ``col`` lies against the shallowest depth's: below, above or overlapping."""
    lo, hi = f"{col}_ci_low" if col != "gap" else "ci_low", f"{col}_ci_high" if col != "gap" else "ci_high"
    first = rows.iloc[0]
    words = []
    for r in rows.iloc[1:].itertuples():
        r = r._asdict()
        where = ("below" if r[hi] < first[lo] else "above" if r[lo] > first[hi] else "overlapping")
        words.append(f"{r['n_layers']} layers' interval {where} {int(first.n_layers)}'s")
    return ", ".join(words)


def describe_depth(table: pd.DataFrame, *, per: int = 10, level: float = LEVEL) -> str:
    """One plain sentence per protocol: the early-layer gap and the row-1 gap at each depth, how the deeper depths'
    intervals lie against the shallowest's, and the fitted slope, read as a trend only with enough depths.

    Args:
        table: the :func:`depth_table` table.
        per: the slope is stated per this many layers.
        level: confidence level of the slope's interval (:func:`tiebias.lens.depth.depth_trend`).

    Returns:
        The sentences joined; the slope is read as a trend only with :data:`MIN_DEPTHS_FOR_SLOPE` depths or more.
    """
    out = []
    for protocol in dict.fromkeys(table.protocol):
        rows = table[table.protocol == protocol].sort_values("n_layers")
        at = ", ".join(f"{g:+.3g} bits [{lo:+.3g}, {hi:+.3g}] at {n} layers ({v})" for n, g, lo, hi, v in
                       zip(rows.n_layers, rows.gap, rows.ci_low, rows.ci_high, rows.verdict, strict=True))
        row1 = ""
        if "row1_gap" in rows:
            row1 = "; at row 1 alone " + ", ".join(
                f"{g:+.3g} [{lo:+.3g}, {hi:+.3g}] at {n}" for n, g, lo, hi in
                zip(rows.n_layers, rows.row1_gap, rows.row1_ci_low, rows.row1_ci_high, strict=True))
        if rows.n_layers.nunique() < 2:
            out.append(f"{protocol} reading: {at}{row1}; one depth only, so nothing to say about a trend.")
            continue
        s = depth_trend(table, protocol, level=level)
        change = (f"{per * s.slope:+.3g} bits per {per} layers"
                  + ("" if math.isnan(s.ci_low) else f" [{per * s.ci_low:+.3g}, {per * s.ci_high:+.3g}]"))
        compare = f" (early window: {_against_first(rows, 'gap')}"
        compare += f"; row 1: {_against_first(rows, 'row1')})" if "row1_gap" in rows else ")"
        if rows.n_layers.nunique() < MIN_DEPTHS_FOR_SLOPE:
            out.append(f"{protocol} reading: {at}{row1}{compare}; a line through {rows.n_layers.nunique()} depths "
                       f"({change}) is too few points to claim a slope from: compare the intervals instead.")
            continue
        trend = TREND_WORDS[stats.ci_position(s.ci_low, s.ci_high)]
        out.append(f"{protocol} reading: {at}{row1}{compare}; fitted change {change}: {trend}.")
    return " ".join(out)


def final_point(run: Run, variants: Sequence[str], seeds: Sequence[int], verdict: Verdict) -> dict[str, float]:
    """A run's final models as one scale-axis point: mean final validation loss and the claim-3 gap and CI.

    Args:
        run: the run (or depth sub-run) holding the models.
        variants, seeds: the models whose final validation losses are averaged.
        verdict: the models' claim-3 verdict (:func:`tiebias.verdicts.claims.claim3`).

    Returns:
        ``{"val_loss", "gap", "ci_low", "ci_high"}``, the shape of an ``extra`` point of
        :func:`tiebias.output.plotting.lens.gap_vs_loss`.
    """
    losses = [run.summary(v, s).get("final_val_loss", math.nan) for v in variants for s in seeds]
    return {"val_loss": float(np.mean(losses)), "gap": verdict.value, "ci_low": verdict.details["ci_low"],
            "ci_high": verdict.details["ci_high"]}


__all__ = ["MIN_DEPTHS_FOR_SLOPE", "TREND_WORDS", "depth_table", "describe_depth", "final_point"]
