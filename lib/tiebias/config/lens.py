"""A tuned-lens recipe as data, checked where it is made: a study's (:class:`LensSettings`, the ``lens_*``
parameters) and one training call's (:class:`LensFit`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiebias.config.checks import is_int
from tiebias.config.choices import LENS_RECIPES
from tiebias.config.params import PARAMS, coerce
from tiebias.config.training import DEFAULT_PROFILE

LENS_SEQ_LEN = 128  # longest lens sequence: 03's lenses read min(training seq_len, this) tokens
LENS_BATCH_SIZE = 8  # sequences per forward pass of a lens (memory; a step's tokens are their own setting)
LENS_WARMUP_STEPS = 25  # the package's Adam warmup; a shorter run warms up over a tenth of its steps
_CPU = LENS_RECIPES["cpu"]


def lens_seq_len(seq_len: int) -> int:
    """Sequence length of 03's lenses: the training one, capped at :data:`LENS_SEQ_LEN`."""
    return min(seq_len, LENS_SEQ_LEN)


def check_shape(tokens_per_step: int, eval_tokens: int, seq_len: int, training_seq_len: int | None = None) -> None:
    """Whole lens sequences: ``lens_tokens_per_step`` a multiple of ``seq_len``, ``lens_eval_tokens`` at least one."""
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
    """``lens`` when it is a :class:`LensSettings` (checked when it was made), else a ValueError naming it."""
    if not isinstance(lens, LensSettings):
        raise ValueError(f"lens: expected a tiebias.config.lens.LensSettings, got {type(lens).__name__}")
    return lens


@dataclass(frozen=True)
class LensFit:
    """One :func:`tiebias.lens.fit.train_lens` call: schedule, data shape, optimiser recipe; ``low_precision`` None:
    bf16 lens logits where the lens precision check says so."""

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
        n, tps, warm = self.seq_len, self.tokens_per_step, self.warmup_steps
        for name, ok, need in (  # in order, each evaluated only once those before it hold
                ("steps", lambda: is_int(self.steps) and self.steps > 0, "a positive int"),
                ("seq_len", lambda: is_int(n) and n >= 2, "an int >= 2"),
                ("tokens_per_step", lambda: is_int(tps) and tps >= n and not tps % n, f"a positive multiple of seq_len={n}"),
                ("warmup_steps", lambda: is_int(warm) and 0 <= warm < self.steps, f"an int in [0, steps={self.steps})"),
                ("lr", lambda: self.lr > 0, "> 0"), ("optimizer", lambda: self.optimizer in ("adam", "sgd"), "'adam' or 'sgd'"),
                ("batch_size", lambda: is_int(self.batch_size) and self.batch_size > 0, "a positive int")):
            if not ok():
                raise ValueError(f"{name}: must be {need}, got {getattr(self, name)!r}")

    def replace(self, **changes: Any) -> LensFit:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class LensSettings:
    """A study's tuned-lens settings, carried whole through ladders, rungs and evaluation: a budget unit is ``steps``
    steps of ``tokens_per_step`` tokens; the last budget, first recipe and first protocol carry the verdict."""

    steps: int = DEFAULT_PROFILE["lens_steps"]
    tokens_per_step: int = DEFAULT_PROFILE["lens_tokens_per_step"]
    eval_tokens: int = DEFAULT_PROFILE["lens_eval_tokens"]
    seq_len: int = LENS_SEQ_LEN
    budgets: tuple[int, ...] = (1,)
    recipes: tuple[str, ...] = ("cpu",)
    protocols: tuple[str, ...] = ("package",)

    def __post_init__(self) -> None:
        for field in ("steps", "tokens_per_step", "eval_tokens", "budgets", "recipes", "protocols"):
            value = coerce(f"lens_{field}", getattr(self, field))
            object.__setattr__(self, field, tuple(value) if isinstance(value, list) else value)
        if not (is_int(self.seq_len) and self.seq_len >= 2):
            raise ValueError(f"seq_len: must be an int >= 2, got {self.seq_len!r}")
        check_shape(self.tokens_per_step, self.eval_tokens, self.seq_len)

    PARAM_KEYS = ("lens_steps", "lens_tokens_per_step", "lens_eval_tokens", "seq_len", "lens_budgets", "lens_recipes",
                  "lens_protocols")  # the resolved parameters from_params reads

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LensSettings:
        """The settings of resolved notebook parameters.

        Args:
            params: resolved parameters; an empty or missing lens list takes its default.

        Returns:
            The checked settings; the lens ``seq_len`` is the training one capped (:func:`lens_seq_len`).
        """
        lists = {f: params.get(f"lens_{f}") or PARAMS[f"lens_{f}"].default for f in ("budgets", "recipes", "protocols")}
        return cls(steps=params["lens_steps"], tokens_per_step=params["lens_tokens_per_step"],
                   eval_tokens=params["lens_eval_tokens"], seq_len=lens_seq_len(params["seq_len"]), **lists)

    def replace(self, **changes: Any) -> LensSettings:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def fit(self, recipe: str, steps: int, **changes: Any) -> LensFit:
        """One training call of ``steps`` steps with ``recipe`` (warmup :data:`LENS_WARMUP_STEPS`, or a tenth of
        ``steps`` when shorter, unless the recipe sets one); ``changes`` override any field."""
        if recipe not in LENS_RECIPES:
            raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(LENS_RECIPES)}")
        kw: dict[str, Any] = {"warmup_steps": min(LENS_WARMUP_STEPS, steps // 10), **LENS_RECIPES[recipe]}
        return LensFit(steps=steps, seq_len=self.seq_len, tokens_per_step=self.tokens_per_step, **{**kw, **changes})
