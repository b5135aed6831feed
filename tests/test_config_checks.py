"""The shared value checks of the config layer: whole numbers that are never a bool, run-folder names."""

from __future__ import annotations

import numpy as np
import pytest

from tiebias.config.checks import HOW_TO_PASS, check_int, check_run_dir_text, is_int


@pytest.mark.parametrize("value", [0, 1, -3, 2**40])
def test_ints_are_ints(value: int) -> None:
    assert is_int(value) and check_int("n", value) == value


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_flags_floats_and_text_are_not_ints(value: object) -> None:
    assert not is_int(value) and not is_int(value, numpy_ok=True)
    with pytest.raises(ValueError, match=r"^n: .* is not allowed; need an integer$"):
        check_int("n", value)


def test_numpy_integers_only_when_asked() -> None:
    assert not is_int(np.int64(3)) and is_int(np.int64(3), numpy_ok=True)
    assert not is_int(np.bool_(True), numpy_ok=True)


@pytest.mark.parametrize("value, minimum, maximum, need", [
    (0, 1, None, "an integer >= 1"),
    (True, 1, None, "an integer >= 1"),  # True == 1 would pass the range: refused as a flag
    (11, 0, 10, "an integer 0 <= n <= 10"),
    (5, None, 4, "an integer <= 4"),
])
def test_out_of_range_names_the_range(value: int, minimum: int | None, maximum: int | None, need: str) -> None:
    with pytest.raises(ValueError) as info:
        check_int("n", value, minimum=minimum, maximum=maximum)
    assert str(info.value) == f"n: {value!r} is not allowed; need {need}"
    assert check_int("n", 4, minimum=minimum if minimum is not None and minimum <= 4 else None, maximum=10) == 4


def test_caller_words_the_need() -> None:
    with pytest.raises(ValueError, match=r"^steps: 0 is not allowed; need an integer > 0$"):
        check_int("steps", 0, minimum=1, need="an integer > 0")


@pytest.mark.parametrize("blank", ["", "   "])
def test_empty_run_dir_text_is_refused_with_the_ways_to_give_one(blank: str) -> None:
    class Refused(ValueError):
        pass

    with pytest.raises(Refused) as info:
        check_run_dir_text(blank, "out", Refused)
    assert str(info.value).startswith(f"out: {blank!r} is empty") and HOW_TO_PASS in str(info.value)
    for fine in (None, "runs/x", 0):
        check_run_dir_text(fine)
