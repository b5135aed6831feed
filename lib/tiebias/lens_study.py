"""Tuned-lens study over a run (notebook 03): lens-budget ladders, per-layer KL tables, tied-untied gaps, verdicts.

Lenses are trained on the validation split (text the models never trained on) and evaluated on the
test split (held-out works), so neither the models nor the lenses saw the evaluation text.

**Lens-budget ladder.** Every model's lens is trained to ``budgets[0] x lens_steps`` steps, evaluated
and saved; the *same* lens, with its optimiser state and data cursor, then continues to the next
budget, and so on. Learning-rate schedule: each rung runs its own warmup then linear decay to 0 over
the rung's new steps (a warm restart), so every saved rung is an annealed lens (not a snapshot taken
mid-schedule at a high learning rate), and rung 1 is exactly the single-budget lens of a one-rung
ladder. Layout, in the tuned_lens package format::

    <model dir>/lens/                  the largest rung of the first recipe (what other code loads)
    <model dir>/lens/<recipe>-x<b>/    every rung: config.json, params.pt, rung.json (+ trainer.pt, eval_*.csv)

``trainer.pt`` (optimiser and data state) is kept at the highest finished rung only, so an
interrupted ladder resumes from there and a finished rung is never retrained.

**Recipes.** ``cpu``: Adam (amsgrad) at 1e-2 with a short warmup, the kit's CPU-sized default (see
:func:`tiebias.lens.train_lens`). ``package``: the tuned-lens package's own recipe (SGD with Nesterov
momentum 0.9, its ``lr_scale`` 1.0 applied as ``1.0 * (1 - 0.9)``, weight decay 1e-3, no warmup),
at the profile's tokens per step (the package uses 2**18).

**Verdict.** Claim 3 compares the early-layer gap (tied - untied tuned-lens KL, averaged over the
early layers of each model) at the largest budget with its confidence interval: over seeds (t
interval) when there are two or more, else a bootstrap over evaluation sequences ("one pair: no seed
noise floor"). The ladder has converged when its last rung moved that gap by less than the interval's
half-width; otherwise the verdict is "not converged" instead of holds / does not hold.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import lens as tl
from . import profiles
from .files import write_json_atomic
from .runs import Run
from .variants import Variant

RECIPES: dict[str, dict[str, Any]] = {
    "cpu": {"optimizer": "adam", "lr": 1e-2, "momentum": 0.9, "weight_decay": 1e-3},
    "package": {"optimizer": "sgd", "lr": 1.0, "momentum": 0.9, "weight_decay": 1e-3, "warmup_steps": 0},
}
"""Named lens-training recipes (keyword arguments of :func:`tiebias.lens.train_lens`)."""

METRICS = ["kl_tuned_bits", "kl_logit_bits", "ce_tuned_nats", "ce_logit_nats", "ce_model_nats"]
_ID_COLUMNS = ["variant", "seed", "step", "recipe", "budget", "lens_steps"]
_RUNG = "rung.json"
_TRAINER = "trainer.pt"
_TOP_RECIPE = "recipe.json"


# --------------------------------------------------------------------------- parameters


def check_budgets(lens_budgets: Any) -> list[int]:
    """The ladder: positive, strictly increasing integer multiples of lens_steps (the schema's rule, e.g. [1, 2, 4])."""
    return profiles.coerce("lens_budgets", lens_budgets)


def check_recipes(lens_recipes: Any) -> list[str]:
    """The lens recipes: distinct names from :data:`RECIPES`; the first one carries the verdict (the schema's rule)."""
    return profiles.coerce("lens_recipes", lens_recipes)


def check_checkpoints(lens_checkpoints: Any) -> list[int]:
    """Scale-axis checkpoints: increasing training steps >= 0, [] (or None) for none (the schema's rule)."""
    return [] if lens_checkpoints in (None, "") else profiles.coerce("lens_checkpoints", lens_checkpoints)


def check_params(params: dict[str, Any]) -> dict[str, Any]:
    """Validate notebook 03's lens parameters up front against the schema, each error naming the parameter."""
    out = dict(params)
    for name in ("lens_steps", "lens_tokens_per_step", "lens_eval_tokens", "lens_depth_preset"):
        out[name] = profiles.coerce(name, out.get(name))
    out["lens_budgets"] = check_budgets(out.get("lens_budgets", [1]))
    out["lens_recipes"] = check_recipes(out.get("lens_recipes", ["cpu"]))
    out["lens_checkpoints"] = check_checkpoints(out.get("lens_checkpoints", []))
    out["lens_depth_preset"] = out["lens_depth_preset"] or ""
    return out


def recipe_kwargs(recipe: str, steps: int) -> dict[str, Any]:
    """train_lens keyword arguments of a named recipe for a run of ``steps`` steps (warmup scaled to short runs)."""
    if recipe not in RECIPES:
        raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)}")
    kw = dict(RECIPES[recipe])
    kw.setdefault("warmup_steps", min(25, steps // 10))  # the package's Adam warmup of 25, scaled for short runs
    return kw


# --------------------------------------------------------------------------- the ladder


def lens_dir(run: Run, variant: str | Variant, seed: int, step: int | None = None) -> Path:
    """Where a model's lens lives: ``models/<variant>-s<seed>/lens/`` (or ``.../checkpoints/step-N/lens/``)."""
    if step is None:
        return run.model_dir(variant, seed) / tl.LENS_SUBDIR
    return run.model_path(variant, seed, step) / tl.LENS_SUBDIR


def rung_dir(folder: str | Path, recipe: str, budget: int) -> Path:
    """Folder of one rung of a ladder: ``<lens folder>/<recipe>-x<budget>``."""
    return Path(folder) / f"{recipe}-x{int(budget)}"


def _rung_meta(recipe: str, budgets: Sequence[int], k: int, *, steps: int, tokens_per_step: int, seq_len: int,
               n_tokens: int, model_sha256: str) -> dict[str, Any]:
    """What determines rung k of a ladder (its lens depends on every rung before it, and on the model)."""
    return {"recipe": recipe, "train_lens": RECIPES[recipe], "ladder": list(budgets[: k + 1]),
            "budget": int(budgets[k]), "lens_steps": steps, "tokens_per_step": tokens_per_step, "seq_len": seq_len,
            "n_train_tokens": int(n_tokens), "model_sha256": model_sha256}


def _rung_done(path: Path, meta: dict[str, Any]) -> bool:
    """A rung counts as finished when its lens files exist and it was trained by the same ladder."""
    f = path / _RUNG
    return (path / "params.pt").is_file() and f.is_file() and json.loads(f.read_text()) == meta


def train_ladder(model: Any, tokens: Any, folder: str | Path, *, steps: int, tokens_per_step: int, seq_len: int,
                 budgets: Sequence[int] = (1,), recipe: str = "cpu", progress: bool = True,
                 ) -> dict[int, Any]:
    """Train (or load) a lens at every budget of the ladder; returns {budget: TunedLens}. Resumable.

    Rung k continues rung k-1's lens and optimiser for ``(budgets[k] - budgets[k-1]) * steps`` steps
    (schedule per rung, see the module docstring). Finished rungs are loaded, not retrained; an
    interrupted ladder restarts from the highest finished rung that kept its trainer state.
    """
    import torch

    budgets = check_budgets(budgets)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"lens_steps: {steps!r} is not allowed; need an integer > 0")
    if recipe not in RECIPES:
        raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)}")
    folder = Path(folder)
    sha = tl._unembed_sha256(model)
    metas = [_rung_meta(recipe, budgets, k, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                        n_tokens=tokens.numel(), model_sha256=sha) for k in range(len(budgets))]
    dirs = [rung_dir(folder, recipe, b) for b in budgets]
    done = 0
    while done < len(budgets) and _rung_done(dirs[done], metas[done]):
        done += 1
    out: dict[int, Any] = {}
    if done == len(budgets):
        return {b: tl.load_lens(model, d) for b, d in zip(budgets, dirs, strict=True)}
    start = max((k for k in range(done) if (dirs[k] / _TRAINER).is_file()), default=-1)
    for k in range(start):
        out[budgets[k]] = tl.load_lens(model, dirs[k])
    lens, state = None, {}
    if start >= 0:
        lens = tl.load_lens(model, dirs[start])
        state = torch.load(dirs[start] / _TRAINER, map_location="cpu", weights_only=True)
        out[budgets[start]] = copy.deepcopy(lens) if start < len(budgets) - 1 else lens
    for k in range(start + 1, len(budgets)):
        seg = (budgets[k] - (budgets[k - 1] if k else 0)) * steps
        kw = recipe_kwargs(recipe, seg)
        lens = tl.train_lens(model, tokens, steps=seg, tokens_per_step=tokens_per_step, seq_len=seq_len,
                             progress=progress, lens=lens, state=state, **kw)
        if dirs[k].exists():
            shutil.rmtree(dirs[k])
        tl.save_lens(lens, dirs[k])
        torch.save(state, dirs[k] / _TRAINER)
        write_json_atomic(dirs[k] / _RUNG, metas[k])  # last: marks the rung finished
        if k > 0:
            (dirs[k - 1] / _TRAINER).unlink(missing_ok=True)
        out[budgets[k]] = copy.deepcopy(lens) if k < len(budgets) - 1 else lens  # the next rung trains in place
    return out


