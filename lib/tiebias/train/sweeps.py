"""Several models of a run, side by side on a CPU where that is faster (one after the other on a GPU or under
``accelerate launch``); every model is the same bit for bit either way."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tiebias.config.variants import Variant, model_key
from tiebias.run.folder import Run
from tiebias.system.parallel import check_workers, side_by_side, workers_for
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
    checked = [(_checked_args(v, s, config, None), s) for v, s in _pairs(jobs)]
    parsed = [(v, s) for (v, _), s in checked]
    cfg = checked[0][0][1]
    check_workers(workers)
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


def _pairs(jobs: object) -> list[tuple[object, object]]:
    """``jobs`` as a list of (variant, seed) pairs; a ValueError naming it otherwise."""
    try:
        out = [tuple(j) for j in jobs]  # type: ignore[union-attr]
    except TypeError:
        raise ValueError(f"jobs: expected (variant, seed) pairs, got {jobs!r}") from None
    if not out or any(len(j) != 2 for j in out):
        raise ValueError(f"jobs: expected a non-empty list of (variant, seed) pairs, got {jobs!r}")
    return out

