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
from tiebias.run.folder import Run
from tiebias.verdicts.claims import Verdict, claim3

TREND_WORDS = {"above 0": "the gap grows with depth", "below 0": "the gap shrinks with depth",
               "includes 0": "no measurable trend with depth (the interval of the slope includes 0)"}
"""What the slope's interval against 0 says about the gap and depth."""


def depth_table(tables: Mapping[str, pd.DataFrame], protocols: Sequence[str], *, level: float = 0.95) -> pd.DataFrame:
    """Claim 3 per depth and lens protocol: one row each, from each depth's lens-ladder table (``train_lens_ladders``).

    Columns: preset, n_layers, protocol, gap (early-layer tied - untied KL, bits), ci_low, ci_high, n_seeds,
    budget, converged, verdict, per_seed (the per-seed gaps :func:`depth_trend` fits).
    """
    if not tables:
        raise ValueError("tables: need at least one depth")
    rows = []
    for preset, table in tables.items():
        for protocol in protocols:
            v = claim3(table, protocol=protocol, level=level)
            rows.append({"preset": preset, "n_layers": int(table.layer.max()), "protocol": protocol,
                         "gap": v.value, "ci_low": v.details["ci_low"], "ci_high": v.details["ci_high"],
                         "n_seeds": v.n_seeds, "budget": v.details["budget"], "converged": v.details["converged"],
                         "verdict": v.status, "per_seed": per_seed_gaps(table, protocol)})
    return pd.DataFrame(rows).sort_values(["protocol", "n_layers"], kind="stable").reset_index(drop=True)


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
        trend = TREND_WORDS[stats.ci_position(s.ci_low, s.ci_high)]
        out.append(f"{protocol} reading: {at}; fitted change {change}: {trend}.")
    return " ".join(out)


def final_point(run: Run, variants: Sequence[str], seeds: Sequence[int], verdict: Verdict) -> dict[str, float]:
    """A run's final models as one scale-axis point: mean final validation loss and the claim-3 gap and CI."""
    losses = [run.summary(v, s).get("final_val_loss", math.nan) for v in variants for s in seeds]
    return {"val_loss": float(np.mean(losses)), "gap": verdict.value, "ci_low": verdict.details["ci_low"],
            "ci_high": verdict.details["ci_high"]}


__all__ = ["TREND_WORDS", "depth_table", "describe_depth", "final_point"]