def _publish(folder: Path, recipe: str, budget: int, meta: dict[str, Any]) -> None:
    """Copy a rung's lens files to the top of the lens folder, where :func:`tiebias.lens.load_lens` finds them."""
    src = rung_dir(folder, recipe, budget)
    top = folder / _TOP_RECIPE
    if top.is_file() and json.loads(top.read_text()) == meta and (folder / "params.pt").is_file():
        return
    for f in src.iterdir():
        if f.is_file() and f.name not in (_RUNG, _TRAINER) and not f.name.startswith("eval_"):
            shutil.copy2(f, folder / f.name)
    write_json_atomic(top, meta)


def _evaluate_cached(model: Any, tokens: Any, lens: Any, path: Path, *, seq_len: int, eval_tokens: int,
                     logit_lens: bool) -> pd.DataFrame:
    """Per-sequence evaluation of one lens (or the logit lens alone), cached as ``path`` next to the lens."""
    if path.is_file():
        return pd.read_csv(path)
    df = tl.evaluate(model, tokens, lens, seq_len=seq_len, max_tokens=eval_tokens, per_sequence=True,
                     logit_lens=logit_lens)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return df


def ladder_table(model: Any, train_tokens: Any, test_tokens: Any, folder: str | Path, *, steps: int,
                 tokens_per_step: int, seq_len: int, eval_tokens: int, budgets: Sequence[int] = (1,),
                 recipes: Sequence[str] = ("cpu",), progress: bool = True) -> pd.DataFrame:
    """Train (or load) every recipe's ladder for one model and evaluate each rung, per evaluation sequence.

    Columns: ``recipe``, ``budget``, ``lens_steps`` (total steps of that rung), ``sequence``, ``layer`` and
    the :func:`tiebias.lens.evaluate` columns. The logit lens is evaluated once and shared by all rungs.
    Evaluations are cached in the rung folders, so a rerun costs only loading. The first recipe's
    largest rung is also written to the top of ``folder``.
    """
    budgets, recipes = check_budgets(budgets), check_recipes(recipes)
    folder = Path(folder)
    tag = f"eval_{eval_tokens}x{seq_len}.csv"
    sha = tl._unembed_sha256(model)
    logit = _evaluate_cached(model, test_tokens, None, folder / f"logit_{sha[:12]}_{tag}", seq_len=seq_len,
                             eval_tokens=eval_tokens, logit_lens=True)
    frames = []
    for recipe in recipes:
        lenses = train_ladder(model, train_tokens, folder, steps=steps, tokens_per_step=tokens_per_step,
                              seq_len=seq_len, budgets=budgets, recipe=recipe, progress=progress)
        for b, lens in lenses.items():
            df = _evaluate_cached(model, test_tokens, lens, rung_dir(folder, recipe, b) / tag, seq_len=seq_len,
                                  eval_tokens=eval_tokens, logit_lens=False)
            df["kl_logit_bits"] = logit.kl_logit_bits.to_numpy()
            df["ce_logit_nats"] = logit.ce_logit_nats.to_numpy()
            df.insert(0, "recipe", recipe)
            df.insert(1, "budget", b)
            df.insert(2, "lens_steps", b * steps)
            frames.append(df)
    meta = _rung_meta(recipes[0], budgets, len(budgets) - 1, steps=steps, tokens_per_step=tokens_per_step,
                      seq_len=seq_len, n_tokens=train_tokens.numel(), model_sha256=sha)
    _publish(folder, recipes[0], budgets[-1], meta)
    return pd.concat(frames, ignore_index=True)


