"""Cosine levels of Tables 1, 2 and 6 and Figure 3 at every saved checkpoint beside the paper's at its own steps: do
ours still move? Table 2's and 6's k > 1 cells come from 04's ``tied_in<k>`` models where trained."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from tiebias import paper
from tiebias.ablate import sweep
from tiebias.align import comparisons
from tiebias.config.variants import Variant
from tiebias.run import inventory
from tiebias.run.folder import Run

TABLE = "levels_at_checkpoints"  # metrics/<TABLE>.csv
METHOD = "orthogonal"  # the map of Tables 2 and 6 and the paper's headline column of Table 1
COLUMNS = ["source", "quantity", "who", "step", "fraction", "mean", "sd", "n", "values"]
_TABLE1 = ("untied output -> tied", "untied input -> tied", "untied input -> untied output", "tied -> tied (noise floor)")
_WHICH = {"vs untied input": "untied input -> tied", "vs untied output": "untied output -> tied"}
_COLUMN = {"vs untied input": "vs_untied_input", "vs untied output": "vs_untied_output"}


def paper_levels() -> pd.DataFrame:
    """The paper's cosine levels with the step it read them at (Table 1: fully trained, step NaN), ``who`` = paper."""
    olmo = paper.TABLE1["OLMo-1B"]
    rows = [("Table 1", q, np.nan, float(olmo[q][METHOD])) for q in _TABLE1 if q in olmo]
    for src, table, step in (("Table 6", paper.TABLE6_STEP1K, 1000), ("Table 2", paper.TABLE2_STEP10K, 10000)):
        for k, cells in table.items():
            for which, v in cells.items():
                q = _WHICH[which] if float(k) == 1.0 else f"k = {float(k):g}, {which}"
                rows.append((src, q, step, float(v)))
    rows += [("Figure 3", f"untied {which}: cosine to initialisation", 20000, float(v))
             for which, v in paper.FIG3_COS_TO_INIT.items()]
    return pd.DataFrame([{"source": s, "quantity": q, "who": "paper", "step": st, "fraction": np.nan, "mean": v,
                          "sd": np.nan, "n": 1, "values": json.dumps([v])} for s, q, st, v in rows], columns=COLUMNS)


def _summarise(df: pd.DataFrame, source: str, quantity: str, column: str, final: int) -> list[dict]:
    """Mean, sd, count and the values (JSON, one order of seeds at every step) of ``column`` per step."""
    out = []
    keys = [c for c in ("seed_source", "seed_target", "seed", "reference_seed") if c in df]
    for step, g in df.groupby("step", sort=True):
        x = (g.sort_values(keys) if keys else g)[column].to_numpy(dtype=float)
        out.append({"source": source, "quantity": quantity, "who": "this run", "step": int(step),
                    "fraction": int(step) / final if final else np.nan, "mean": float(x.mean()),
                    "sd": float(x.std(ddof=1)) if len(x) > 1 else np.nan, "n": len(x), "values": json.dumps(x.tolist())})
    return out


def levels(run: Run, seeds: Sequence[int] | None = None, *, evolution: pd.DataFrame | None = None,
           scaled: bool = True) -> pd.DataFrame:
    """Our levels at every checkpoint shared by the tied and untied models of ``seeds``, then the paper's.

    Args:
        run, seeds: the run and its seeds (None: every seed with complete tied and untied models).
        evolution, scaled: 02's Figure 3 table (None: computed); also 04's ``tied_in<k>`` models.

    Returns:
        :data:`COLUMNS`: per quantity and step our mean, sd, ``values`` and ``fraction`` of our final step; then the
        paper's.
    """
    if seeds is None:
        seeds = inventory.require_complete(run, ("tied", "untied"))
    seeds = sorted(seeds)
    steps = sweep.common_steps(run, [Variant(True)], seeds)
    final = max(steps) if steps else 0
    cross = len(seeds) > 1
    pairing = "cross seed" if cross else "same seed"
    rows: list[dict] = []
    t1 = []
    for step in steps:
        t = comparisons.table1(comparisons.load_models(run, seeds, step), [METHOD], knn_k=None)
        t1.append(t.assign(step=step))
    if t1:
        t1_all = pd.concat(t1, ignore_index=True)
        for q in _TABLE1:
            want = "within model" if q == "untied input -> untied output" else pairing
            sub = t1_all[(t1_all.comparison == q) & (t1_all.pairing == ("cross seed" if "noise" in q else want))]
            rows += _summarise(sub, "Table 1", q, METHOD, final)
    found = [Variant.parse(v) for v in run.models().query("complete").variant.unique()] if scaled else []
    ks = sorted({v for v in found if v.tied and v.input_factor != 1.0 and v.output_factor == 1.0
                 and all(run.is_complete(v, s) for s in seeds)}, key=lambda v: v.input_factor)
    if ks:
        k_steps = sweep.common_steps(run, ks, seeds)
        t = sweep.alignment_table(run, ks, seeds, steps=[s for s in k_steps if s in steps], methods=[METHOD],
                                  reference="cross" if cross else "same")
        for (k, which) in [(v.input_factor, w) for v in ks for w in _COLUMN]:
            rows += _summarise(t[t.k == k], "Tables 2, 6", f"k = {k:g}, {which}", _COLUMN[which], final)
    ev = comparisons.evolution_table(run, seeds) if evolution is None else evolution
    for which in ("input", "output"):
        rows += _summarise(ev[ev.matrix == f"untied {which}"], "Figure 3", f"untied {which}: cosine to initialisation",
                           "cos_to_init", final)
    return pd.concat([pd.DataFrame(rows, columns=COLUMNS), paper_levels()], ignore_index=True)


def at_fraction(table: pd.DataFrame, quantity: str, fraction: float) -> pd.Series:
    """Our row of one quantity at the checkpoint nearest to ``fraction`` of training."""
    ours = table[(table.quantity == quantity) & (table.who == "this run")]
    if ours.empty:
        raise ValueError(f"quantity: {quantity!r} has no level of this run; have "
                         f"{sorted(set(table[table.who == 'this run'].quantity))}")
    return ours.loc[(ours.fraction - fraction).abs().idxmin()]


def values(row: pd.Series) -> np.ndarray:
    """The per-pair values of one row of :func:`levels` (also as read back from its CSV)."""
    return np.asarray(json.loads(str(row["values"])), dtype=float)


