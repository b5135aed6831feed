"""The training recipe's defaults (the ``default`` profile) and rules (seeds, gradient factors, checkpoint steps),
without torch."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tiebias.config.paths import PROFILE_DIR

# the ``default`` profile as written: the one owner of every default a profile key has in code
DEFAULT_PROFILE: Mapping[str, Any] = MappingProxyType(tomllib.loads((PROFILE_DIR / "default.toml").read_text()))

SEED_LIMIT = 2**32  # numpy's seed range, so a seed means the same everywhere (and derived seeds stay inside torch's)
MAX_FACTOR = 1000.0  # gradient factors lie in [1/MAX_FACTOR, MAX_FACTOR]: far larger ones overflow the gradient norm
FACTOR_RANGE = f"a finite number between {1 / MAX_FACTOR:g} and {MAX_FACTOR:g}"
DOSE_RESPONSE_FACTORS = 2  # fewest factors k of notebook 04's dose-response (a library sweep may train one)


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