def _final_step(run: Run, variant: str | Variant, seed: int) -> int | None:
    """Training steps of a finished model (None when unknown)."""
    try:
        return int(run.summary(variant, seed)["steps"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def ensure_lens(run: Run, variant: str | Variant, seed: int, *, steps: int, tokens_per_step: int, seq_len: int,
                budgets: Sequence[int] = (1,), recipe: str = "cpu", step: int | None = None,
                progress: bool = True, device: str = "cpu") -> tuple[Any, Any]:
    """(model, lens at the largest budget) of one model of a run (or one checkpoint), trained if not yet saved."""
    model = run.load_model(variant, seed, step, device=device)
    with run.writing(f"lens of {Variant.parse(variant).name}-s{seed}"):
        lenses = train_ladder(model, run.tokens("validation"), lens_dir(run, variant, seed, step), steps=steps,
                              tokens_per_step=tokens_per_step, seq_len=seq_len, budgets=budgets, recipe=recipe,
                              progress=progress)
    return model, lenses[max(lenses)]


def kl_table(run: Run, variants: Sequence[str], seeds: Sequence[int], *, steps: int, tokens_per_step: int,
             seq_len: int, eval_tokens: int, budgets: Sequence[int] = (1,), recipes: Sequence[str] = ("cpu",),
             step: int | None = None, per_sequence: bool = False, progress: bool = True,
             device: str = "cpu") -> pd.DataFrame:
    """Lens ladders of every (variant, seed) of a run (or of its checkpoints at ``step``), evaluated on the test split.

    Long format with ``variant``, ``seed``, ``step`` (training step of the model; the final step for
    final models), ``recipe``, ``budget``, ``lens_steps``, ``layer`` and the evaluation columns; one
    row per layer (means over sequences) or, with ``per_sequence``, per layer and evaluation sequence.
    A checkpoint at a model's final step is the final model and shares its lens.
    """
    frames = []
    val, test = run.tokens("validation"), run.tokens("test")
    for seed in seeds:
        for v in variants:
            final = _final_step(run, v, seed)
            at = None if step is None or step == final else step
            model = run.load_model(v, seed, at, device=device)
            with run.writing(f"lenses of {Variant.parse(v).name}-s{seed}"):  # one writer of lens folders
                df = ladder_table(model, val, test, lens_dir(run, v, seed, at), steps=steps,
                                  tokens_per_step=tokens_per_step, seq_len=seq_len, eval_tokens=eval_tokens,
                                  budgets=budgets, recipes=recipes, progress=progress)
            df.insert(0, "variant", Variant.parse(v).name)
            df.insert(1, "seed", seed)
            df.insert(2, "step", step if step is not None else final)
            frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    return out if per_sequence else per_layer(out)


def per_layer(seq_table: pd.DataFrame) -> pd.DataFrame:
    """Mean over evaluation sequences of a per-sequence table: one row per model, lens and layer."""
    if "sequence" not in seq_table:
        return seq_table
    keys = [c for c in _ID_COLUMNS if c in seq_table] + ["layer"]
    g = seq_table.groupby(keys, sort=False, dropna=False)
    out = g[METRICS].mean()
    out["n_tokens"] = g["n_tokens"].sum()
    return out.reset_index()


def at_budget(df: pd.DataFrame, budget: int | None = None, recipe: str | None = None) -> pd.DataFrame:
    """The rows of one recipe (default: the first in the table) and one budget (default: its largest)."""
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


# --------------------------------------------------------------------------- gaps and confidence intervals


def gap_table(df: pd.DataFrame, column: str = "kl_tuned_bits", a: str = "tied", b: str = "untied",
              level: float = 0.95) -> pd.DataFrame:
    """Per layer: mean of ``a`` and ``b``, and the paired gap a - b over seeds with sd, t-interval and p-value.

    ``significant`` means the confidence interval of the gap excludes 0 (needs two or more seeds; see
    :func:`gaps` for one pair). The table must hold one lens per model (select a rung with
    :func:`at_budget` first); repeated (layer, seed, variant) rows are refused rather than averaged.
    """
    from scipy import stats

    df = per_layer(df)
    if df.duplicated(["layer", "seed", "variant"]).any():
        raise ValueError("df: several rows per (layer, seed, variant), e.g. several lens budgets or recipes; "
                         "select one with lens_study.at_budget(df, budget, recipe)")
    wide = df.pivot_table(index=["layer", "seed"], columns="variant", values=column)
    if a not in wide or b not in wide:
        raise ValueError(f"variants: need both {a!r} and {b!r} in the table, have {list(wide.columns)}")
    gap = (wide[a] - wide[b]).rename("gap").reset_index()
    rows = []
    for layer, g in gap.groupby("layer"):
        x = g.gap.to_numpy(dtype=float)
        x = x[np.isfinite(x)]
        n = len(x)
        mean = float(x.mean()) if n else math.nan
        sd = float(x.std(ddof=1)) if n > 1 else math.nan
        if n > 1 and sd > 0:
            half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
            p = float(stats.ttest_1samp(x, 0.0).pvalue)
        else:
            half, p = math.nan, math.nan
        lo, hi = mean - half, mean + half
        rows.append({"layer": int(layer), a: float(wide.loc[layer][a].mean()), b: float(wide.loc[layer][b].mean()),
                     "gap": mean, "gap_sd": sd, "ci_low": lo, "ci_high": hi, "p_value": p, "n_seeds": n,
                     "significant": bool(n > 1 and (lo > 0 or hi < 0)), "ci_method": "seeds (t)"})
    return pd.DataFrame(rows)


def bootstrap_ci(a: np.ndarray, b: np.ndarray, *, paired: bool, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): percentile bootstrap CI, resampling evaluation sequences.

    ``paired``: a[i] and b[i] come from the same text (one run's tokenizer), so sequences are resampled
    jointly; otherwise (two tokenizers) each side is resampled on its own.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"sequences: a bootstrap needs at least 2 evaluation sequences per model, got "
                         f"{len(a)} and {len(b)}; raise lens_eval_tokens")
    if paired and len(a) != len(b):
        raise ValueError(f"paired: sequences differ in number ({len(a)} vs {len(b)}); pass paired=False")
    rng = np.random.default_rng(seed)
    if paired:
        d = a - b
        boot = d[rng.integers(0, len(d), (n_boot, len(d)))].mean(1)
    else:
        boot = (a[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
                - b[rng.integers(0, len(b), (n_boot, len(b)))].mean(1))
    lo, hi = np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2])
    return float(a.mean() - b.mean()), float(lo), float(hi)


def _n_seeds(df: pd.DataFrame, a: str, b: str) -> int:
    """Seeds with both variants."""
    return len(set(df[df.variant == a].seed) & set(df[df.variant == b].seed))


def gaps(seq_table: pd.DataFrame, column: str = "kl_tuned_bits", a: str = "tied", b: str = "untied", *,
         paired: bool = True, level: float = 0.95, n_boot: int = 2000) -> pd.DataFrame:
    """Per-layer gap table of one rung with a CI: over seeds (t) with two or more seeds, else a bootstrap over sequences.

    Same columns as :func:`gap_table`; ``ci_method`` says which interval it is. One pair of models of
    different depth has no per-layer gap (compare :func:`early_gap` on relative depth instead).
    """
    if _n_seeds(seq_table, a, b) > 1 or "sequence" not in seq_table:
        return gap_table(seq_table, column, a, b, level)
    depth = seq_table.groupby("variant").layer.max()
    if depth.get(a) != depth.get(b):
        raise ValueError(f"layers: {a} has {depth.get(a)} layers and {b} {depth.get(b)}; per-layer gaps need equal "
                         "depth; use lens_study.early_gap (relative depth)")
    rows = []
    for layer, g in seq_table.groupby("layer"):
        xa = g[g.variant == a].sort_values("sequence")[column].to_numpy()
        xb = g[g.variant == b].sort_values("sequence")[column].to_numpy()
        mean, lo, hi = bootstrap_ci(xa, xb, paired=paired, n_boot=n_boot, level=level)
        rows.append({"layer": int(layer), a: float(xa.mean()), b: float(xb.mean()), "gap": mean, "gap_sd": math.nan,
                     "ci_low": lo, "ci_high": hi, "p_value": math.nan, "n_seeds": 1,
                     "significant": bool(lo > 0 or hi < 0), "ci_method": "bootstrap over sequences"})
    return pd.DataFrame(rows)


def early_layers(n_layers: int) -> list[int]:
    """The layers called "early" in verdicts: the input layer and the first third of the blocks."""
    return list(range(0, max(1, math.ceil(n_layers / 3)) + 1))


def early_gap(seq_table: pd.DataFrame, column: str = "kl_tuned_bits", a: str = "tied", b: str = "untied", *,
              paired: bool = True, level: float = 0.95, n_boot: int = 2000) -> dict[str, Any]:
    """The early-layer gap of one rung with its CI: each model's mean over its own early layers, a minus b.

    With two or more seeds: the mean over seeds of the paired per-seed gap and its t-interval. With one
    pair: a bootstrap over evaluation sequences (no seed noise floor). Models of different depth each
    use their own early layers (the first third on relative depth). Keys: value, ci_low, ci_high,
    half_width, n_seeds, method, early_layers (per variant), per_seed.
    """
    from scipy import stats

    df = seq_table[seq_table.variant.isin([a, b])]
    if df.duplicated([c for c in ("layer", "seed", "variant", "sequence") if c in df]).any():
        raise ValueError("seq_table: several rows per model and layer (several budgets or recipes); select one "
                         "with lens_study.at_budget")
    depth = df.groupby("variant").layer.max()
    if a not in depth or b not in depth:
        raise ValueError(f"variants: need both {a!r} and {b!r} in the table, have {sorted(depth.index)}")
    early = {v: early_layers(int(depth[v])) for v in (a, b)}
    mask = np.zeros(len(df), dtype=bool)
    for v, layers in early.items():
        mask |= ((df.variant == v) & df.layer.isin(layers)).to_numpy()
    e = df[mask]
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
        half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1)) * sd / math.sqrt(len(x)) if len(x) > 1 else math.nan
        out.update(value=mean, ci_low=mean - half, ci_high=mean + half, half_width=half, sd=sd,
                   method=f"t-interval over {len(x)} seeds", per_seed=x.tolist())
        return out
    per_seq = e.groupby(["variant", "sequence"])[column].mean()
    mean, lo, hi = bootstrap_ci(per_seq[a].to_numpy(), per_seq[b].to_numpy(),
                                paired=paired and depth[a] == depth[b], n_boot=n_boot, level=level)
    out.update(value=mean, ci_low=lo, ci_high=hi, half_width=(hi - lo) / 2, sd=math.nan,
               method="one pair: no seed noise floor; bootstrap over evaluation sequences", per_seed=[mean])
    return out


