"""A tuned-lens recipe as data: a study's lens settings (:class:`LensSettings`) and one training call's
(:class:`LensFit`).

Plain data and rules (no torch), checked once where they are made, so the lens code downstream
(:mod:`tiebias.lens.ladder` -> :mod:`tiebias.lens.rungs` -> :mod:`tiebias.lens.fit`, and
:mod:`tiebias.lens.rungs` for evaluation) trusts them. The ``lens_*`` parameters of notebooks 03 and 04 become
a :class:`LensSettings` in one call (:meth:`LensSettings.from_params`); every error names the parameter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiebias.config.checks import is_int
from tiebias.config.choices import LENS_RECIPES
from tiebias.config.params import PARAMS, coerce
from tiebias.config.training import DEFAULT_PROFILE

__all__ = ["LENS_BATCH_SIZE", "LENS_SEQ_LEN", "LENS_WARMUP_STEPS", "LensFit", "LensSettings", "check_settings", "check_shape",
           "lens_seq_len"]

LENS_SEQ_LEN = 128
"""Longest lens sequence: 03's lenses read sequences of min(training seq_len, this) tokens (lens cost grows with it)."""

LENS_BATCH_SIZE = 8
"""Sequences per forward pass when a lens is trained or evaluated (memory; a step's tokens are its own setting)."""

LENS_WARMUP_STEPS = 25
"""The package's Adam warmup; a shorter run warms up over a tenth of its steps (:meth:`LensSettings.fit`)."""

_CPU = LENS_RECIPES["cpu"]


def lens_seq_len(seq_len: int) -> int:
    """Sequence length of 03's lenses: the training one, capped at :data:`LENS_SEQ_LEN`."""
    return min(seq_len, LENS_SEQ_LEN)


def _check_seq_len(seq_len: Any) -> None:
    if not is_int(seq_len) or seq_len < 2:
        raise ValueError(f"seq_len: must be an int >= 2, got {seq_len!r}")


def check_shape(tokens_per_step: int, eval_tokens: int, seq_len: int, training_seq_len: int | None = None) -> None:
    """Whole lens sequences: ``lens_tokens_per_step`` a multiple of the lens ``seq_len`` and ``lens_eval_tokens`` at
    least one sequence (the rules of lens training and evaluation). ``training_seq_len``: the models' sequence
    length the lens one was derived from (:func:`lens_seq_len`), named in the message."""
    at = "" if training_seq_len is None else f" with seq_len={training_seq_len}"
    unit = f"the lens sequence length {seq_len}"
    if training_seq_len is not None:
        unit += f" (min(seq_len={training_seq_len}, {LENS_SEQ_LEN}))"
    if tokens_per_step % seq_len:
        below = tokens_per_step - tokens_per_step % seq_len
        hint = f"e.g. {below} or {below + seq_len}" if below else f"e.g. {seq_len} or {2 * seq_len}"
        raise ValueError(f"lens_tokens_per_step: {tokens_per_step} is not allowed{at}; need a multiple of {unit}, "
                         f"{hint}")
    if eval_tokens < seq_len:
        raise ValueError(f"lens_eval_tokens: {eval_tokens} is not allowed{at}; need at least one lens sequence, "
                         f"i.e. >= {unit}")


def check_settings(lens: Any) -> LensSettings:
    """``lens`` itself when it is a :class:`LensSettings` (checked when it was made), else a ValueError naming it."""
    if not isinstance(lens, LensSettings):
        raise ValueError(f"lens: expected a tiebias.config.lens.LensSettings, got {type(lens).__name__}")
    return lens


