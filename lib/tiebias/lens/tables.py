"""Tuned-lens tables of notebook 03: per-layer KL, tied - untied gaps (a t-interval over two or more seeds, else a
bootstrap over evaluation sequences), ladder convergence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tiebias import stats
from tiebias.stats import LEVEL

METRICS = ["kl_tuned_bits", "kl_logit_bits", "ce_tuned_nats", "ce_logit_nats", "ce_model_nats"]
ID_COLUMNS = ["variant", "seed", "step", "recipe", "budget", "lens_steps", "protocol"]
KL_ATOL_BITS = 0.01  # per-layer KL tolerance of the convergence rule: optimiser noise, even where the KL is 0
KL_RTOL = 0.05  # plus this share of the KL: a lens still moving more when its training doubles is still learning


def per_layer(seq_table: pd.DataFrame) -> pd.DataFrame:
    """Mean over evaluation sequences of a per-sequence table: one row per model, lens and layer.

    Args: seq_table: a per-sequence lens table (one without a ``sequence`` column is returned as it is).
    Returns: the :data:`ID_COLUMNS` present, ``layer``, the :data:`METRICS` (means) and ``n_tokens`` (their sum).
    """
    if "sequence" not in seq_table:
        return seq_table
    g = seq_table.groupby([c for c in ID_COLUMNS if c in seq_table] + ["layer"], sort=False, dropna=False)
    out = g[METRICS].mean()
    out["n_tokens"] = g["n_tokens"].sum()
    return out.reset_index()


def at_protocol(df: pd.DataFrame, protocol: str = "package") -> pd.DataFrame:
    """The rows of one lens protocol, re-indexed; a table without the column is all package.

    Args: df: a lens table; protocol: the protocol kept (one the table lacks: ValueError).
    Returns: the rows of that protocol.
    """
    if "protocol" not in df:
        if protocol != "package":
            raise ValueError(f"protocol: {protocol!r} not in the table; it has no protocol column (package rows only)")
        return df
    sub = df[df.protocol == protocol]
    if sub.empty:
        raise ValueError(f"protocol: {protocol!r} not in the table; have {sorted(set(df.protocol))}")
    return sub.reset_index(drop=True)


def at_budget(df: pd.DataFrame, budget: int | None = None, recipe: str | None = None) -> pd.DataFrame:
    """The rows of one recipe (default: the table's first) at one budget (default: its largest), re-indexed.

    Args: df: a lens table (one without ``recipe`` is returned as it is); budget, recipe: the rung (absent: ValueError).
    Returns: the rows of that rung.
    """
    if "recipe" not in df:
        return df
    recipe = recipe if recipe is not None else str(df.recipe.iloc[0])
    sub = df[df.recipe == recipe]
    if sub.empty:
        raise ValueError(f"recipe: {recipe!r} not in the table; have {sorted(set(df.recipe))}")
    budget = int(sub.budget.max()) if budget is None else int(budget)
    sub = sub[sub.budget == budget]
    if sub.empty:
        raise ValueError(f"budget: {budget} not in the table for recipe {recipe!r}")
    return sub.reset_index(drop=True)


def _n_seeds(df: pd.DataFrame, a: str, b: str) -> int:
    return len(set(df[df.variant == a].seed) & set(df[df.variant == b].seed))


def gaps(seq_table: pd.DataFrame, column: str = "kl_tuned_bits", a: str = "tied", b: str = "untied", *,
         paired: bool = True, level: float = LEVEL, n_boot: int = 2000) -> pd.DataFrame:
    """Per-layer gap ``a - b`` of one rung: a t-interval over two or more seeds, else a bootstrap over sequences.

    Args: seq_table: one rung (:func:`at_budget`), per sequence for the bootstrap; column: the metric; a, b: variants;
        paired, level, n_boot: pair the two models' sequences, confidence level, bootstrap resamples.
    Returns: per layer ``layer``, ``<a>``, ``<b>``, ``gap``, ``gap_sd``, ``ci_low``, ``ci_high``, ``p_value``,
        ``n_seeds``, ``significant`` (the CI excludes 0), ``ci_method``.
    """
    rows = []
    if _n_seeds(seq_table, a, b) > 1 or "sequence" not in seq_table:  # paired over seeds, repeated rows refused
        df = per_layer(seq_table)
        if df.duplicated(["layer", "seed", "variant"]).any():
            raise ValueError("df: several rows per (layer, seed, variant), e.g. several lens budgets or recipes; "
                             "select one with lens.tables.at_budget(df, budget, recipe)")
        wide = df.pivot_table(index=["layer", "seed"], columns="variant", values=column)
        if a not in wide or b not in wide:
            raise ValueError(f"variants: need both {a!r} and {b!r} in the table, have {list(wide.columns)}")
        gap = (wide[a] - wide[b]).rename("gap").reset_index()
        for layer, g in gap.groupby("layer"):
            x = g.gap.to_numpy(dtype=float)
            x = x[np.isfinite(x)]
            n = len(x)
            mean = float(x.mean()) if n else math.nan
            sd = float(x.std(ddof=1)) if n > 1 else math.nan
            if n > 1 and sd > 0:
                (lo, hi, _), p = stats.t_interval(mean, sd, n, level), stats.one_sample_p(x)
            else:
                lo, hi, p = math.nan, math.nan, math.nan
            rows.append({"layer": int(layer), a: float(wide.loc[layer][a].mean()),
                         b: float(wide.loc[layer][b].mean()), "gap": mean, "gap_sd": sd, "ci_low": lo, "ci_high": hi, "p_value": p, "n_seeds": n,
                         "significant": n > 1 and stats.excludes_zero(lo, hi), "ci_method": "seeds (t)"})
        return pd.DataFrame(rows)
    depth = seq_table.groupby("variant").layer.max()
    if depth.get(a) != depth.get(b):
        raise ValueError(f"layers: {a} has {depth.get(a)} layers and {b} {depth.get(b)}; per-layer gaps need equal "
                         "depth; use lens.tables.early_gap (relative depth)")
    for layer, g in seq_table.groupby("layer"):
        xa = g[g.variant == a].sort_values("sequence")[column].to_numpy()
        xb = g[g.variant == b].sort_values("sequence")[column].to_numpy()
        mean, lo, hi = stats.bootstrap_diff(xa, xb, paired=paired, n_boot=n_boot, level=level)
        rows.append({"layer": int(layer), a: float(xa.mean()), b: float(xb.mean()), "gap": mean, "gap_sd": math.nan,
                     "ci_low": lo, "ci_high": hi, "p_value": math.nan, "n_seeds": 1,
                     "significant": stats.excludes_zero(lo, hi), "ci_method": "bootstrap over sequences"})
    return pd.DataFrame(rows)


def early_layers(n_layers: int) -> list[int]:
    """The layers called "early" in verdicts: the input layer and the first third of the blocks.

    Args: n_layers: the model's blocks.
    Returns: the layer numbers.
    """
    return list(range(0, max(1, math.ceil(n_layers / 3)) + 1))


def early_gap(seq_table: pd.DataFrame, column: str = "kl_tuned_bits", a: str = "tied", b: str = "untied", *,
              paired: bool = True, level: float = LEVEL, n_boot: int = 2000) -> dict[str, Any]:
    """The early-layer gap of one rung (each model's mean over its own early layers, a - b) with its CI over seeds,
    or with one pair a bootstrap over sequences."""
    df = seq_table[seq_table.variant.isin([a, b])]
    if df.duplicated([c for c in ("layer", "seed", "variant", "sequence") if c in df]).any():
        raise ValueError("seq_table: several rows per model and layer (several budgets or recipes); select one "
                         "with lens.tables.at_budget")
    depth = df.groupby("variant").layer.max()
    if a not in depth or b not in depth:
        raise ValueError(f"variants: need both {a!r} and {b!r} in the table, have {sorted(depth.index)}")
    early = {v: early_layers(int(depth[v])) for v in (a, b)}
    e = df[df.layer <= df.variant.map(lambda v: early[v][-1])]  # early layers are 0..k
    n_seeds = _n_seeds(df, a, b)
    out: dict[str, Any] = {"early_layers": early, "n_seeds": n_seeds,
                           "depth_note": "" if depth[a] == depth[b] else
                           f"{a} has {int(depth[a])} layers, {b} {int(depth[b])}: compared on relative depth "
                           f"(each model's first third)"}
    if n_seeds > 1 or "sequence" not in e:
        per_seed = e.groupby(["seed", "variant"])[column].mean().unstack("variant")
        x = (per_seed[a] - per_seed[b]).dropna().to_numpy(dtype=float)
        mean = float(x.mean())
        sd = float(x.std(ddof=1)) if len(x) > 1 else math.nan
        lo, hi, half = stats.t_interval(mean, sd, len(x), level)
        out.update(value=mean, ci_low=lo, ci_high=hi, half_width=half, sd=sd,
                   method=f"t-interval over {len(x)} seeds", per_seed=x.tolist())
        return out
    per_seq = e.groupby(["variant", "sequence"])[column].mean()
    mean, lo, hi = stats.bootstrap_diff(per_seq[a].to_numpy(), per_seq[b].to_numpy(),
                                        paired=paired and depth[a] == depth[b], n_boot=n_boot, level=level)
    out.update(value=mean, ci_low=lo, ci_high=hi, half_width=(hi - lo) / 2, sd=math.nan,
               method="one pair: no seed noise floor; bootstrap over evaluation sequences", per_seed=[mean])
    return out


def ladder_gaps(seq_table: pd.DataFrame, recipe: str | None = None, column: str = "kl_tuned_bits", *,
                paired: bool = True, level: float = LEVEL) -> pd.DataFrame:
    """The early-layer gap with its CI at every budget of one recipe's ladder.

    Args: seq_table: every rung; recipe: the ladder (None: the first row's); column, paired, level: as :func:`early_gap`.
    Returns: per budget ``recipe``, ``budget``, ``gap``, ``ci_low``, ``ci_high``, ``half_width``, ``n_seeds``, ``method``.
    """
    recipe = recipe if recipe is not None else str(seq_table.recipe.iloc[0])
    rows = []
    for budget in sorted(set(seq_table[seq_table.recipe == recipe].budget)):
        g = early_gap(at_budget(seq_table, budget, recipe), column, paired=paired, level=level)
        rows.append({"recipe": recipe, "budget": int(budget), "gap": g["value"], "ci_low": g["ci_low"],
                     "ci_high": g["ci_high"], "half_width": g["half_width"], "n_seeds": g["n_seeds"],
                     "method": g["method"]})
    return pd.DataFrame(rows)


def convergence(ladder: pd.DataFrame, kl: pd.DataFrame | None = None) -> dict[str, Any]:
    """Whether the ladder converged: its last rung moved the early-layer gap by less than the gap's CI half-width
    and, given ``kl``, no layer's mean KL (per variant) by more than ``KL_ATOL_BITS + KL_RTOL * |KL|``.

    Args: ladder: :func:`ladder_gaps` of one recipe; kl: its lens table (None: the gap part only).
    Returns: ``converged`` (None with one budget), ``change``, ``half_width``, ``budgets``, ``gap_converged``, ``kl``
        (``converged``, the ``worst`` layer, ``atol``, ``rtol``).
    """
    lad = ladder.sort_values("budget")
    if len(lad) < 2:
        return {"converged": None, "change": math.nan, "half_width": float(lad.half_width.iloc[-1]),
                "budgets": lad.budget.tolist(), "gap_converged": None, "kl": None}
    change = float(lad.gap.iloc[-1] - lad.gap.iloc[-2])
    half = float(lad.half_width.iloc[-1])
    gap_ok = bool(math.isfinite(half) and abs(change) < half)
    kl_part = None
    if kl is not None:  # the two largest budgets of the recipe, per variant and layer
        table = per_layer(kl)
        table = table[table.recipe == (str(lad.recipe.iloc[0]) if "recipe" in lad else str(table.recipe.iloc[0]))]
        budgets = sorted(set(table.budget))
        kl_part = {"converged": None, "worst": None, "atol": KL_ATOL_BITS, "rtol": KL_RTOL}
        if len(budgets) >= 2:
            m = table[table.budget.isin(budgets[-2:])].groupby(["variant", "layer", "budget"])["kl_tuned_bits"].mean()
            before, after = m.unstack("budget")[budgets[-2]], m.unstack("budget")[budgets[-1]]
            excess = (after - before).abs() - (KL_ATOL_BITS + KL_RTOL * before.abs())
            variant, layer = excess.idxmax()
            kl_part.update(converged=bool(excess.max() <= 0), worst={
                "variant": str(variant), "layer": int(layer), "before": float(before[(variant, layer)]),
                "after": float(after[(variant, layer)]), "excess": float(excess.max())})
    ok = gap_ok and (kl_part is None or kl_part["converged"] is not False)
    return {"converged": ok, "change": change, "half_width": half, "budgets": lad.budget.tolist(),
            "gap_converged": gap_ok, "kl": kl_part}


def not_converged_because(conv: dict[str, Any]) -> str:
    """What of :func:`convergence`'s result did not converge, as a clause (empty when it converged or was not checked)."""
    if conv["converged"] is not False:
        return ""
    parts = []
    k = conv.get("kl")
    if k and k["converged"] is False:
        w = k["worst"]
        parts.append(f"the lens's KL at the {w['variant']} models' layer {w['layer']} moved by "
                     f"{w['after'] - w['before']:+.3g} bits ({w['before']:.3g} -> {w['after']:.3g}), more than its "
                     f"tolerance {k['atol'] + k['rtol'] * abs(w['before']):.2g} bits ({k['atol']:g} bits "
                     f"+ {k['rtol']:.0%} of the KL)")
    if conv["gap_converged"] is False:
        parts.append(f"the early-layer gap changed by {conv['change']:+.3g} bits, not less than its CI half-width "
                     f"{conv['half_width']:.3g} bits")
    return " and ".join(parts)


def describe_convergence(conv: dict[str, Any]) -> str:
    """The convergence line of claim 3's recorded text: converged or not and, when not, what still moved.

    Args: conv: the dict :func:`convergence` returns.
    Returns: one sentence.
    """
    if conv["converged"] is None:
        return "Lens convergence not checked: one lens budget (give lens_budgets two or more rungs)."
    b = conv["budgets"]
    head = f"Lens convergence, {b[-2]}x -> {b[-1]}x lens training"
    k = conv.get("kl")
    kl_ok = (f"every layer's lens KL moved by less than its tolerance ({k['atol']:g} bits + {k['rtol']:.0%} of the KL)"
             if k and k["converged"] else "")
    gap = (f"the early-layer gap changed by {conv['change']:+.3g} bits, less than its CI half-width "
           f"{conv['half_width']:.3g} bits")
    if conv["converged"]:
        return f"{head}: converged: " + "; ".join(p for p in (kl_ok, gap) if p) + "."
    settled = "; ".join(p for p in (kl_ok, gap if conv["gap_converged"] else "") if p)
    return (f"{head}: NOT converged (the lenses are still learning): {not_converged_because(conv)}."
            + (f" Settled: {settled}." if settled else ""))


def same_depth(table: pd.DataFrame) -> bool:
    """Whether every model in the table has the same number of layers (per-layer gaps need that).

    Args: table: a lens table with ``variant`` and ``layer`` columns.
    Returns: True when every variant's deepest layer is the same.
    """
    return table.groupby("variant").layer.max().nunique() == 1


def ladder_layers(kl: pd.DataFrame, layers: Sequence[int] = (0, 1, 2), column: str = "kl_tuned_bits") -> pd.DataFrame:
    """Tuned-lens KL of some layers at every rung, per variant, as "mean ± sd" over seeds.

    Args: kl: every rung; layers: the layers shown; column: the metric.
    Returns: text cells indexed by (``recipe``, ``budget``), columns (``layer``, ``variant``); sd 0 with one seed.
    """
    sub = per_layer(kl)
    sub = sub[sub.layer.isin(layers)]
    g = sub.groupby(["recipe", "budget", "layer", "variant"], sort=False)[column]
    cell = (g.mean().map("{:.3g}".format) + " ± " + g.std(ddof=1).fillna(0).map("{:.2g}".format)).rename(column)
    return cell.unstack(["layer", "variant"])


def depth_trend(table: pd.DataFrame, protocol: str, *, level: float = LEVEL) -> stats.Slope:
    """Slope (bits per layer) of the per-seed early-layer gap against the number of layers, from a depth table.

    Args:
        table: :func:`tiebias.verdicts.depth.depth_table`; protocol: the lens protocol; level: of the interval.

    Returns:
        The :class:`tiebias.stats.Slope`."""
    rows = table[table.protocol == protocol]
    if rows.empty:
        raise ValueError(f"protocol: {protocol!r} is not in the table; have {sorted(set(table.protocol))}")
    x = [n for n, gaps in zip(rows.n_layers, rows.per_seed, strict=True) for _ in gaps]
    y = [g for gaps in rows.per_seed for g in gaps]
    return stats.slope(x, y, level=level)