def ladder_gaps(seq_table: pd.DataFrame, recipe: str | None = None, column: str = "kl_tuned_bits", *,
                paired: bool = True, level: float = 0.95) -> pd.DataFrame:
    """The early-layer gap with its CI at every budget of one recipe's ladder (default: the first recipe)."""
    recipe = recipe if recipe is not None else str(seq_table.recipe.iloc[0])
    rows = []
    for budget in sorted(set(seq_table[seq_table.recipe == recipe].budget)):
        g = early_gap(at_budget(seq_table, budget, recipe), column, paired=paired, level=level)
        rows.append({"recipe": recipe, "budget": int(budget), "gap": g["value"], "ci_low": g["ci_low"],
                     "ci_high": g["ci_high"], "half_width": g["half_width"], "n_seeds": g["n_seeds"],
                     "method": g["method"]})
    return pd.DataFrame(rows)


def convergence(ladder: pd.DataFrame) -> dict[str, Any]:
    """Whether the ladder converged: its last rung moved the early-layer gap by less than that gap's CI half-width.

    ``ladder`` is :func:`ladder_gaps` output. ``converged`` is None with a single budget (nothing to
    compare), else a bool; ``change`` is the last rung's change of the gap, ``half_width`` the largest
    budget's CI half-width (NaN, e.g. with zero spread, counts as not converged).
    """
    lad = ladder.sort_values("budget")
    if len(lad) < 2:
        return {"converged": None, "change": math.nan, "half_width": float(lad.half_width.iloc[-1]),
                "budgets": lad.budget.tolist()}
    change = float(lad.gap.iloc[-1] - lad.gap.iloc[-2])
    half = float(lad.half_width.iloc[-1])
    return {"converged": bool(math.isfinite(half) and abs(change) < half), "change": change, "half_width": half,
            "budgets": lad.budget.tolist()}


