"""Models of other depths for notebook 03 (the ``depth`` profile): tied and untied models of another shape in
``<run>/depth/<preset>/``, sharing the run's data, tokenizer, recipe and seeds, so two depths differ only in their
number of layers. The lens numbers against depth are :mod:`tiebias.lens.depth`'s, the verdicts
:mod:`tiebias.verdicts.depth`'s."""

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

__all__ = ["share_data", "train_depth_models"]


def train_depth_models(run: Run, preset: str, seeds: Sequence[int], config: Any, progress: bool = True) -> Run:
    """Train (or reuse) tied and untied models of ``preset`` in ``<run>/depth/<preset>/``; returns that sub-run.

    Args:
        run: the run whose data, tokenizer and recipe the models share (:func:`share_data`).
        preset: the other depth's model preset (an unknown one is refused before anything is written).
        seeds: the seeds; each gets a tied and an untied model.
        config: the run's training recipe (:class:`tiebias.config.training.TrainConfig`); only its preset is
            replaced.
        progress: show progress bars.

    Returns:
        The sub-run (:class:`tiebias.run.folder.Run`) holding the models.

    Everything but the preset (data, tokenizer, steps, batch, learning rate, seeds) is the run's, so the
    depths differ only in shape. Finished models are reused; an interrupted one resumes from its checkpoint.
    """
    get_preset(preset)
    sub = share_data(run, run.depth_dir(preset), f"the {preset} models")
    train_many(sub, [(v, seed) for seed in seeds for v in ("tied", "untied")], replace(config, preset=preset),
               progress=progress)
    return sub


def share_data(run: Run, path: Path, what: str) -> Run:
    """A run folder at ``path`` with a copy of ``run``'s data (tokenizer, tokens, frequencies, config), made on first use.

    The copy is built whole (:func:`tiebias.run.files.atomic_folder`, under the run's writer lock), so an interrupted
    copy leaves nothing half-made (a leftover without config.json is rebuilt). Models trained there differ from the
    run's only in what their recipe changes.
    """
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
