"""Models of other depths for notebook 03: tied and untied models of another preset in ``<run>/depth/<preset>/``,
sharing the run's data, tokenizer, recipe and seeds, so two depths differ only in their layers."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tiebias.config.presets import get_preset
from tiebias.run.files import atomic_folder
from tiebias.run.folder import Run
from tiebias.run.guard import mark
from tiebias.train.sweeps import train_many


def train_depth_models(run: Run, preset: str, seeds: Sequence[int], config: Any, progress: bool = True) -> Run:
    """Train (or reuse, or resume) tied and untied models of ``preset`` for each seed in ``<run>/depth/<preset>/``
    with the run's recipe but its preset; returns that sub-run.

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
