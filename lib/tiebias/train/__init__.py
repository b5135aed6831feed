"""Training: gradient provenance and scaling (``gradients``), one model's training (``trainer``), checkpoints and exact
resume (``checkpoints``), diverged trainings (``divergence``), several models and other depths (``sweeps``), claim 2's
shares per window (``windows``)."""

from tiebias.train import divergence, windows
from tiebias.train.gradients import GradientProvenance
from tiebias.train.sweeps import train_depth_models, train_many
from tiebias.train.trainer import batch_for_step, pick_device, train

__all__ = ["GradientProvenance", "batch_for_step", "divergence", "pick_device", "train", "train_depth_models",
           "train_many", "windows"]
