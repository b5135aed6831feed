"""The shared value checks of the config layer: whole numbers that are never a bool, run-folder names."""

from __future__ import annotations

import numpy as np
import pytest

from tiebias.config.checks import HOW_TO_PASS, check_int, check_run_dir_text, is_int


@pytest.mark.parametrize("value", [0, 1, 3, 2**40])
def test_ints_are_ints(value: int) -> None:
    assert is_int(value) and check_int("n", value, "an integer >= 0") == value


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1], -3])
def test_flags_floats_text_and_values_below_the_minimum_are_refused(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        assert not is_int(value) and not is_int(value, numpy_ok=True)
    with pytest.raises(ValueError) as info:
        check_int("n", value, "an integer >= 0")  # True == 1 would pass the range: refused as a flag
    assert str(info.value) == f"n: {value!r} is not allowed; need an integer >= 0"


def test_numpy_integers_only_when_asked() -> None:
    assert not is_int(np.int64(3)) and is_int(np.int64(3), numpy_ok=True)
    assert not is_int(np.bool_(True), numpy_ok=True)


def test_the_range_is_inclusive() -> None:
    assert check_int("n", 10, "an integer 0 <= n <= 10", maximum=10) == 10
    with pytest.raises(ValueError, match=r"^n: 11 is not allowed; need an integer 0 <= n <= 10$"):
        check_int("n", 11, "an integer 0 <= n <= 10", maximum=10)
    with pytest.raises(ValueError, match=r"^steps: 0 is not allowed; need an integer > 0$"):
        check_int("steps", 0, "an integer > 0", minimum=1)


@pytest.mark.parametrize("blank", ["", "   "])
def test_empty_run_dir_text_is_refused_with_the_ways_to_give_one(blank: str) -> None:
    class Refused(ValueError):
        pass

    with pytest.raises(Refused) as info:
        check_run_dir_text(blank, "out", Refused)
    assert str(info.value).startswith(f"out: {blank!r} is empty") and HOW_TO_PASS in str(info.value)
    for fine in (None, "runs/x", 0):
        check_run_dir_text(fine)
