"""The training recipe (:class:`TrainConfig`) and its rules, without torch; profile keys default to the ``default``
profile's values."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any

from tiebias.config.paths import PROFILE_DIR
from tiebias.config.presets import get_preset

# the ``default`` profile as written: the one owner of every default a profile key has in code
DEFAULT_PROFILE: Mapping[str, Any] = MappingProxyType(tomllib.loads((PROFILE_DIR / "default.toml").read_text()))

SEED_LIMIT = 2**32  # numpy's seed range, so a seed means the same everywhere (and derived seeds stay inside torch's)
MAX_FACTOR = 1000.0  # gradient factors lie in [1/MAX_FACTOR, MAX_FACTOR]: far larger ones overflow the gradient norm
FACTOR_RANGE = f"a finite number between {1 / MAX_FACTOR:g} and {MAX_FACTOR:g}"
DOSE_RESPONSE_FACTORS = 2  # fewest factors k of notebook 04's dose-response (a library sweep may train one)
OPTIMIZERS = ("adamw", "sgd")  # sgd: momentum beta1, claim 4's contrast without per-coordinate scaling
# recipe keys added after models were first trained: recorded only when they differ, so older models still match
ADDED_KEYS: Mapping[str, Any] = MappingProxyType({"optimizer": "adamw", "decay_embeddings": True})


def _factor_ok(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and 1 / MAX_FACTOR <= x <= MAX_FACTOR


def check_factor(name: str, value: Any) -> float:
    """A gradient factor as a float (1/MAX_FACTOR <= k <= MAX_FACTOR); errors name the parameter and the value."""
    if not _factor_ok(value):
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        raise ValueError(f"{name}: {value!r} is {'not allowed' if number else 'not a number'}; a gradient factor must "
                         f"be {FACTOR_RANGE}")
    return float(value)


def factors_problem(factors: list[float], minimum: int = 1) -> str | None:
    """What is wrong with gradient factors (None: nothing): the one rule of ``ablate_factors`` and the sweep."""
    if not all(map(_factor_ok, factors)):
        return f"each factor k must be {FACTOR_RANGE} (the paper's k is 5; a far larger one overflows the gradient norm)"
    if len(set(factors)) != len(factors):
        return "a factor is repeated"
    if len(factors) < minimum:
        return (f"need at least {minimum} factors k > 0 for a dose-response (e.g. [1, 5])" if minimum > 1
                else "empty; give one or more factors k > 0 (e.g. [1, 2, 5, 10])")
    return None


def checkpoint_steps(steps: int, every: int) -> list[int]:
    """Steps with a checkpoint: 0, powers of two (log-spaced, for evolution plots), every ``every``, the last."""
    powers = (2**i for i in range(steps.bit_length()) if 2**i < steps)
    return sorted({0, steps, *powers, *range(every, steps, every)})


def recorded_recipe(cfg: TrainConfig) -> dict[str, Any]:
    """A TrainConfig as a model's train_config.json records it (:data:`ADDED_KEYS` left out at their default)."""
    return {k: v for k, v in asdict(cfg).items() if not (k in ADDED_KEYS and v == ADDED_KEYS[k])}


@dataclass
class TrainConfig:
    """Everything that determines a trained model besides its variant and seed."""

    preset: str = DEFAULT_PROFILE["preset"]
    family: str = DEFAULT_PROFILE["family"]
    steps: int = DEFAULT_PROFILE["steps"]
    batch_size: int = DEFAULT_PROFILE["batch_size"]
    seq_len: int = DEFAULT_PROFILE["seq_len"]
    lr: float = float(DEFAULT_PROFILE["lr"])
    min_lr_ratio: float = 0.1
    warmup_steps: int = DEFAULT_PROFILE["warmup_steps"]
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = DEFAULT_PROFILE["eval_every"]
    eval_tokens: int = DEFAULT_PROFILE["eval_tokens"]
    checkpoint_every: int = DEFAULT_PROFILE["checkpoint_every"]
    record_provenance: bool = True
    precision: str = "auto"
    optimizer: str = "adamw"
    decay_embeddings: bool = True

    def validate(self) -> TrainConfig:
        """Stop at once on a bad value, naming the parameter, the value and what is allowed (the vocabulary's rules)."""
        from tiebias.config.params import TRAIN_KEYS, coerce  # the vocabulary is built on this module

        for name in TRAIN_KEYS:
            coerce(name, getattr(self, name), strict=True)
        for name, allowed in (("optimizer", OPTIMIZERS), ("precision", ("auto", "fp32", "bf16"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: unknown value {getattr(self, name)!r}; allowed: "
                                 f"{', '.join(map(repr, allowed))}")
        if not isinstance(self.decay_embeddings, bool):
            raise ValueError(f"decay_embeddings: {self.decay_embeddings!r} is not allowed; need true or false")
        if self.warmup_steps >= self.steps:  # the learning rate would still be ramping up when training ends
            raise ValueError(f"warmup_steps: {self.warmup_steps} is not allowed with steps={self.steps}; need "
                             f"warmup_steps < steps, else the learning rate never reaches its peak lr={self.lr:g}")
        for name in ("grad_clip", "min_lr_ratio", "weight_decay", "beta1", "beta2"):
            v, clip = getattr(self, name), name == "grad_clip"
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf if clip else 0 <= v <= 1):
                raise ValueError(f"{name}: {v!r} is not allowed; need {'a finite number > 0' if clip else 'a number in [0, 1]'}")
        if self.seq_len > (preset := get_preset(self.preset)).max_positions:
            raise ValueError(f"seq_len: {self.seq_len} exceeds preset {self.preset!r}'s {preset.max_positions} "
                             "positions")
        return self
