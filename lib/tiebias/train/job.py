"""One model's training job: what is trained, with what recipe, on which data, and where its files go.

Shared by :mod:`tiebias.train.trainer` (which prepares it) and :mod:`tiebias.train.steploop` (which runs its steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator

from tiebias.config.training import TrainConfig, recorded_recipe
from tiebias.config.variants import Variant, model_key
from tiebias.run.folder import Run


@dataclass
class TrainJob:
    """One model's training: what is trained, with what, on which data, and where its files go."""

    run: Run
    v: Variant
    seed: int
    cfg: TrainConfig
    acc: Accelerator
    precision: str
    tok: Any
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    vocab: int
    num_threads: int | str | None = "auto"
    should_stop: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        self.key = model_key(self.v, self.seed)
        self.mdir = self.run.model_dir(self.v, self.seed)
        self.ckpt_root = self.run.checkpoints_dir(self.v, self.seed)
        self.cfg_file = self.run.train_config_path(self.v, self.seed)
        self.metrics_path = self.run.metrics_path(self.v, self.seed, "train")
        self.val_path = self.run.metrics_path(self.v, self.seed, "val")
        self.world, self.main = self.acc.num_processes, self.acc.is_main_process
        self.dev = self.acc.device

    def wanted(self) -> dict[str, Any]:
        """What the model is trained with: variant, seed, vocabulary and the TrainConfig (a change is a new model)."""
        return {"variant": self.v.name, "seed": self.seed, "vocab_size": self.vocab, **recorded_recipe(self.cfg)}

    def train_config(self) -> dict[str, Any]:
        """The model's train_config.json: :meth:`wanted` and the run's corpus and tokenizer fingerprints, which tie
        the model folder to this run's data (:meth:`tiebias.run.folder.Run.check_model_origin`)."""
        return {**self.wanted(), **self.run.fingerprints()}