@dataclass(frozen=True)
class LensFit:
    """How one :func:`tiebias.lens.fit.train_lens` call trains: its schedule's length, the data's shape and the
    optimiser recipe (the package's ``train_loop`` options). ``low_precision`` None: bf16 lens logits where
    :func:`tiebias.lens.precision.logits_precision` says so. Checked when made (ValueError naming the field)."""

    steps: int = DEFAULT_PROFILE["lens_steps"]
    seq_len: int = LENS_SEQ_LEN
    tokens_per_step: int = DEFAULT_PROFILE["lens_tokens_per_step"]
    lr: float = _CPU["lr"]
    warmup_steps: int = LENS_WARMUP_STEPS
    weight_decay: float = _CPU["weight_decay"]
    optimizer: str = _CPU["optimizer"]
    momentum: float = _CPU["momentum"]
    max_grad_norm: float = 1.0
    batch_size: int = LENS_BATCH_SIZE
    seed: int = 0
    low_precision: bool | None = None

    def __post_init__(self) -> None:
        if not is_int(self.steps) or self.steps <= 0:
            raise ValueError(f"steps: must be a positive int, got {self.steps!r}")
        _check_seq_len(self.seq_len)
        tps, n = self.tokens_per_step, self.seq_len
        if not is_int(tps) or tps < n or tps % n:
            raise ValueError(f"tokens_per_step: must be a positive multiple of seq_len={n}, got {tps!r}")
        if not is_int(self.warmup_steps) or not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps: must be an int in [0, steps={self.steps}), got {self.warmup_steps!r}")
        if self.lr <= 0:
            raise ValueError(f"lr: must be > 0, got {self.lr!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer: must be 'adam' or 'sgd', got {self.optimizer!r}")
        if not is_int(self.batch_size) or self.batch_size <= 0:
            raise ValueError(f"batch_size: must be a positive int, got {self.batch_size!r}")

    def replace(self, **changes: Any) -> LensFit:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class LensSettings:
    """A study's tuned-lens settings, carried whole from notebook 03 (or 04) through ladders, rungs and evaluation.

    ``steps`` and ``tokens_per_step`` make one budget unit of training (``lens_steps``, ``lens_tokens_per_step``);
    ``budgets`` is the ladder in those units (the last carries the verdict); ``recipes`` names
    :data:`tiebias.config.choices.LENS_RECIPES` (the first carries the verdict); ``protocols`` are the readings of
    every lens (:data:`tiebias.config.choices.LENS_PROTOCOLS`, the first carries the headline); ``eval_tokens``
    test-split tokens are read per evaluation, in sequences of ``seq_len``. Defaults: the default profile's numbers
    with the smallest ladder (one rung, the ``cpu`` recipe, the package reading); :meth:`from_params` takes a
    profile's lists.
    """

    steps: int = DEFAULT_PROFILE["lens_steps"]
    tokens_per_step: int = DEFAULT_PROFILE["lens_tokens_per_step"]
    eval_tokens: int = DEFAULT_PROFILE["lens_eval_tokens"]
    seq_len: int = LENS_SEQ_LEN
    budgets: tuple[int, ...] = (1,)
    recipes: tuple[str, ...] = ("cpu",)
    protocols: tuple[str, ...] = ("package",)

    def __post_init__(self) -> None:
        for name, field in (("lens_steps", "steps"), ("lens_tokens_per_step", "tokens_per_step"),
                            ("lens_eval_tokens", "eval_tokens")):
            object.__setattr__(self, field, coerce(name, getattr(self, field)))
        for name, field in (("lens_budgets", "budgets"), ("lens_recipes", "recipes"), ("lens_protocols", "protocols")):
            value = getattr(self, field)
            object.__setattr__(self, field, tuple(coerce(name, list(value) if isinstance(value, tuple) else value)))
        _check_seq_len(self.seq_len)
        check_shape(self.tokens_per_step, self.eval_tokens, self.seq_len)

    PARAM_KEYS = ("lens_steps", "lens_tokens_per_step", "lens_eval_tokens", "seq_len", "lens_budgets", "lens_recipes",
                  "lens_protocols")
    """The resolved parameters :meth:`from_params` reads."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LensSettings:
        """The settings of resolved notebook parameters (``lens_*`` and the training ``seq_len``).

        Args:
            params: resolved parameters (:func:`tiebias.config.profiles.resolve_notebook`); ``lens_steps``,
                ``lens_tokens_per_step``, ``lens_eval_tokens`` and ``seq_len`` are required, an empty or missing
                ``lens_budgets``, ``lens_recipes`` or ``lens_protocols`` takes the schema's default
                (:data:`tiebias.config.params.PARAMS`).

        Returns:
            The checked settings; the lens ``seq_len`` is the training one capped (:func:`lens_seq_len`).
        """
        return cls(steps=params["lens_steps"], tokens_per_step=params["lens_tokens_per_step"],
                   eval_tokens=params["lens_eval_tokens"], seq_len=lens_seq_len(params["seq_len"]),
                   budgets=params.get("lens_budgets") or PARAMS["lens_budgets"].default,
                   recipes=params.get("lens_recipes") or PARAMS["lens_recipes"].default,
                   protocols=params.get("lens_protocols") or PARAMS["lens_protocols"].default)

    @property
    def recipe(self) -> str:
        """The recipe that carries the verdict (the first)."""
        return self.recipes[0]

    def replace(self, **changes: Any) -> LensSettings:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def fit(self, recipe: str, steps: int, **changes: Any) -> LensFit:
        """One training call of ``steps`` steps with the named ``recipe``: its optimiser settings, a warmup of
        :data:`LENS_WARMUP_STEPS` or a tenth of ``steps`` when shorter (unless the recipe sets one), this ladder's
        sequence length and tokens per step; ``changes`` override any field."""
        if recipe not in LENS_RECIPES:
            raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(LENS_RECIPES)}")
        kw: dict[str, Any] = {"warmup_steps": min(LENS_WARMUP_STEPS, steps // 10), **LENS_RECIPES[recipe]}
        return LensFit(steps=steps, seq_len=self.seq_len, tokens_per_step=self.tokens_per_step, **{**kw, **changes})