def claim3_verdict(seq_table: pd.DataFrame, *, paired: bool = True, level: float = 0.95) -> dict[str, Any]:
    """Claim 3 at the largest budget of the first recipe: value, CI, convergence and the verdict text.

    ``verdict`` is "holds" (the CI of the early-layer gap lies above 0), "does not hold", or
    "not converged" (the last rung of the ladder moved the gap by its CI half-width or more).
    ``threshold`` is the distance from the value down to the CI's lower end, so ``value > threshold``
    is "CI above 0" (what :func:`tiebias.report.record` checks). Other recipes are summarised in
    ``text`` for comparison only.
    """
    recipes = list(dict.fromkeys(seq_table.recipe))
    ladder = ladder_gaps(seq_table, recipes[0], paired=paired, level=level)
    conv = convergence(ladder)
    top = at_budget(seq_table, None, recipes[0])
    g = early_gap(top, paired=paired, level=level)
    budget = int(ladder.budget.max())
    ci_ok = math.isfinite(g["ci_low"])
    if conv["converged"] is False:
        verdict = "not converged"
    elif not ci_ok:
        verdict = "undetermined (no confidence interval)"
    else:
        verdict = "holds" if g["ci_low"] > 0 else "does not hold"
    lines = [f"Early-layer gap (tied - untied tuned-lens KL, layers {g['early_layers']['tied']}), recipe "
             f"{recipes[0]!r} at {budget}x lens_steps: {g['value']:+.3g} bits, {int(level * 100)}% CI "
             f"[{g['ci_low']:+.3g}, {g['ci_high']:+.3g}] ({g['method']})."]
    if g["depth_note"]:
        lines.append(f"Note: {g['depth_note']}.")
    if conv["converged"] is None:
        lines.append("Lens convergence not checked: one lens budget (give lens_budgets two or more rungs).")
    else:
        lines.append(f"Lens convergence: the last rung ({conv['budgets'][-2]}x -> {conv['budgets'][-1]}x) moved the "
                     f"gap by {conv['change']:+.3g} bits, {'less' if conv['converged'] else 'not less'} than the CI "
                     f"half-width {conv['half_width']:.3g}: {'converged' if conv['converged'] else 'NOT converged'}.")
    for r in recipes[1:]:
        o = early_gap(at_budget(seq_table, None, r), paired=paired, level=level)
        lines.append(f"For comparison, recipe {r!r} at its largest budget: {o['value']:+.3g} bits "
                     f"[{o['ci_low']:+.3g}, {o['ci_high']:+.3g}].")
    if verdict == "not converged":
        lines.append("Claim 3: NOT CONVERGED at this lens budget (raise lens_budgets or lens_steps); no verdict.")
    elif verdict.startswith("undetermined"):
        lines.append("Claim 3: undetermined (no confidence interval for the gap).")
    else:
        lines.append(f"Claim 3 (tied early layers read worse: CI of the gap above 0) "
                     f"{'HOLDS' if verdict == 'holds' else 'does NOT hold'} here.")
    threshold = g["value"] - g["ci_low"] if ci_ok else math.inf
    return {"verdict": verdict, "text": "\n".join(lines), "value": g["value"], "threshold": threshold, "sd": g["sd"],
            "ci_low": g["ci_low"], "ci_high": g["ci_high"], "method": g["method"], "n_seeds": g["n_seeds"],
            "early_layers": g["early_layers"], "budget": budget, "recipe": recipes[0], "converged": conv["converged"],
            "convergence": conv, "ladder": ladder.to_dict(orient="records")}


