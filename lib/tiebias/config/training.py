"""The training recipe: :class:`TrainConfig`, the seed range, the checkpoint schedule and the gradient-factor range.

Plain data and rules (no torch), so profiles and the parameter vocabulary can check a recipe without
loading a model; :mod:`tiebias.train` runs it. The defaults of the recipe keys a profile gives (``steps``,
``eval_every``, ...) are the ``default`` profile's values (``config/profiles/default.toml``), read from there:
``TrainConfig()`` is the default profile's recipe.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from tiebias.config.checks import check_int
from tiebias.config.paths import PROFILE_DIR
from tiebias.config.presets import FAMILIES, get_preset

SEED_LIMIT = 2**32
"""Seeds are integers 0 <= seed < 2**32: what numpy's seeding (``np.random.seed``, ``RandomState``) and most tools
accept, so a seed means the same everywhere; the generator seeds derived from it in training
(``seed * 1_000_003 + step`` and the untied head's ``seed + 1_000_003``) then stay far inside torch's 64-bit range."""

MAX_FACTOR = 1000.0
"""Largest gradient factor (smallest: its inverse). The paper scales by 5, our sweeps by up to 20; 1000 already
makes one path outweigh the other by orders of magnitude, while a factor like 1e30 overflows the float32
gradient norm, so clipping zeroes every update and nothing is learned. The range is closed under 1/k
(``inverse_output`` multiplies the output path by 1/k)."""
FACTOR_RANGE = f"a finite number between {1 / MAX_FACTOR:g} and {MAX_FACTOR:g}"


def check_factor(name: str, value: Any) -> float:
    """Validate a gradient factor (1/MAX_FACTOR <= k <= MAX_FACTOR); errors name the parameter and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: {value!r} is not a number; a gradient factor must be {FACTOR_RANGE}")
    if not math.isfinite(value) or not 1 / MAX_FACTOR <= value <= MAX_FACTOR:
        raise ValueError(f"{name}: {value!r} is not allowed; a gradient factor must be {FACTOR_RANGE}")
    return float(value)


DOSE_RESPONSE_FACTORS = 2
"""Fewest factors k of a dose-response (notebook 04's ``ablate_factors``); a sweep of the library may train one."""


def factors_problem(factors: list[float], minimum: int = 1) -> str | None:
    """What is wrong with a list of gradient factors (None: nothing): each as :func:`check_factor` allows, none
    repeated, at least ``minimum`` of them. The one rule of the schema (``ablate_factors``) and the sweep."""
    for x in factors:
        try:
            check_factor("factor", x)
        except ValueError:
            return f"each factor k must be {FACTOR_RANGE} (the paper's k is 5; a far larger one overflows the gradient norm)"
    if len(set(factors)) != len(factors):
        return "a factor is repeated"
    if len(factors) < minimum:
        return (f"need at least {minimum} factors k > 0 for a dose-response (e.g. [1, 5])" if minimum > 1
                else "empty; give one or more factors k > 0 (e.g. [1, 2, 5, 10])")
    return None


def checkpoint_steps(steps: int, every: int) -> list[int]:
    """Steps with a checkpoint: 0, powers of two (log-spaced, for evolution plots), every ``every``, last."""
    s = {0, steps}
    p = 1
    while p < steps:
        s.add(p)
        p *= 2
    s.update(range(every, steps, every))
    return sorted(s)


OPTIMIZERS = ("adamw", "sgd")
"""``adamw`` (the recipe of every study); ``sgd`` (momentum ``beta1``, a contrast in claim 4's ingredients: no
per-coordinate scaling of the update)."""

ADDED_KEYS: Mapping[str, Any] = MappingProxyType({"optimizer": "adamw", "decay_embeddings": True})
"""Recipe keys added after models were first trained: a model's record carries them only when they differ from
these defaults, so a model trained before they existed still matches its (unchanged) recipe."""


def recorded_recipe(cfg: Any) -> dict[str, Any]:
    """A TrainConfig as a model's train_config.json records it (:data:`ADDED_KEYS` left out at their default)."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(cfg).items() if not (k in ADDED_KEYS and v == ADDED_KEYS[k])}


with (PROFILE_DIR / "default.toml").open("rb") as _f:
    DEFAULT_PROFILE: Mapping[str, Any] = MappingProxyType(tomllib.load(_f))
"""The ``default`` profile's values as written: the owner of every default a profile key has in code (the
recipe's here, the lens trainer's in :func:`tiebias.lens.fit.train_lens`)."""


MAX_LR = 1.0
"""The largest peak learning rate the kit accepts (see :func:`lr_problem`)."""


def lr_problem(v: object) -> str | None:
    """What is wrong with a peak learning rate, or None: AdamW needs 0 < lr <= MAX_LR.

    Adam moves every weight by about lr per step and the weights start near 0.02, so above 1 training can only
    diverge (a slip such as 3e3 for 3e-3). One rule for the parameter schema and for :meth:`TrainConfig.validate`.
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= MAX_LR:
        return (f"need a finite number > 0 and at most {MAX_LR:g} (Adam moves each weight by about lr per step; "
                "the profiles use 1e-3 to 3e-3)")
    return None


@dataclass
class TrainConfig:
    """Everything that determines a trained model besides its variant and seed.

    Keys a profile gives default to the ``default`` profile's values (config/profiles/default.toml); the
    others (optimiser details, provenance, precision) have their default here.
    """

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
        """Stop at once on a bad value, naming the parameter, the value and what is allowed."""
        get_preset(self.preset)
        if self.family not in FAMILIES:
            raise ValueError(f"family: unknown value {self.family!r}; allowed: {', '.join(map(repr, FAMILIES))}")
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_tokens", "checkpoint_every"):
            check_int(name, getattr(self, name), minimum=1, need="an integer > 0")
        if self.seq_len < 2:
            raise ValueError(f"seq_len: {self.seq_len} is not allowed; need an integer >= 2 (each window predicts "
                             "its next tokens, so one token gives nothing to learn or evaluate)")
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        if self.warmup_steps >= self.steps:  # the learning rate would still be ramping up when training ends
            raise ValueError(f"warmup_steps: {self.warmup_steps} is not allowed with steps={self.steps}; need "
                             f"warmup_steps < steps, else the learning rate never reaches its peak lr={self.lr:g}")
        if (why := lr_problem(self.lr)) is not None:
            raise ValueError(f"lr: {self.lr!r} is not allowed; {why}")
        v = self.grad_clip
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"grad_clip: {v!r} is not allowed; need a finite number > 0")
        for name in ("min_lr_ratio", "weight_decay", "beta1", "beta2"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"{name}: {v!r} is not allowed; need a number in [0, 1]")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: unknown value {self.optimizer!r}; allowed: "
                             f"{', '.join(map(repr, OPTIMIZERS))}")
        if not isinstance(self.decay_embeddings, bool):
            raise ValueError(f"decay_embeddings: {self.decay_embeddings!r} is not allowed; need true or false")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"precision: unknown value {self.precision!r}; allowed: 'auto', 'fp32', 'bf16'")
        if self.seq_len > get_preset(self.preset).max_positions:
            raise ValueError(f"seq_len: {self.seq_len} exceeds preset {self.preset!r}'s "
                             f"{get_preset(self.preset).max_positions} positions")
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """A config from a dict (e.g. a train_config.json); unknown keys are an error naming them."""
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"train config: unknown parameter(s) {sorted(unknown)}; allowed: {sorted(names)}")
        return cls(**d)
