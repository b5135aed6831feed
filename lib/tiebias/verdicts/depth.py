"""Claim 3 at several model depths (notebook 03): the verdict per depth and what the depth trend reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from tiebias.lens.tables import at_budget, at_protocol, early_gap, gaps
from tiebias.stats import LEVEL
from tiebias.verdicts.claims import claim3


def depth_table(tables: Mapping[str, pd.DataFrame], protocols: Sequence[str], *, level: float = LEVEL) -> pd.DataFrame:
    """Claim 3 per depth and lens protocol, with the gap at layer 1 alone and the per-seed gaps (for ``depth_trend``).

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
            top = at_budget(at_protocol(table, protocol))
            row1 = gaps(top, level=level).set_index("layer").loc[1]
            rows.append({"preset": preset, "n_layers": int(table.layer.max()), "protocol": protocol,
                         "gap": v.value, "ci_low": v.details["ci_low"], "ci_high": v.details["ci_high"],
                         "n_seeds": v.n_seeds, "budget": v.details["budget"], "converged": v.details["converged"],
                         "verdict": v.status, "row1_gap": float(row1.gap), "row1_ci_low": float(row1.ci_low),
                         "row1_ci_high": float(row1.ci_high), "per_seed": early_gap(top)["per_seed"]})
    return pd.DataFrame(rows).sort_values(["protocol", "n_layers"], kind="stable").reset_index(drop=True)