def same_depth(table: pd.DataFrame) -> bool:
    """Whether every model in the table has the same number of layers (per-layer gaps need that)."""
    return table.groupby("variant").layer.max().nunique() == 1


def ladder_layers(kl: pd.DataFrame, layers: Sequence[int] = (0, 1, 2), column: str = "kl_tuned_bits") -> pd.DataFrame:
    """Tuned-lens KL of the given layers at every rung, per variant: "mean ± sd" over seeds (rows recipe, budget)."""
    sub = per_layer(kl)
    sub = sub[sub.layer.isin(layers)]
    g = sub.groupby(["recipe", "budget", "layer", "variant"], sort=False)[column]
    cell = (g.mean().map("{:.3g}".format) + " ± " + g.std(ddof=1).fillna(0).map("{:.2g}".format)).rename(column)
    return cell.unstack(["layer", "variant"])


def describe_scale(scale: pd.DataFrame, level: float = 0.95) -> str:
    """One sentence per checkpoint of :func:`scale_table`: validation loss, early-layer gap and whether its CI is above 0."""
    parts = []
    for r in scale.itertuples():
        where = "above 0" if r.ci_low > 0 else ("below 0" if r.ci_high < 0 else "includes 0")
        conv = {True: "", False: ", lens not converged", None: ""}[r.converged]
        parts.append(f"step {r.step} (val loss {r.val_loss:.2f}): {r.gap:+.3g} bits [{r.ci_low:+.3g}, {r.ci_high:+.3g}], "
                     f"CI {where}{conv}")
    above = [int(r.step) for r in scale.itertuples() if r.ci_low > 0]
    tail = (f"Tied early layers read worse (CI above 0) at steps {above}." if above
            else "At no checkpoint does the CI of the gap lie above 0.")
    return f"Early-layer gap ({int(level * 100)}% CI) by training step: " + "; ".join(parts) + ". " + tail


