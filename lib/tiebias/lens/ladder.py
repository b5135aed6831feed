"""Lens-budget ladders of a run's models, of loaded models and of checkpoints (notebook 03): train, then evaluate.

Lenses are trained on the validation split (text the models never trained on) and evaluated on the
test split (held-out works), so neither the models nor the lenses saw the evaluation text. Each model's
ladder (rungs, recipes, folder layout, resuming) is :mod:`tiebias.lens.rungs`; beside it, a lens folder
may hold an extra ladder at the paper's lens budget::

    <model dir>/lens/reference-budget/ the extra ladder at the paper's lens budget (subdir=REFERENCE_BUDGET)

The model's logit-lens evaluations (``logit_*.csv``) stay in the lens folder itself and serve both ladders.

**Settings.** What every function here trains and reads is one :class:`tiebias.config.lens.LensSettings`
(``lens``): the ladder's unit, budgets, recipes, protocols, sequence length and evaluation tokens.

**Protocols.** Every rung is evaluated under each lens protocol (``lens.protocols``: the package's reading and
the paper's code's, :data:`tiebias.config.choices.LENS_PROTOCOLS`), from the same trained lens; evaluation and its
per-protocol cache files are :mod:`tiebias.lens.rung_eval`.

The tables this module returns are analysed in :mod:`tiebias.lens.tables`; the verdict is
:func:`tiebias.verdicts.claims.claim3`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tiebias.config.lens import LensSettings, check_settings
from tiebias.config.params import coerce
from tiebias.config.variants import Variant, model_key
from tiebias.lens import lenses, rung_eval
from tiebias.lens.precision import logits_precision
from tiebias.lens.rungs import publish_top_rung, rung_dir, train_ladder
from tiebias.lens.tables import convergence, ladder_gaps, per_layer
from tiebias.run.folder import Run
from tiebias.system.parallel import side_by_side, workers_for
from tiebias.train import divergence

REFERENCE_BUDGET = "reference-budget"
"""Sub-folder of a lens folder holding the extra ladder at the paper's lens budget (see :mod:`tiebias.lens.readings`)."""


def check_checkpoints(lens_checkpoints: Any) -> list[int]:
    """Scale-axis checkpoints: increasing training steps >= 0, [] (or None) for none (the schema's rule)."""
    return [] if lens_checkpoints in (None, "") else coerce("lens_checkpoints", lens_checkpoints)


def train_model_lens_ladders(model: Any, train_tokens: Any, test_tokens: Any, folder: str | Path,
                             lens: LensSettings, *, progress: bool = True, num_threads: int | str | None = "auto",
                             should_stop: Callable[[], bool] | None = None,
                             logit_folder: str | Path | None = None) -> pd.DataFrame:
    """Train (or load) every recipe's ladder for one model and evaluate each rung under each protocol, per sequence.

    Args:
        model: the frozen model.
        train_tokens, test_tokens: token streams the lenses train on and are evaluated on.
        folder: the model's lens folder (rungs in :func:`tiebias.lens.rungs.rung_dir`).
        lens: the settings; every lens is trained once and read under each of ``lens.protocols``.
        progress: show progress bars.
        num_threads, should_stop: see :func:`tiebias.lens.rungs.train_ladder`.
        logit_folder: where the logit-lens evaluations live (default ``folder``): they depend on the model, the
            evaluation tokens and the protocol only (the file name says which), so an extra ladder in a
            sub-folder reads its main ladder's instead of computing them again.

    Returns:
        Columns ``recipe``, ``budget``, ``lens_steps`` (total steps of that rung), ``protocol``, ``sequence``,
        ``layer`` and the :func:`tiebias.lens.evaluate.evaluate` columns. The logit lens is evaluated once per
        protocol and shared by all rungs. Evaluations are cached in the rung folders (see
        :mod:`tiebias.lens.rung_eval`), so a rerun costs only loading. The first recipe's largest rung is also
        written to the top of ``folder``.
    """
    lens = check_settings(lens)
    folder = Path(folder)
    sha = lenses._unembed_sha256(model)
    logit_folder = Path(logit_folder) if logit_folder is not None else folder
    n, seq_len = lens.eval_tokens, lens.seq_len
    logits = {p: rung_eval.evaluate_cached(model, test_tokens, None, logit_folder / rung_eval.logit_name(sha, n,
                                           seq_len, p), seq_len=seq_len, eval_tokens=n, logit_lens=True,
                                           protocol=p, num_threads=num_threads) for p in lens.protocols}
    frames = []
    for recipe in lens.recipes:
        rungs = train_ladder(model, train_tokens, folder, lens, recipe=recipe, progress=progress,
                              num_threads=num_threads, should_stop=should_stop)
        frames += rung_eval.rung_frames(model, test_tokens, rungs, {b: rung_dir(folder, recipe, b) for b in rungs},
                                        logits, lens, recipe=recipe, num_threads=num_threads)
    publish_top_rung(folder, lens.recipe, lens, n_tokens=train_tokens.numel(), model_sha256=sha,
                     precision=logits_precision(model.device))
    return pd.concat(frames, ignore_index=True)


