"""Several models of a run, side by side on a CPU where that is faster (one after the other on a GPU or under
``accelerate launch``; every model is the same bit for bit either way), and models of other depths for notebook 03."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tiebias.config.presets import get_preset
from tiebias.config.variants import Variant, model_key
from tiebias.run.files import atomic_folder
from tiebias.run.folder import Run
from tiebias.run.guard import mark
from tiebias.system.parallel import check_arg, side_by_side, workers_for
from tiebias.train.trainer import TrainConfig, _checked_args, pick_device, train


def train_many(run: Run | str | Path, jobs: Sequence[tuple[str | Variant, int]], config: TrainConfig | None = None,
               *, workers: int | str = "auto", resume: bool = True, overwrite: bool = False, progress: bool = True,
               device: str | None = None) -> list[dict]:
    """Train every ``(variant, seed)`` of ``jobs`` in ``run`` (as :func:`.trainer.train` does, ``workers`` at once on
    a CPU, under one writer lock); their summaries in job order. Bad jobs or settings stop before any training.

    Args:
        run: the run folder.
        jobs: ``(variant, seed)`` pairs.
        config: the shared recipe (None: defaults).
        workers: how many train at once on a CPU.
        resume, overwrite, progress, device: as in :func:`tiebias.train.trainer.train`.

    Returns:
        One summary per job, in job order.
    """
    run = run if isinstance(run, Run) else Run(run)
    try:
        pairs = [tuple(j) for j in jobs]  # type: ignore[union-attr]
    except TypeError:
        pairs = []
    if not pairs or any(len(j) != 2 for j in pairs):
        raise ValueError(f"jobs: expected a non-empty list of (variant, seed) pairs, got {jobs!r}")
    checked = [(_checked_args(v, s, config, None), s) for v, s in pairs]
    parsed, cfg = [(v, s) for (v, _), s in checked], checked[0][0][1]
    check_arg("workers", workers)
    todo = [j for j in parsed if not run.complete_path(*j).exists()]
    one_process = int(os.environ.get("WORLD_SIZE", "1")) <= 1
    n = workers_for(len(todo), workers) if pick_device(device).type == "cpu" and one_process else 1
    kw = dict(resume=resume, overwrite=overwrite, progress=progress, device=device)
    if n <= 1:
        return [train(run, v, s, cfg, **kw) for v, s in parsed]
    with run.writing(f"training {', '.join(model_key(v, s) for v, s in parsed)}, {n} at a time"):
        tasks = [lambda stop, v=v, s=s: train(run, v, s, cfg, num_threads=None, should_stop=stop, **kw)
                 for v, s in parsed]
        return side_by_side(tasks, n)


def train_depth_models(run: Run, preset: str, seeds: Sequence[int], config: Any, progress: bool = True) -> Run:
    """Train (or reuse, or resume) tied and untied models of ``preset`` for each seed in ``<run>/depth/<preset>/``,
    sharing the run's data, tokenizer, recipe and seeds, so two depths differ only in their layers.

    Args:
        run: the run whose data and recipe are shared.
        preset: the other depth's preset.
        seeds: the seeds.
        config: the run's recipe.
        progress: show progress bars.

    Returns:
        The sub-run holding the models.
    """
    get_preset(preset)
    sub = share_data(run, run.depth_dir(preset), f"the {preset} models")
    train_many(sub, [(v, seed) for seed in seeds for v in ("tied", "untied")], replace(config, preset=preset),
               progress=progress)
    return sub


def share_data(run: Run, path: Path, what: str) -> Run:
    """A run folder at ``path`` with a copy of ``run``'s data (tokenizer, tokens, frequencies, config), built whole
    under the run's writer lock on first use."""
    sub = Run(path)
    if sub.config_path.exists():
        return sub
    with run.writing(f"preparing {what}' folder"), atomic_folder(sub.path) as tmp:
        part = Run(tmp)
        tmp.mkdir(parents=True)
        shutil.copytree(run.tokenizer_dir, part.tokenizer_dir)
        shutil.copytree(run.tokens_dir, part.tokens_dir)
        shutil.copy2(run.frequencies_path, part.frequencies_path)
        shutil.copy2(run.config_path, part.config_path)
        mark(tmp, "run")
    return sub