def describe_gaps(gaps: pd.DataFrame) -> str:
    """One sentence on a per-layer gap table: where tied reads worse, and where the CI excludes 0."""
    c = claim3(gaps)
    return (f"Tied - untied tuned-lens KL: {c['input_layer_gap']:+.3g} bits at the input layer, {c['value']:+.3g} on "
            f"average over the early layers {c['early_layers']}; tied > untied at layers {c['positive_layers'] or 'none'}; "
            f"the 95% CI ({gaps.ci_method.iloc[0]}) excludes 0 at layers {c['significant_layers'] or 'none'}.")


def final_point(run: Run, variants: Sequence[str], seeds: Sequence[int], verdict: dict[str, Any]) -> dict[str, float]:
    """A run's final models as one scale-axis point: mean final validation loss and the verdict's gap and CI."""
    losses = [run.summary(v, s).get("final_val_loss", math.nan) for v in variants for s in seeds]
    return {"val_loss": float(np.mean(losses)), "gap": verdict["value"], "ci_low": verdict["ci_low"],
            "ci_high": verdict["ci_high"]}


def record_claim3(run: Run, verdict: dict[str, Any], paper: Any = None) -> dict[str, Any]:
    """Store a :func:`claim3_verdict` as the run's claim-3 headline (value, CI distance as threshold, convergence)."""
    from .report import record

    details = {k: verdict[k] for k in ("verdict", "ci_low", "ci_high", "method", "budget", "recipe", "converged",
                                       "convergence", "ladder", "early_layers")}
    return record(run, "claim3_tuned_lens", value=verdict["value"], threshold=verdict["threshold"],
                  unit="bits (early layers)", spread=verdict["sd"], n_seeds=verdict["n_seeds"], paper=paper,
                  statement=verdict["text"], details=details, status=verdict["verdict"])


def claim3(gaps: pd.DataFrame) -> dict[str, Any]:
    """Per-layer summary of a gap table: early-layer mean gap, RMS seed sd, significant and positive layers."""
    n_layers = int(gaps.layer.max())
    early = early_layers(n_layers)
    e = gaps[gaps.layer.isin(early)]
    value = float(e.gap.mean())
    sd = float(np.sqrt(np.nanmean(e.gap_sd.to_numpy() ** 2))) if e.n_seeds.min() > 1 else math.nan
    sig = e[e.significant].layer.tolist()
    return {"early_layers": early, "value": value, "sd": sd,
            "input_layer_gap": float(gaps[gaps.layer == 0].gap.iloc[0]),
            "significant_layers": gaps[gaps.significant].layer.tolist(), "significant_early_layers": sig,
            "positive_layers": gaps[gaps.gap > 0].layer.tolist()}


def load_sources(sources: dict[str, Any], device: str = "cpu", dtype: Any = None) -> dict[str, tuple[Any, Any]]:
    """Load any HF causal LMs (local folders or hub ids) with their tokenizers: label -> (model, tokenizer).

    Delegates to :func:`tiebias.sources.load_models`: the configs are checked first (``tied`` really
    tied, ``untied`` really untied, a family the lens can follow, enough free memory), so a wrong pair
    is refused before any weights load. ``dtype`` defaults to float32.
    """
    import torch

    from . import sources as src

    return src.load_models(sources, device=device, dtype=torch.float32 if dtype is None else dtype)


