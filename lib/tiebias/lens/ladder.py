"""Lens-budget ladders of a run's models, of loaded models and of checkpoints (notebook 03): lenses train on the
validation split and are read on the test split; each model's ladder is :mod:`tiebias.lens.rungs`."""

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
from tiebias.lens import lenses, rungs
from tiebias.lens.rungs import train_ladder
from tiebias.lens.tables import convergence, ladder_gaps, per_layer
from tiebias.run.folder import Run
from tiebias.system.parallel import side_by_side, workers_for
from tiebias.train import divergence

REFERENCE_BUDGET = "reference-budget"  # sub-folder of a lens folder: the ladder at the paper's lens budget


def _final_step(run: Run, variant: str | Variant, seed: int) -> int | None:
    try:
        return int(run.summary(variant, seed)["steps"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def ensure_lens(run: Run, variant: str | Variant, seed: int, lens: LensSettings, *, step: int | None = None,
                progress: bool = True, device: str = "cpu") -> tuple[Any, Any]:
    """One model of a run (or its checkpoint at ``step``) with its verdict lens, trained if not yet saved.

    Args: run, variant, seed: the model; lens: the settings (the first recipe's ladder only); step: a checkpoint's
        step (None: the final model); progress, device: progress bars, where the model runs.
    Returns: ``(model, lens)``: the model and the ``TunedLens`` of the first recipe's largest rung.
    """
    lens = check_settings(lens)
    model = run.load_model(variant, seed, step, device=device)
    with run.writing(f"lens of {model_key(variant, seed)}"):
        trained = train_ladder(model, run.tokens("validation"), run.lens_dir(variant, seed, step), lens,
                               progress=progress)
    return model, trained[max(trained)]


def train_lens_ladders(run: Run, variants: Sequence[str], seeds: Sequence[int], lens: LensSettings, *,
                       step: int | None = None, per_sequence: bool = False, progress: bool = True,
                       device: str = "cpu", workers: int | str = "auto", subdir: str = "") -> pd.DataFrame:
    """The lens ladders of every (variant, seed) of a run, or of its checkpoints at ``step``, trained or loaded, read.

    Args: run, variants, seeds: the run and its finished models; lens: the settings; step: a checkpoint (None: final);
        per_sequence: rows per sequence; progress, device: progress bars, where the models run; workers: models
        trained side by side on a CPU; subdir: ladders in ``<lens folder>/<subdir>/``.
    Returns: ``variant``, ``seed``, ``step``, ``recipe``, ``budget``, ``lens_steps``, ``protocol``, ``layer`` and the
        evaluation columns.
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
            df = rungs.train_model_lens_ladders(model, val, test, lens_dir / subdir, lens, progress=progress,
                                                num_threads="auto" if n == 1 else None, should_stop=should_stop,
                                                logit_folder=lens_dir)
            ids = {"variant": Variant.parse(v).name, "seed": seed, "step": step if step is not None else final}
            return df.assign(**ids)[[*ids, *df.columns]]
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
    """The lens ladders of loaded models, each with its own tokenizer (one that cannot read the corpus is refused).

    Args: models: {label: (model, tokenizer)}; corpus: None for the embedded one; lens: the settings;
        folder: the pair's folder; per_sequence, progress, subdir: as in :func:`train_lens_ladders`.
    Returns: (the table, ``variant`` = label and ``seed`` = 0; the top lens by label).
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
        df = rungs.train_model_lens_ladders(model, val, test, sub, lens, progress=progress, logit_folder=top)
        frames.append(df.assign(variant=label, seed=0, step=-1)[["variant", "seed", "step", *df.columns]])
        top_lenses[label] = lenses.load_lens(model, sub)
    out = pd.concat(frames, ignore_index=True)
    return (out if per_sequence else per_layer(out)), top_lenses


def _val_loss_at(run: Run, variant: str | Variant, seed: int, step: int) -> tuple[float, int]:
    """(validation loss, its step) of the last evaluation at or before ``step``."""
    val = run.metrics(variant, seed, "val").sort_values("step")
    before = val[val.step <= step]
    if before.empty:
        return math.nan, -1
    row = before.iloc[-1]
    return float(row.val_loss), int(row.step)


def train_checkpoint_lens_ladders(run: Run, variants: Sequence[str], seeds: Sequence[int],
                                  checkpoints: Sequence[int], lens: LensSettings, *, progress: bool = True,
                                  device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The verdict's early-layer gap at each training checkpoint, beside the validation loss there.

    Args: run, variants, seeds, lens, progress, device: as in :func:`train_lens_ladders`; checkpoints: their steps.
    Returns: (per checkpoint: ``step``, ``val_loss``, ``val_loss_<variant>``, ``val_step``, ``gap``, ``ci_low``,
        ``ci_high``, ``half_width``, ``n_seeds``, ``converged``, ``budget``; the per-layer table of all of them).
    """
    steps_list = coerce("lens_checkpoints", list(checkpoints))
    lens = check_settings(lens)
    recipe = lens.recipes[0]
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
            vals = [_val_loss_at(run, v, s, ck) for s in seeds]
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
