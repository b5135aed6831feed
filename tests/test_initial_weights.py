"""The step-0 checkpoint (a model's initial weights) is required: training stops when its model folder vanishes,
and drift from initialisation is never measured from the earliest checkpoint left in its place."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tiebias.align import comparisons
from tiebias.run.files import RunFolderError
from tiebias.run.folder import Run
from tiebias.train import checkpoints as train_module
from tiebias.train.trainer import TrainConfig, train


def _snapshot(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def test_model_folder_deleted_during_training_stops_it(fresh_run: Run, tiny_config: TrainConfig) -> None:
    mdir = fresh_run.model_dir("tied", 0)
    calls = []

    def delete_at_step_3() -> bool:  # asked before every step; checkpoints 0, 1 and 2 are written by then
        calls.append(1)
        if len(calls) == 4:
            shutil.rmtree(mdir)  # rm -rf R/models while 01 trains
        return False

    with pytest.raises(RunFolderError, match=r"tied-s0/checkpoints/step-0: missing: .*initial weights") as e:
        train(fresh_run, "tied", 0, tiny_config, progress=False, should_stop=delete_at_step_3)
    assert f"Delete {mdir} if it is still there" in str(e.value)
    assert not mdir.exists(), "the next checkpoint must not recreate the folder without its initial weights"
    assert not fresh_run.is_complete("tied", 0)
    # running it again trains the model from scratch, with its initial weights
    assert train(fresh_run, "tied", 0, tiny_config, progress=False)["complete"]
    assert [s for s, _ in fresh_run.checkpoints("tied", 0)] == [0, 1, 2, 4, 8, 12]
    assert list(fresh_run.metrics("tied", 0).step) == list(range(1, 13))


def test_step0_gone_after_the_last_checkpoint_is_never_marked_complete(fresh_run: Run, tiny_config: TrainConfig,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    step0 = fresh_run.checkpoints_dir("untied", 0) / "step-0"
    prune_states = train_module.prune_states

    def vanish_then_prune(root: Path, keep: int) -> None:  # keep=1: the final model is saved, the marker not yet
        if keep == 1:
            shutil.rmtree(step0)
        prune_states(root, keep)

    monkeypatch.setattr(train_module, "prune_states", vanish_then_prune)
    with pytest.raises(RunFolderError, match=str(step0)):
        train(fresh_run, "untied", 0, tiny_config, progress=False)
    assert not fresh_run.is_complete("untied", 0)


def test_resume_without_step0_is_refused_before_writing(fresh_run: Run, tiny_config: TrainConfig) -> None:
    train(fresh_run, "tied", 0, tiny_config, progress=False, stop_at=5)
    step0 = fresh_run.checkpoints_dir("tied", 0) / "step-0"
    shutil.rmtree(step0)
    before = _snapshot(fresh_run.path)
    with pytest.raises(RunFolderError, match=str(step0)):
        train(fresh_run, "tied", 0, tiny_config, progress=False)
    assert _snapshot(fresh_run.path) == before


def test_drift_from_init_needs_the_step0_checkpoint(two_seed_run: Run, tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    shutil.copytree(two_seed_run.path, run.path)
    step0 = run.checkpoints_dir("tied", 0) / "step-0"
    shutil.rmtree(step0)  # the earliest checkpoint left is step 1: it must not pose as the initial weights
    with pytest.raises(RunFolderError, match=rf"{step0}: missing: the step-0 checkpoint holds the initial"):
        comparisons.evolution_table(run, [0])
    assert comparisons.evolution_table(run, [1]).groupby("matrix").step.min().eq(0).all()
