"""Thread tuning: picks the faster count from measured steps, re-checks when the load changes."""

import time

import pytest
import torch

from tiebias.system import threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _run(tuner: threads.ThreadTuner, n_steps: int, cost: dict[int, float]) -> list[int]:
    """Steps whose duration depends on the thread count the tuner set; returns the counts used."""
    used = []
    for _ in range(n_steps):
        with tuner.step():
            used.append(torch.get_num_threads())
            time.sleep(cost[torch.get_num_threads()])
    return used


def test_tuner_keeps_the_faster_count_and_follows_a_change(restore_threads) -> None:
    tuner = threads.ThreadTuner([1, 2], every=50, probe=2)
    used = _run(tuner, 4, {1: 0.002, 2: 0.03})  # as if another process held a core: one thread is faster
    assert used == [2, 2, 1, 1] and tuner.chosen == 1
    assert _run(tuner, 3, {1: 0.002, 2: 0.03}) == [1, 1, 1]
    # the load goes away: one thread is now the slow one; three slow steps in a row start a new probe
    used = _run(tuner, 12, {1: 0.03, 2: 0.002})
    assert tuner.chosen == 2 and used[-1] == 2
    assert [n for _, n in tuner.choices] == [1, 2]


def test_interval_doubles_while_the_choice_holds(restore_threads) -> None:
    tuner = threads.ThreadTuner([1, 2], every=2, max_every=8, probe=1, patience=100)
    _run(tuner, 40, {1: 0.004, 2: 0.001})
    assert tuner.chosen == 2 and tuner.interval == 8 and all(n == 2 for _, n in tuner.choices)


def test_fixed_threads_from_the_environment(monkeypatch, restore_threads) -> None:
    monkeypatch.setenv(threads.THREADS_ENV, "1")
    tuner = threads.ThreadTuner([1, 2])
    assert not tuner.tuning and _run(tuner, 3, {1: 0.0, 2: 0.0}) == [1, 1, 1]
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(threads.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=f"TIEBIAS_THREADS: '{bad}' is not allowed"):
            threads.fixed_threads()
    monkeypatch.setenv(threads.THREADS_ENV, "auto")
    assert threads.fixed_threads() is None
