"""Claim 3 at several model depths (notebook 03): the verdict per depth and whether the gap grows with depth."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from tiebias import stats
from tiebias.lens.tables import at_budget, at_protocol, depth_trend, gaps, per_seed_gaps
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.verdicts.claims import Verdict, claim3

TREND_WORDS = {"above 0": "the gap grows with depth", "below 0": "the gap shrinks with depth",
               "includes 0": "no measurable trend with depth (the interval of the slope includes 0)"}
"""What the slope's interval against 0 says about the gap and depth."""


def depth_table(tables: Mapping[str, pd.DataFrame], protocols: Sequence[str], *, level: float = LEVEL) -> pd.DataFrame:
    """Claim 3 per depth and lens protocol, with the gap at layer 1 alone and the per-seed gaps
    :func:`tiebias.lens.tables.depth_trend` fits.

    Args:
        tables: preset -> that depth's per-sequence lens-ladder table; protocols: the lens protocols; level: of the CIs.

    Returns:
        One row per depth and protocol, sorted by protocol then depth."""
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
"""Fewer depths than this: the fitted line is not read as a trend."""


def _against_first(rows: pd.DataFrame, col: str) -> str:
    """How each deeper depth's interval of ``col`` lies against the shallowest depth's."""
    lo, hi = f"{col}_ci_low" if col != "gap" else "ci_low", f"{col}_ci_high" if col != "gap" else "ci_high"
    first = rows.iloc[0]
    words = []
    for r in rows.iloc[1:].itertuples():
        r = r._asdict()
        where = ("below" if r[hi] < first[lo] else "above" if r[lo] > first[hi] else "overlapping")
        words.append(f"{r['n_layers']} layers' interval {where} {int(first.n_layers)}'s")
    return ", ".join(words)


def describe_depth(table: pd.DataFrame, *, per: int = 10, level: float = LEVEL) -> str:
    """One sentence per protocol: the gaps at each depth, their intervals against the shallowest's, and the
    slope, read as a trend only with :data:`MIN_DEPTHS_FOR_SLOPE` depths.

    Args:
        table: :func:`depth_table`; per: the slope is stated per this many layers; level: of the slope's interval.

    Returns:
        The sentences joined."""
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
    """A run's final models as one scale-axis point.

    Args:
        run: the run holding the models; variants, seeds: the models averaged; verdict: their :func:`claims.claim3`.

    Returns:
        ``{"val_loss", "gap", "ci_low", "ci_high"}``, an ``extra`` point of :func:`tiebias.output.plotting.lens.gap_vs_loss`."""
    losses = [run.summary(v, s).get("final_val_loss", math.nan) for v in variants for s in seeds]
    return {"val_loss": float(np.mean(losses)), "gap": verdict.value, "ci_low": verdict.details["ci_low"],
            "ci_high": verdict.details["ci_high"]}