def kl_table_models(models: dict[str, tuple[Any, Any]], corpus: Any = None, *, steps: int, tokens_per_step: int,
                    seq_len: int, eval_tokens: int, folder: str | Path, budgets: Sequence[int] = (1,),
                    recipes: Sequence[str] = ("cpu",), per_sequence: bool = False,
                    progress: bool = True) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Lens study on loaded models (e.g. a real tied/untied checkpoint pair) with each model's own tokenizer.

    Lenses train on the corpus's validation split and are evaluated on its test split, as for a run;
    each label's ladder lives in ``<folder>/lens/<label>/``. Returns the long table (``variant`` =
    label, ``seed`` = 0; per layer, or per sequence with ``per_sequence``) and the largest-budget
    lens of the first recipe by label.
    """
    from . import data, tokens

    ds = data.load_corpus(corpus)
    frames, lenses = [], {}
    for label, (model, tok) in models.items():
        val = tokens.encode(tok, ds["validation"]["text"])
        test = tokens.encode(tok, ds["test"]["text"])
        sub = Path(folder) / tl.LENS_SUBDIR / label
        df = ladder_table(model, val, test, sub, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                          eval_tokens=eval_tokens, budgets=budgets, recipes=recipes, progress=progress)
        df.insert(0, "variant", label)
        df.insert(1, "seed", 0)
        df.insert(2, "step", -1)
        frames.append(df)
        lenses[label] = tl.load_lens(model, sub)
    out = pd.concat(frames, ignore_index=True)
    return (out if per_sequence else per_layer(out)), lenses


# --------------------------------------------------------------------------- scale axis


def val_loss_at(run: Run, variant: str | Variant, seed: int, step: int) -> tuple[float, int]:
    """(validation loss, its step) of a model at training ``step``: the last evaluation at or before it."""
    val = run.metrics(variant, seed, "val").sort_values("step")
    before = val[val.step <= step]
    if before.empty:
        return math.nan, -1
    row = before.iloc[-1]
    return float(row.val_loss), int(row.step)


def scale_table(run: Run, variants: Sequence[str], seeds: Sequence[int], checkpoints: Sequence[int], *,
                steps: int, tokens_per_step: int, seq_len: int, eval_tokens: int, budgets: Sequence[int] = (1,),
                recipe: str = "cpu", progress: bool = True, device: str = "cpu",
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The early-layer gap (largest budget, with CI and convergence) at each checkpoint, against validation loss.

    Lenses of checkpoint models live next to the checkpoint (``checkpoints/step-N/lens/``); a
    checkpoint at the final step is the final model. Returns (one row per checkpoint: ``step``,
    ``val_loss`` (mean over the models), ``val_loss_<variant>``, ``val_step``, ``gap``, ``ci_low``,
    ``ci_high``, ``half_width``, ``n_seeds``, ``converged``, ``budget``; the per-layer table of all
    checkpoints and rungs).
    """
    steps_list = check_checkpoints(list(checkpoints))
    rows, tables = [], []
    for ck in steps_list:
        for v in variants:
            for s in seeds:
                if ck != _final_step(run, v, s):
                    run.model_path(v, s, ck)  # a missing checkpoint stops here, naming the step
        seq = kl_table(run, variants, seeds, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                       eval_tokens=eval_tokens, budgets=budgets, recipes=[recipe], step=ck, per_sequence=True,
                       progress=progress, device=device)
        ladder = ladder_gaps(seq, recipe)
        g = ladder.iloc[-1]
        row: dict[str, Any] = {"step": ck}
        losses = []
        for v in variants:
            vals = [val_loss_at(run, v, s, ck) for s in seeds]
            row[f"val_loss_{Variant.parse(v).name}"] = float(np.mean([x for x, _ in vals]))
            row["val_step"] = min(st for _, st in vals)
            losses += [x for x, _ in vals]
        row.update(val_loss=float(np.mean(losses)), gap=float(g.gap), ci_low=float(g.ci_low),
                   ci_high=float(g.ci_high), half_width=float(g.half_width), n_seeds=int(g.n_seeds),
                   converged=convergence(ladder)["converged"], budget=int(g.budget))
        rows.append(row)
        tables.append(per_layer(seq))
    return pd.DataFrame(rows), pd.concat(tables, ignore_index=True)


def depth_run(run: Run, preset: str, seeds: Sequence[int], config: Any, progress: bool = True) -> Run:
    """Tied and untied models of another depth, in ``<run>/depth/<preset>/``, sharing the run's data and tokenizer.

    Everything but the preset (steps, batch, learning rate, seeds) is the run's, so the two depths differ only in
    shape. Already trained models are reused.
    """
    import shutil
    from dataclasses import replace

    from .models import get_preset
    from .train import train

    get_preset(preset)
    sub = Run(run.path / "depth" / preset)
    if not sub.config_path.exists():
        sub.path.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer", "tokens"):
            if not (sub.path / name).exists():
                shutil.copytree(run.path / name, sub.path / name)
        shutil.copy2(run.path / "token_frequencies.csv", sub.path / "token_frequencies.csv")
        shutil.copy2(run.config_path, sub.config_path)  # last: marks the sub-run as ready
    cfg = replace(config, preset=preset)
    for seed in seeds:
        for v in ("tied", "untied"):
            train(sub, v, seed, cfg, progress=progress)
    return sub


def relative_depth(gaps: pd.DataFrame) -> pd.DataFrame:
    """Add ``depth`` = layer / number of layers, so models of different depth share one axis."""
    out = gaps.copy()
    out["depth"] = out.layer / out.layer.max()
    return out
