"""Training the kit's models: per-path gradient provenance and scaling (``gradients``), one model's training as named
steps (``trainer``, ``job``, ``steploop``), atomic checkpoints and exact resume (``checkpoints``), diverged trainings
(``divergence``), the memory check (``memory``), several models at once (``sweeps``), other depths (``depths``) and
claim 2's shares per window and metric (``windows``)."""

from tiebias.train import (
           checkpoints,
           depths,
           divergence,
           gradients,
           job,
           memory,
           steploop,
           sweeps,
           trainer,
           windows,
)
from tiebias.train.depths import train_depth_models
from tiebias.train.gradients import GradientProvenance, summarise_flow
from tiebias.train.sweeps import train_many
from tiebias.train.trainer import pick_device, train

__all__ = ["GradientProvenance", "checkpoints", "depths", "divergence", "gradients", "job", "memory", "pick_device",
           "steploop", "summarise_flow", "sweeps", "train", "train_depth_models", "train_many", "trainer",
           "windows"]
