"""Lens-budget ladders over a run's models (notebook 03): train, save, resume and evaluate every lens.

Lenses are trained on the validation split (text the models never trained on) and evaluated on the
test split (held-out works), so neither the models nor the lenses saw the evaluation text.

**Ladder.** Every model's lens is trained to ``budgets[0] x lens_steps`` steps, evaluated and saved;
the *same* lens, with its optimiser state and data cursor, then continues to the next budget, and so
on. Each rung runs its own warmup then linear decay to 0 over its new steps (a warm restart), so every
saved rung is an annealed lens, and rung 1 is exactly the single-budget lens of a one-rung ladder.
Layout, in the tuned_lens package format::

    <model dir>/lens/                  the largest rung of the first recipe (what other code loads)
    <model dir>/lens/<recipe>-x<b>/    every rung: config.json, params.pt, rung.json (+ trainer.pt, eval_*.csv)
    <model dir>/lens/reference-budget/ the extra ladder at the paper's lens budget (subdir=REFERENCE_BUDGET)

``trainer.pt`` (optimiser and data state) is kept at the highest finished rung only, so an
interrupted ladder resumes from there and a finished rung is never retrained. The rungs a call trains
share one :mod:`tiebias.lens.cache` activation cache (built only when a rung must be trained, and only
under ``max_cache_bytes``), so the frozen model runs once over the training tokens, not once per step.

**Recipes.** ``cpu``: Adam (amsgrad) at 1e-2 with a short warmup, the kit's CPU-sized default (see
:func:`tiebias.lens.fit.train_lens`). ``package``: the tuned-lens package's own recipe (SGD with Nesterov
momentum 0.9, its ``lr_scale`` 1.0 applied as ``1.0 * (1 - 0.9)``, weight decay 1e-3, no warmup),
at the profile's tokens per step (the package uses 2**18).

**Protocols.** Every rung is evaluated under each lens protocol (``protocols``: the package's reading and
the paper's code's, :data:`tiebias.lens.evaluate.PROTOCOLS`), from the same trained lens; evaluation and its
per-protocol cache files are :mod:`tiebias.lens.rung_eval`.

The tables this module returns are analysed in :mod:`tiebias.lens.tables`; the verdict is
:func:`tiebias.verdicts.claims.claim3`.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tiebias.config.checks import is_int
from tiebias.config.choices import LENS_RECIPES
from tiebias.config.params import coerce
from tiebias.config.variants import Variant, model_key
from tiebias.lens import cache as lens_cache
from tiebias.lens import fit as lens_fit
from tiebias.lens import lenses as tl
from tiebias.lens import rung_eval
from tiebias.lens.precision import logits_precision
from tiebias.lens.tables import convergence, ladder_gaps, per_layer
from tiebias.run.files import read_json, write_json_atomic
from tiebias.run.folder import Run
from tiebias.system.parallel import side_by_side, workers_for
from tiebias.train import divergence

RECIPES = LENS_RECIPES
"""Named lens-training recipes (keyword arguments of :func:`tiebias.lens.fit.train_lens`), owned by the config."""

_RUNG = "rung.json"
_TRAINER = "trainer.pt"
_TOP_RECIPE = "recipe.json"
REFERENCE_BUDGET = "reference-budget"
"""Sub-folder of a lens folder holding the extra ladder at the paper's lens budget (see :mod:`tiebias.lens.readings`)."""


def check_budgets(lens_budgets: Any) -> list[int]:
    """The ladder: positive, strictly increasing integer multiples of lens_steps (the schema's rule, e.g. [1, 2, 4])."""
    return coerce("lens_budgets", lens_budgets)


def check_recipes(lens_recipes: Any) -> list[str]:
    """The lens recipes: distinct names from :data:`RECIPES`; the first one carries the verdict (the schema's rule)."""
    return coerce("lens_recipes", lens_recipes)


def check_checkpoints(lens_checkpoints: Any) -> list[int]:
    """Scale-axis checkpoints: increasing training steps >= 0, [] (or None) for none (the schema's rule)."""
    return [] if lens_checkpoints in (None, "") else coerce("lens_checkpoints", lens_checkpoints)


def check_params(params: dict[str, Any]) -> dict[str, Any]:
    """Validate notebook 03's lens parameters up front against the schema, each error naming the parameter."""
    out = dict(params)
    for name in ("lens_steps", "lens_tokens_per_step", "lens_eval_tokens"):
        out[name] = coerce(name, out.get(name))
    out["lens_budgets"] = check_budgets(out.get("lens_budgets", [1]))
    out["lens_recipes"] = check_recipes(out.get("lens_recipes", ["cpu"]))
    out["lens_protocols"] = rung_eval.check_protocols(out.get("lens_protocols", ["package", "reference"]))
    out["lens_checkpoints"] = check_checkpoints(out.get("lens_checkpoints", []))
    out["lens_depth_presets"] = coerce("lens_depth_presets", out.get("lens_depth_presets") or [])
    return out


