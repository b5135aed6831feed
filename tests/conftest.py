"""Shared fixtures: a small run folder prepared once per test session (embedded corpus, 512 tokens)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tiebias.run.folder import Run
from tiebias.train.trainer import TrainConfig, train

TINY = dict(preset="tiny", steps=12, batch_size=4, seq_len=32, lr=3e-3, warmup_steps=2, eval_every=4,
            eval_tokens=512, checkpoint_every=4)


@pytest.fixture(scope="session")
def prepared_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Corpus split, tokenizer and token streams, shared read-only by the tests that copy it."""
    return Run.prepare(tmp_path_factory.mktemp("runs") / "base", vocab_size=512)


@pytest.fixture
def fresh_run(prepared_run: Run, tmp_path: Path) -> Run:
    """A private copy of the prepared run folder without any trained model."""
    dst = tmp_path / "run"
    shutil.copytree(prepared_run.path, dst, ignore=shutil.ignore_patterns("models", "metrics"))
    return Run(dst)


@pytest.fixture
def tiny_config() -> TrainConfig:
    return TrainConfig(**TINY)


@pytest.fixture(scope="session")
def two_seed_run(prepared_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Tied and untied tiny models for seeds 0 and 1 (8 steps), shared read-only by analysis tests."""
    dst = tmp_path_factory.mktemp("runs") / "two_seed"
    shutil.copytree(prepared_run.path, dst, ignore=shutil.ignore_patterns("models", "metrics"))
    run = Run(dst)
    cfg = replace(TrainConfig(**TINY), steps=8)
    for seed in (0, 1):
        for v in ("tied", "untied"):
            train(run, v, seed, cfg, progress=False)
    return run


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster, and far faster on a busy 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
