"""Claim 3 taken apart (notebook 03): the tied-untied gap under the paper's two lens ingredients, its reading (hidden
state i through translator i - 1, the ``reference`` protocol) and its 100-step lens budget, alone and together."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tiebias.lens.tables import at_budget, at_protocol, early_gap, gaps, per_layer, same_depth
from tiebias.paper import FIG2_LENS, FIG2_OLMO_KL_BITS
from tiebias.stats import LEVEL

READINGS: dict[str, tuple[str, str, str]] = {
    "a": ("package", "verdict", "package reading, verdict budget (neither ingredient)"),
    "b": ("reference", "verdict", "paper's reading, verdict budget (the reading alone)"),
    "c": ("package", "reference", "package reading, reference budget (the budget alone)"),
    "d": ("reference", "reference", "paper's reading, paper's budget (both ingredients)"),
}
"""key -> (protocol, lens budget: the verdict's or the reference's, label)."""

REFERENCE_BUDGET_LADDER: dict[str, Any] = {"recipes": ("package",), "budgets": (1,), "steps": FIG2_LENS["steps"]}
"""The package's SGD recipe for the paper's 100 steps, one rung (``lens.replace(**REFERENCE_BUDGET_LADDER)``: tokens
per step stay the profile's), trained in ``lens.ladder.REFERENCE_BUDGET``."""


def decomposition(verdict_table: pd.DataFrame, reference_table: pd.DataFrame, *, paired: bool = True,
                  level: float = LEVEL, a: str = "tied", b: str = "untied") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The early-layer gap under the four :data:`READINGS`, beside the paper's layer-0 and layer-1 gaps (Figure 2).

    Args: verdict_table, reference_table: the per-sequence ladder and reference-budget tables, both protocols;
        paired, level: as in :func:`tiebias.lens.tables.early_gap`; a, b: the variants (gaps are ``a - b``).
    Returns: (one row per reading: ``reading``, ``label``, ``protocol``, ``recipe``, ``lens_steps``, ``gap`` with its CI,
        ``method``, ``n_seeds``, ``<variant>_l0``/``_l1``, ``gap_l0``/``gap_l1``, ``paper_gap_l0``/``paper_gap_l1``;
        the per-layer table of each reading, NaN gaps where the models differ in depth).
    """
    rows, layers = [], []
    paper0 = FIG2_OLMO_KL_BITS[0]["tied"] - FIG2_OLMO_KL_BITS[0]["untied"]
    paper1 = FIG2_OLMO_KL_BITS[1]["tied"] - FIG2_OLMO_KL_BITS[1]["untied"]
    for key, (protocol, budget, label) in READINGS.items():
        sub = at_budget(at_protocol(verdict_table if budget == "verdict" else reference_table, protocol))
        g = early_gap(sub, paired=paired, level=level, a=a, b=b)
        m = per_layer(sub).groupby(["variant", "layer"]).kl_tuned_bits.mean()
        kl = {f"{v}_l{i}": float(m.get((v, i), math.nan)) for i in (0, 1) for v in (a, b)}
        rows.append({"reading": key, "label": label, "protocol": protocol, "recipe": str(sub.recipe.iloc[0]),
                     "lens_steps": int(sub.lens_steps.iloc[0]), "gap": g["value"], "ci_low": g["ci_low"],
                     "ci_high": g["ci_high"], "method": g["method"], "n_seeds": g["n_seeds"], **kl,
                     "gap_l0": kl[f"{a}_l0"] - kl[f"{b}_l0"], "gap_l1": kl[f"{a}_l1"] - kl[f"{b}_l1"],
                     "paper_gap_l0": paper0, "paper_gap_l1": paper1})
        if same_depth(sub):
            per = gaps(sub, paired=paired, level=level, a=a, b=b)
        else:  # models of different depth: means only
            per = (per_layer(sub).groupby(["layer", "variant"]).kl_tuned_bits.mean().unstack("variant")
                   .reset_index().assign(gap=math.nan, ci_low=math.nan, ci_high=math.nan))
        layers.append(per.assign(reading=key, label=label))
    return pd.DataFrame(rows), pd.concat(layers, ignore_index=True)