def recipe_kwargs(recipe: str, steps: int) -> dict[str, Any]:
    """train_lens keyword arguments of a named recipe for a run of ``steps`` steps (warmup scaled to short runs)."""
    if recipe not in RECIPES:
        raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)}")
    kw = dict(RECIPES[recipe])
    kw.setdefault("warmup_steps", min(25, steps // 10))  # the package's Adam warmup of 25, scaled for short runs
    return kw


def rung_dir(folder: str | Path, recipe: str, budget: int) -> Path:
    """Folder of one rung of a ladder: ``<lens folder>/<recipe>-x<budget>``."""
    return Path(folder) / f"{recipe}-x{int(budget)}"


def _rung_meta(recipe: str, budgets: Sequence[int], k: int, *, steps: int, tokens_per_step: int, seq_len: int,
               n_tokens: int, model_sha256: str, precision: str) -> dict[str, Any]:
    """What determines rung k of a ladder (its lens depends on every rung before it, on the model, and on the
    precision of the lens logits in training)."""
    return {"recipe": recipe, "train_lens": RECIPES[recipe], "ladder": list(budgets[: k + 1]),
            "budget": int(budgets[k]), "lens_steps": steps, "tokens_per_step": tokens_per_step, "seq_len": seq_len,
            "n_train_tokens": int(n_tokens), "model_sha256": model_sha256, "logits_precision": precision}


def _rung_done(path: Path, meta: dict[str, Any], auto_precision: str) -> bool:
    """Whether a rung's lens files exist and the same ladder trained it (no recorded precision: the automatic one)."""
    f = path / _RUNG
    if not ((path / "params.pt").is_file() and f.is_file()):
        return False
    saved = read_json(f, "delete the rung's folder: it is trained again")
    saved.setdefault("logits_precision", auto_precision)
    return saved == meta


def train_ladder(model: Any, tokens: Any, folder: str | Path, *, steps: int, tokens_per_step: int, seq_len: int,
                 budgets: Sequence[int] = (1,), recipe: str = "cpu", progress: bool = True,
                 max_cache_bytes: int = lens_cache.MAX_BYTES, num_threads: int | str | None = "auto",
                 should_stop: Callable[[], bool] | None = None) -> dict[int, Any]:
    """Train (or load) a lens at every budget of the ladder; returns {budget: TunedLens}. Resumable.

    Rung k continues rung k-1's lens and optimiser for ``(budgets[k] - budgets[k-1]) * steps`` steps
    (schedule per rung, see the module docstring). Finished rungs are loaded, not retrained; an
    interrupted ladder restarts from the highest finished rung that kept its trainer state. The rungs
    trained share one activation cache when it fits ``max_cache_bytes`` (0: none) and pays off
    (:func:`tiebias.lens.cache.pays_off`); the lenses are the same.
    ``num_threads`` and ``should_stop`` go to :func:`tiebias.lens.fit.train_lens` (a stop keeps finished rungs).
    """
    budgets = check_budgets(budgets)
    if not is_int(steps) or steps <= 0:
        raise ValueError(f"lens_steps: {steps!r} is not allowed; need an integer > 0")
    if recipe not in RECIPES:
        raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)}")
    if not is_int(max_cache_bytes) or max_cache_bytes < 0:
        raise ValueError(f"max_cache_bytes: must be an int >= 0 (0: no cache), got {max_cache_bytes!r}")
    folder = Path(folder)
    sha = tl._unembed_sha256(model)
    precision = logits_precision(model.device)
    metas = [_rung_meta(recipe, budgets, k, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                        n_tokens=tokens.numel(), model_sha256=sha, precision=precision) for k in range(len(budgets))]
    dirs = [rung_dir(folder, recipe, b) for b in budgets]
    auto = logits_precision(model.device, "auto")
    done = 0
    while done < len(budgets) and _rung_done(dirs[done], metas[done], auto):
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
    draws = (budgets[-1] - (budgets[start] if start >= 0 else 0)) * steps * (tokens_per_step // seq_len)
    cache = lens_cache.build_cache(model, tokens, seq_len=seq_len, tokens_per_step=tokens_per_step,
                                   max_bytes=max_cache_bytes, progress=progress, num_threads=num_threads,
                                   ) if lens_cache.pays_off(draws, tokens.numel() // seq_len) else None
    for k in range(start + 1, len(budgets)):
        seg = (budgets[k] - (budgets[k - 1] if k else 0)) * steps
        kw = recipe_kwargs(recipe, seg)
        lens = lens_fit.train_lens(model, tokens, steps=seg, tokens_per_step=tokens_per_step, seq_len=seq_len,
                                   progress=progress, lens=lens, state=state, cache=cache, num_threads=num_threads,
                                   should_stop=should_stop, low_precision=precision == "bf16", **kw)
        if dirs[k].exists():
            shutil.rmtree(dirs[k])
        tl.save_lens(lens, dirs[k], logits_precision=precision)
        torch.save(state, dirs[k] / _TRAINER)
        write_json_atomic(dirs[k] / _RUNG, metas[k])  # last: marks the rung finished
        if k > 0:
            (dirs[k - 1] / _TRAINER).unlink(missing_ok=True)
        out[budgets[k]] = copy.deepcopy(lens) if k < len(budgets) - 1 else lens  # the next rung trains in place
    return out


def _publish(folder: Path, recipe: str, budget: int, meta: dict[str, Any]) -> None:
    """Copy a rung's lens files to the top of the lens folder, where :func:`tiebias.lens.lenses.load_lens` finds them."""
    src = rung_dir(folder, recipe, budget)
    top = folder / _TOP_RECIPE
    if top.is_file() and json.loads(top.read_text()) == meta and (folder / "params.pt").is_file():
        return
    for f in src.iterdir():
        if f.is_file() and f.name not in (_RUNG, _TRAINER) and not f.name.startswith("eval_"):
            shutil.copy2(f, folder / f.name)
    write_json_atomic(top, meta)


def ladder_table(model: Any, train_tokens: Any, test_tokens: Any, folder: str | Path, *, steps: int,
                 tokens_per_step: int, seq_len: int, eval_tokens: int, budgets: Sequence[int] = (1,),
                 recipes: Sequence[str] = ("cpu",), progress: bool = True, num_threads: int | str | None = "auto",
                 should_stop: Callable[[], bool] | None = None,
                 protocols: Sequence[str] = ("package",)) -> pd.DataFrame:
    """Train (or load) every recipe's ladder for one model and evaluate each rung under each protocol, per sequence.

    Columns: ``recipe``, ``budget``, ``lens_steps`` (total steps of that rung), ``protocol``, ``sequence``,
    ``layer`` and the :func:`tiebias.lens.evaluate.evaluate` columns. Every lens is trained once and read under
    each of ``protocols`` (:func:`tiebias.lens.rung_eval.check_protocols`); the logit lens is evaluated once per
    protocol and shared by all rungs. Evaluations are cached in the rung folders (see
    :mod:`tiebias.lens.rung_eval`), so a rerun costs only loading. The first recipe's largest rung is also
    written to the top of ``folder``. ``num_threads``/``should_stop``: see :func:`train_ladder`.
    """
    budgets, recipes = check_budgets(budgets), check_recipes(recipes)
    protocols = rung_eval.check_protocols(list(protocols))
    folder = Path(folder)
    sha = tl._unembed_sha256(model)
    logits = {p: rung_eval.evaluate_cached(model, test_tokens, None, folder / rung_eval.logit_name(sha, eval_tokens,
                                           seq_len, p), seq_len=seq_len, eval_tokens=eval_tokens, logit_lens=True,
                                           protocol=p, num_threads=num_threads) for p in protocols}
    frames = []
    for recipe in recipes:
        lenses = train_ladder(model, train_tokens, folder, steps=steps, tokens_per_step=tokens_per_step,
                              seq_len=seq_len, budgets=budgets, recipe=recipe, progress=progress,
                              num_threads=num_threads, should_stop=should_stop)
        frames += rung_eval.rung_frames(model, test_tokens, lenses, {b: rung_dir(folder, recipe, b) for b in lenses},
                                        logits, recipe=recipe, steps=steps, seq_len=seq_len, eval_tokens=eval_tokens,
                                        protocols=protocols, num_threads=num_threads)
    meta = _rung_meta(recipes[0], budgets, len(budgets) - 1, steps=steps, tokens_per_step=tokens_per_step,
                      seq_len=seq_len, n_tokens=train_tokens.numel(), model_sha256=sha,
                      precision=logits_precision(model.device))
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
        lenses = train_ladder(model, run.tokens("validation"), run.lens_dir(variant, seed, step), steps=steps,
                              tokens_per_step=tokens_per_step, seq_len=seq_len, budgets=budgets, recipe=recipe,
                              progress=progress)
    return model, lenses[max(lenses)]


def kl_table(run: Run, variants: Sequence[str], seeds: Sequence[int], *, steps: int, tokens_per_step: int,
             seq_len: int, eval_tokens: int, budgets: Sequence[int] = (1,), recipes: Sequence[str] = ("cpu",),
             step: int | None = None, per_sequence: bool = False, progress: bool = True,
             device: str = "cpu", workers: int | str = "auto", protocols: Sequence[str] = ("package",),
             subdir: str = "") -> pd.DataFrame:
    """Lens ladders of every (variant, seed) of a run (or of its checkpoints at ``step``), evaluated on the test split.

    Long format with ``variant``, ``seed``, ``step`` (training step of the model; the final step for
    final models), ``recipe``, ``budget``, ``lens_steps``, ``protocol``, ``layer`` and the evaluation columns;
    one row per layer (means over sequences) or, with ``per_sequence``, per layer and evaluation sequence.
    Every lens is read under each of ``protocols``; ``subdir`` puts the ladders in ``<lens folder>/<subdir>/``
    (e.g. :data:`REFERENCE_BUDGET`, an extra ladder beside the main one).
    A checkpoint at a model's final step is the final model and shares its lens. On a CPU two models'
    lenses train at a time (``workers``, see :func:`tiebias.system.parallel.side_by_side`): the same lenses.
    """
    val, test = run.tokens("validation"), run.tokens("test")
    jobs = [(seed, v) for seed in seeds for v in variants]
    n = workers_for(len(jobs), workers) if torch.device(device).type == "cpu" else 1

    def job(seed: int, v: str) -> Callable[[Callable[[], bool]], pd.DataFrame]:
        def go(should_stop: Callable[[], bool]) -> pd.DataFrame:
            final = _final_step(run, v, seed)
            at = None if step is None or step == final else step
            model = run.load_model(v, seed, at, device=device)
            df = ladder_table(model, val, test, run.lens_dir(v, seed, at) / subdir, steps=steps,
                              tokens_per_step=tokens_per_step, seq_len=seq_len, eval_tokens=eval_tokens,
                              budgets=budgets, recipes=recipes, progress=progress,
                              num_threads="auto" if n == 1 else None, should_stop=should_stop, protocols=protocols)
            df.insert(0, "variant", Variant.parse(v).name)
            df.insert(1, "seed", seed)
            df.insert(2, "step", step if step is not None else final)
            return df
        return go

    divergence.check_models(run, [(v, seed) for seed, v in jobs], "a tuned lens")
    names = ", ".join(model_key(v, seed) for seed, v in jobs)
    with run.writing(f"lenses of {names}"):  # one writer of lens folders
        frames = side_by_side([job(seed, v) for seed, v in jobs], n)
    out = pd.concat(frames, ignore_index=True)
    return out if per_sequence else per_layer(out)


def kl_table_models(models: dict[str, tuple[Any, Any]], corpus: Any = None, *, steps: int, tokens_per_step: int,
                    seq_len: int, eval_tokens: int, folder: str | Path, budgets: Sequence[int] = (1,),
                    recipes: Sequence[str] = ("cpu",), per_sequence: bool = False, progress: bool = True,
                    protocols: Sequence[str] = ("package",), subdir: str = "") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Lens study on loaded models (e.g. a real tied/untied checkpoint pair) with each model's own tokenizer.

    Lenses train on the corpus's validation split and are evaluated on its test split, as for a run;
    each label's ladder lives in ``<folder>/lens/<label>/``. Returns the long table (``variant`` =
    label, ``seed`` = 0; per layer, or per sequence with ``per_sequence``) and the largest-budget
    lens of the first recipe by label. ``protocols`` and ``subdir`` as in :func:`kl_table`. Tokenizers that cannot read the corpus, or share no token with the
    first model's, are refused before any lens trains (:func:`tiebias.models.sources.check_tokenizers`).
    """
    from tiebias.data import corpus as data
    from tiebias.data import tokens
    from tiebias.models import sources

    ds = data.load_corpus(corpus)
    sources.check_tokenizers(models, [*ds["validation"]["text"], *ds["test"]["text"]], str(corpus or data.EMBEDDED_CORPUS))
    frames, lenses = [], {}
    for label, (model, tok) in models.items():
        val = tokens.encode(tok, ds["validation"]["text"])
        test = tokens.encode(tok, ds["test"]["text"])
        sub = Run(folder).pair_lens_dir(label) / subdir
        df = ladder_table(model, val, test, sub, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                          eval_tokens=eval_tokens, budgets=budgets, recipes=recipes, progress=progress,
                          protocols=protocols)
        df.insert(0, "variant", label)
        df.insert(1, "seed", 0)
        df.insert(2, "step", -1)
        frames.append(df)
        lenses[label] = tl.load_lens(model, sub)
    out = pd.concat(frames, ignore_index=True)
    return (out if per_sequence else per_layer(out)), lenses


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
