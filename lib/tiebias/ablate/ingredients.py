"""Claim 4 taken apart: which ingredient of the paper's setup could explain the size of its shift?

The paper (Table 2) moves the tied matrix far less at k = 5 than the kit's sweep. Each ingredient changes one thing
and measures the same shift (k = 5 minus k = 1, orthogonal Procrustes cosine, per seed): the reference (the same
seed's untied model or another seed's), or a recipe change (:data:`tiebias.config.choices.INGREDIENTS`) under which
the k = 1 and k = 5 tied models are trained again in ``<run>/ingredients/<name>/``.
"""

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
from tiebias.train.depths import share_data
from tiebias.train.sweeps import train_many
from tiebias.train.trainer import TrainConfig

K = 5.0
"""The paper's factor (Table 2): the shift every ingredient is measured at."""
SGD_LR = 0.3
"""SGD's learning rate in the ``sgd`` ingredient: with the gradient norm clipped at 1, about AdamW's step size."""
PAPER_SHIFT = {col: TABLE2_STEP10K[K][name] - TABLE2_STEP10K[1.0][name]
               for col, name in (("vs_untied_input", "vs untied input"), ("vs_untied_output", "vs untied output"))}
"""The paper's shift at k = 5, step 10k (Table 2), per cosine."""
KIT = "kit (another seed's untied model)"
SAME_SEED = "same-seed untied model"


def check(names: Sequence[str], factors: Sequence[float], seeds: Sequence[int]) -> tuple[list[str], str]:
    """The ingredients this sweep can measure, and a note saying why none when it cannot (else "").

    Args:
        names: the ingredients asked for (``ablate_ingredients``); each must be one of
            :data:`tiebias.config.choices.INGREDIENTS`, else ValueError naming the parameter.
        factors: the sweep's gradient factors (``ablate_factors``): the ingredients need k = 1 and k = :data:`K`.
        seeds: the sweep's seeds (``ablate_seeds``): the ingredients need two or more.

    Returns:
        ``(names, note)``: the names as a list and ``""`` when they can be measured (also when none are asked for);
        an empty list and the reason otherwise.

    A sweep without k = 1 and k = 5 has no kit's shift at the paper's k to set beside them, and one seed has no other
    seed's untied model to compare with: then the ingredients are skipped with the note (a study that changes
    ``ablate_factors`` or ``ablate_seeds`` still runs).
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
    if name == "warmup10":
        return replace(cfg, warmup_steps=max(1, round(0.1 * cfg.steps))).validate()
    if name == "no_embedding_decay":
        return replace(cfg, decay_embeddings=False).validate()
    if name == "sgd":
        return replace(cfg, optimizer="sgd", lr=SGD_LR).validate()
    raise ValueError(f"ablate_ingredients: unknown value {name!r}; allowed: {', '.join(INGREDIENTS)}")


def train_ingredients(run: Run, names: Sequence[str], seeds: Sequence[int], cfg: TrainConfig, *,
                      progress: bool = True) -> dict[str, Run]:
    """Train (or reuse) each ingredient's k = 1 and k = 5 tied models in ``<run>/ingredients/<name>/``; their runs.

    Args:
        run: the sweep's run; each ingredient's folder gets a copy of its data
            (:func:`tiebias.train.depths.share_data`), so only the recipe differs.
        names: the ingredients to train (as :func:`check` returns them).
        seeds: the seeds each ingredient's two models are trained with.
        cfg: the kit's recipe; each ingredient changes one thing in it (:func:`recipe`).
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
    """Orthogonal Procrustes cosine (centred, in-sample, as Table 2) of the untied matrices mapped onto a tied one."""
    ref = embeddings.from_run(ref_run, Variant(False), ref_seed)
    tied = embeddings.from_run(tied_run, v, seed)
    return {"vs_untied_input": maps.align_all(ref.input, tied.input, ("orthogonal",))["orthogonal"].mean,
            "vs_untied_output": maps.align_all(ref.output, tied.input, ("orthogonal",))["orthogonal"].mean}


def shifts_from_sweep(table: pd.DataFrame, label: str, method: str = "orthogonal") -> pd.DataFrame:
    """Per-seed shifts (k minus k = 1) of every k of a sweep alignment table at its final step, labelled ``label``.

    Args:
        table: a sweep alignment table (:func:`tiebias.ablate.sweep.alignment_table`); every seed needs a k = 1 row.
        label: written in the ``ingredient`` column (e.g. :data:`KIT` or :data:`SAME_SEED`, by the reference used).
        method: the alignment map whose cosines are read.

    Returns:
        Columns ``ingredient``, ``k``, ``seed``, ``vs_untied_input`` and ``vs_untied_output`` (each the cosine at k
        minus that at k = 1 of the same seed), one row per seed and k other than 1.
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
        run: the sweep's run, whose untied models are the reference.
        subs: ingredient name -> its run folder (:func:`train_ingredients`).
        seeds: the seeds trained; each is compared with the untied model of the next seed in this order (the last
            with the first).

    Returns:
        Columns ``ingredient``, ``k`` (:data:`K`), ``seed``, ``val_loss_k5`` (final validation loss of the ingredient's
        k = 5 model, nats), ``vs_untied_input`` and ``vs_untied_output`` (k = 5 minus k = 1, orthogonal Procrustes
        cosine), one row per ingredient and seed.
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
    """Mean shift and its t-interval over seeds per (ingredient, k), the paper's shift at k = 5 beside, and whether
    the paper's shift lies inside the interval (both cosines: ``matches_paper``).

    Args:
        per_seed: rows of :func:`shifts_from_sweep` and :func:`shifts_from_ingredients` (concatenated).
        level: confidence level of the t-intervals.

    Returns:
        One row per (ingredient, k), in order of first appearance: ``ingredient``, ``k``, ``n_seeds``; per cosine
        (``vs_untied_input``, ``vs_untied_output``) the mean, ``<col>_ci_low``, ``<col>_ci_high`` and ``paper_<col>``
        (NaN except at k = 5); ``matches_paper`` (True or False at k = 5 with two or more seeds, else None); and
        ``val_loss_k5`` (mean over seeds) where the rows have it.
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


__all__ = ["K", "KIT", "PAPER_SHIFT", "SAME_SEED", "SGD_LR", "check", "recipe", "shifts_from_ingredients",
           "shifts_from_sweep", "summary", "train_ingredients"]
