"""Claim 4 taken apart: each ingredient changes one thing, the reference or the recipe (retrained in
``<run>/ingredients/<name>/``), and measures the same shift (k = 5 minus k = 1, orthogonal cosine, per seed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from tiebias import stats
from tiebias.align import embeddings, maps
from tiebias.config.choices import INGREDIENTS
from tiebias.config.variants import Variant
from tiebias.paper import TABLE2_STEP10K
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.train.sweeps import share_data, train_many
from tiebias.train.trainer import TrainConfig

K = 5.0  # the paper's factor (Table 2)
SGD_LR = 0.3  # with the gradient norm clipped at 1, about AdamW's step size
PAPER_SHIFT = {col: TABLE2_STEP10K[K][name] - TABLE2_STEP10K[1.0][name]
               for col, name in (("vs_untied_input", "vs untied input"), ("vs_untied_output", "vs untied output"))}
KIT = "kit (another seed's untied model)"
SAME_SEED = "same-seed untied model"


def check(names: Sequence[str], factors: Sequence[float], seeds: Sequence[int]) -> tuple[list[str], str]:
    """The ingredients this sweep can measure (it needs k = 1 and k = 5 and two or more seeds), or none and why.

    Args:
        names: ``ablate_ingredients``; an unknown one raises ValueError.
        factors, seeds: the sweep's gradient factors and seeds.

    Returns:
        ``(names, "")`` or ``([], reason)``.
    """
    bad = [n for n in names if n not in INGREDIENTS]
    if bad:
        raise ValueError(f"ablate_ingredients: unknown value {bad[0]!r}; allowed: {', '.join(INGREDIENTS)}")
    if names and (K not in factors or 1.0 not in factors):
        return [], (f"ablate_ingredients {list(names)} skipped: they need 1 and {K:g} in ablate_factors (the kit's own "
                    f"shift at the paper's k = {K:g}); this sweep has {list(factors)}")
    if names and len(seeds) < 2:
        return [], (f"ablate_ingredients {list(names)} skipped: they need two or more ablate_seeds (the reference is "
                    f"another seed's untied model); this sweep has {list(seeds)}")
    return list(names), ""


def recipe(name: str, cfg: TrainConfig) -> TrainConfig:
    """The kit's recipe with one ingredient's change."""
    changes = {"warmup10": {"warmup_steps": max(1, round(0.1 * cfg.steps))},
               "no_embedding_decay": {"decay_embeddings": False}, "sgd": {"optimizer": "sgd", "lr": SGD_LR}}
    if name not in changes:
        raise ValueError(f"ablate_ingredients: unknown value {name!r}; allowed: {', '.join(INGREDIENTS)}")
    return replace(cfg, **changes[name]).validate()


def train_ingredients(run: Run, names: Sequence[str], seeds: Sequence[int], cfg: TrainConfig, *,
                      progress: bool = True) -> dict[str, Run]:
    """Train (or reuse) each ingredient's k = 1 and k = 5 tied models in ``<run>/ingredients/<name>/`` on the run's data.

    Args:
        run, names, seeds, cfg: the sweep's run, the ingredients (:func:`check`), the seeds and the kit's recipe.
        progress: show progress bars.

    Returns:
        Ingredient name -> the run folder holding its models.
    """
    out = {}
    for name in names:
        sub = share_data(run, run.path / "ingredients" / name, f"the {name} ingredient's models")
        train_many(sub, [(v, s) for s in seeds for v in (Variant(True), Variant(True, K))], recipe(name, cfg),
                   progress=progress)
        out[name] = sub
    return out


def _cosines(ref_run: Run, ref_seed: int, tied_run: Run, v: Variant, seed: int) -> dict[str, float]:
    """Orthogonal cosine (in-sample, as Table 2) of the untied matrices mapped onto a tied one."""
    ref = embeddings.from_run(ref_run, Variant(False), ref_seed)
    tied = embeddings.from_run(tied_run, v, seed)
    return {"vs_untied_input": maps.align_all(ref.input, tied.input, ("orthogonal",))["orthogonal"].mean,
            "vs_untied_output": maps.align_all(ref.output, tied.input, ("orthogonal",))["orthogonal"].mean}


def shifts_from_sweep(table: pd.DataFrame, label: str, method: str = "orthogonal") -> pd.DataFrame:
    """Per-seed shifts (k minus k = 1) of every k of a sweep alignment table at its final step.

    Args:
        table, label, method: the alignment table (a k = 1 row per seed), the ``ingredient`` column, the map read.

    Returns:
        ``ingredient``, ``k``, ``seed``, ``vs_untied_input``, ``vs_untied_output``.
    """
    d = table[(table.method == method) & (table.step == table.step.max())]
    rows = []
    for seed, g in d.groupby("seed"):
        g = g.set_index("k")
        for k in g.index:
            if k != 1.0:
                rows.append({"ingredient": label, "k": float(k), "seed": int(seed),
                             **{c: float(g.loc[k, c] - g.loc[1.0, c]) for c in PAPER_SHIFT}})
    return pd.DataFrame(rows, columns=["ingredient", "k", "seed", *PAPER_SHIFT])


def shifts_from_ingredients(run: Run, subs: Mapping[str, Run], seeds: Sequence[int]) -> pd.DataFrame:
    """Per-seed shifts at k = 5 of each trained ingredient, against the run's untied model of the next seed.

    Args:
        run, subs, seeds: the sweep's run, ingredient -> its run (:func:`train_ingredients`), the seeds.

    Returns:
        ``ingredient``, ``k``, ``seed``, ``val_loss_k5`` (nats), ``vs_untied_input``, ``vs_untied_output``.
    """
    rows = []
    for name, sub in subs.items():
        for i, seed in enumerate(seeds):
            ref_seed = seeds[(i + 1) % len(seeds)]
            c1 = _cosines(run, ref_seed, sub, Variant(True), seed)
            ck = _cosines(run, ref_seed, sub, Variant(True, K), seed)
            loss = sub.summary(Variant(True, K), seed)["final_val_loss"]
            rows.append({"ingredient": name, "k": K, "seed": seed, "val_loss_k5": float(loss),
                         **{c: ck[c] - c1[c] for c in PAPER_SHIFT}})
    return pd.DataFrame(rows)


def summary(per_seed: pd.DataFrame, *, level: float = LEVEL) -> pd.DataFrame:
    """Mean shift and t-interval over seeds per (ingredient, k), and whether the paper's shift lies inside on both cosines.

    Args:
        per_seed, level: rows of the two ``shifts_from_`` functions; the intervals' level.

    Returns:
        Per (ingredient, k): ``n_seeds``, per cosine the mean, ``_ci_low``, ``_ci_high``, ``paper_``,
        ``matches_paper`` (None below two seeds or off k = 5), ``val_loss_k5`` where present.
    """
    rows = []
    if per_seed.empty:
        return pd.DataFrame(columns=["ingredient", "k", "n_seeds", "matches_paper"])
    for (name, k), g in per_seed.groupby(["ingredient", "k"], sort=False):
        row: dict[str, Any] = {"ingredient": name, "k": k, "n_seeds": int(len(g))}
        inside = []
        for col, paper in PAPER_SHIFT.items():
            s = stats.summarise(g[col], level=level)
            row.update({col: s.mean, f"{col}_ci_low": s.ci_low, f"{col}_ci_high": s.ci_high,
                        f"paper_{col}": paper if k == K else math.nan})
            inside.append(s.ci_low <= paper <= s.ci_high if k == K and s.n > 1 else None)
        row["matches_paper"] = None if None in inside else bool(all(inside))
        if "val_loss_k5" in g and g.val_loss_k5.notna().any():  # did the retrained models learn? (nats)
            row["val_loss_k5"] = float(g.val_loss_k5.mean())
        rows.append(row)
    return pd.DataFrame(rows)