def _final_step(run: Run, variant: str | Variant, seed: int) -> int | None:
    """Training steps of a finished model (None when unknown)."""
    try:
        return int(run.summary(variant, seed)["steps"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def ensure_lens(run: Run, variant: str | Variant, seed: int, lens: LensSettings, *, step: int | None = None,
                progress: bool = True, device: str = "cpu") -> tuple[Any, Any]:
    """(model, lens at the largest budget of the first recipe) of one model of a run (or one checkpoint at
    ``step``), trained if not yet saved.

    Args:
        run: the run folder; the lens trains on its validation split.
        variant, seed: the model.
        lens: the settings; only the first recipe's ladder is trained (or loaded).
        step: a checkpoint's training step (None: the final model); its lens lives beside the checkpoint.
        progress: show progress bars.
        device: where the model is loaded.

    Returns:
        ``(model, lens)``: the loaded model and the ``TunedLens`` of the ladder's largest rung.
    """
    lens = check_settings(lens)
    model = run.load_model(variant, seed, step, device=device)
    with run.writing(f"lens of {model_key(variant, seed)}"):
        rungs = train_ladder(model, run.tokens("validation"), run.lens_dir(variant, seed, step), lens,
                             progress=progress)
    return model, rungs[max(rungs)]


def train_lens_ladders(run: Run, variants: Sequence[str], seeds: Sequence[int], lens: LensSettings, *,
                       step: int | None = None, per_sequence: bool = False, progress: bool = True,
                       device: str = "cpu", workers: int | str = "auto", subdir: str = "") -> pd.DataFrame:
    """Train (or load) the lens ladders of every (variant, seed) of a run (or of its checkpoints at ``step``) and
    evaluate them on the test split.

    Args:
        run: the run folder; lenses train on its validation split and are read on its test split.
        variants, seeds: the models (each must be finished and not diverged).
        lens: the settings (every lens is read under each of ``lens.protocols``).
        step: read the checkpoints at this training step instead of the final models (a checkpoint at a model's
            final step is the final model and shares its lens).
        per_sequence: one row per layer and evaluation sequence instead of per layer.
        progress: show progress bars.
        device: where the models run.
        workers: on a CPU, how many models' lenses train at a time (see
            :func:`tiebias.system.parallel.side_by_side`): the same lenses.
        subdir: put the ladders in ``<lens folder>/<subdir>/`` (e.g. :data:`REFERENCE_BUDGET`, an extra ladder
            beside the main one).

    Returns:
        Long format with ``variant``, ``seed``, ``step`` (training step of the model; the final step for final
        models), ``recipe``, ``budget``, ``lens_steps``, ``protocol``, ``layer`` and the evaluation columns.
    """
    lens = check_settings(lens)
    val, test = run.tokens("validation"), run.tokens("test")
    jobs = [(seed, v) for seed in seeds for v in variants]
    n = workers_for(len(jobs), workers) if torch.device(device).type == "cpu" else 1

    def job(seed: int, v: str) -> Callable[[Callable[[], bool]], pd.DataFrame]:
        def go(should_stop: Callable[[], bool]) -> pd.DataFrame:
            final = _final_step(run, v, seed)
            at = None if step is None or step == final else step
            model = run.load_model(v, seed, at, device=device)
            lens_dir = run.lens_dir(v, seed, at)
            df = train_model_lens_ladders(model, val, test, lens_dir / subdir, lens, progress=progress,
                                          num_threads="auto" if n == 1 else None, should_stop=should_stop,
                                          logit_folder=lens_dir)
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


def train_pair_lens_ladders(models: dict[str, tuple[Any, Any]], corpus: Any, lens: LensSettings, *,
                            folder: str | Path, per_sequence: bool = False, progress: bool = True,
                            subdir: str = "") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Train (or load) and evaluate the lens ladders of loaded models (e.g. a real tied/untied checkpoint pair),
    each with its own tokenizer.

    Args:
        models: {label: (model, tokenizer)}.
        corpus: the corpus (None: the embedded one); lenses train on its validation split and are evaluated on its
            test split, as for a run.
        lens: the settings.
        folder: the pair's folder; each label's ladder lives in ``<folder>/lens/<label>/``.
        per_sequence, progress, subdir: as in :func:`train_lens_ladders`.

    Returns:
        (the long table: ``variant`` = label, ``seed`` = 0, per layer or per sequence; the largest-budget lens of
        the first recipe by label). Tokenizers that cannot read the corpus, or share no token with the first
        model's, are refused before any lens trains (:func:`tiebias.align.tokenizers.check_tokenizers`).
    """
    from tiebias.align.tokenizers import check_tokenizers
    from tiebias.data import corpus as data
    from tiebias.data import tokens

    lens = check_settings(lens)
    ds = data.load_corpus(corpus)
    check_tokenizers(models, [*ds["validation"]["text"], *ds["test"]["text"]], str(corpus or data.EMBEDDED_CORPUS))
    frames, top_lenses = [], {}
    for label, (model, tok) in models.items():
        val = tokens.encode(tok, ds["validation"]["text"])
        test = tokens.encode(tok, ds["test"]["text"])
        top = Run(folder).pair_lens_dir(label)
        sub = top / subdir
        df = train_model_lens_ladders(model, val, test, sub, lens, progress=progress, logit_folder=top)
        df.insert(0, "variant", label)
        df.insert(1, "seed", 0)
        df.insert(2, "step", -1)
        frames.append(df)
        top_lenses[label] = lenses.load_lens(model, sub)
    out = pd.concat(frames, ignore_index=True)
    return (out if per_sequence else per_layer(out)), top_lenses


def val_loss_at(run: Run, variant: str | Variant, seed: int, step: int) -> tuple[float, int]:
    """(validation loss, its step) of a model at training ``step``: the last evaluation at or before it."""
    val = run.metrics(variant, seed, "val").sort_values("step")
    before = val[val.step <= step]
    if before.empty:
        return math.nan, -1
    row = before.iloc[-1]
    return float(row.val_loss), int(row.step)


def train_checkpoint_lens_ladders(run: Run, variants: Sequence[str], seeds: Sequence[int],
                                  checkpoints: Sequence[int], lens: LensSettings, *, progress: bool = True,
                                  device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train (or load) lens ladders at each training checkpoint and return the early-layer gap (largest budget,
    with CI and convergence) there, against validation loss.

    Args:
        run: the run folder.
        variants, seeds: the models, as in :func:`train_lens_ladders`; validation losses are averaged over them.
        checkpoints: training steps, each a checkpoint every model has (a missing one is named).
        lens: the settings; only the first recipe and the first protocol are used.
        progress, device: as in :func:`train_lens_ladders`.

    Returns:
        (one row per checkpoint: ``step``, ``val_loss`` (mean over the models), ``val_loss_<variant>``,
        ``val_step`` (the step of the last validation at or before it), ``gap``, ``ci_low``, ``ci_high``,
        ``half_width``, ``n_seeds``, ``converged``, ``budget``; the per-layer table of all checkpoints and rungs).

    Only the first recipe's ladders are trained, read under the first protocol (the headline's). Lenses of
    checkpoint models live next to the checkpoint (``checkpoints/step-N/lens/``); a checkpoint at the final step is
    the final model.
    """
    steps_list = check_checkpoints(list(checkpoints))
    lens = check_settings(lens)
    recipe = lens.recipe
    headline = lens.replace(recipes=(recipe,), protocols=lens.protocols[:1])
    rows, tables = [], []
    for ck in steps_list:
        for v in variants:
            for s in seeds:
                if ck != _final_step(run, v, s):
                    run.model_path(v, s, ck)  # a missing checkpoint stops here, naming the step
        seq = train_lens_ladders(run, variants, seeds, headline, step=ck, per_sequence=True, progress=progress,
                                 device=device)
        ladder = ladder_gaps(seq, recipe)
        g = ladder.iloc[-1]
        row: dict[str, Any] = {"step": ck}
        losses, val_steps = [], []
        for v in variants:
            vals = [val_loss_at(run, v, s, ck) for s in seeds]
            row[f"val_loss_{Variant.parse(v).name}"] = float(np.mean([x for x, _ in vals]))
            losses += [x for x, _ in vals]
            val_steps += [st for _, st in vals]
        row["val_step"] = min(val_steps)  # the earliest evaluation behind any model's loss
        row.update(val_loss=float(np.mean(losses)), gap=float(g.gap), ci_low=float(g.ci_low),
                   ci_high=float(g.ci_high), half_width=float(g.half_width), n_seeds=int(g.n_seeds),
                   converged=convergence(ladder, seq)["converged"], budget=int(g.budget))
        rows.append(row)
        tables.append(per_layer(seq))
    return pd.DataFrame(rows), pd.concat(tables, ignore_index=True)
