"""Thread tuning: picks the faster count from measured steps, re-checks when the load changes."""

import time
import warnings

import pytest
import torch

from tiebias.config import environment
from tiebias.system import parallel, threads


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
    _run(tuner, 40, {1: 0.03, 2: 0.001})  # 30x apart: a loaded machine's sleep jitter cannot reorder them
    assert tuner.chosen == 2 and tuner.interval == 8 and all(n == 2 for _, n in tuner.choices)


def test_fixed_threads_from_the_environment(monkeypatch, restore_threads) -> None:
    monkeypatch.setenv(environment.THREADS_ENV, "1")
    tuner = threads.ThreadTuner([1, 2])
    assert not tuner.tuning and _run(tuner, 3, {1: 0.0, 2: 0.0}) == [1, 1, 1]
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(environment.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=f"TIEBIAS_THREADS: '{bad}' is not allowed"):
            environment.fixed_threads()
    monkeypatch.setenv(environment.THREADS_ENV, "auto")
    assert environment.fixed_threads() is None


# -- TIEBIAS_THREADS / TIEBIAS_WORKERS: checked with the parameters, capped at the cores, one core left free ---------
def test_bad_thread_or_worker_count_is_refused_with_the_parameters(monkeypatch, tmp_path) -> None:
    from tiebias.__main__ import main
    from tiebias.config import profiles
    from tiebias.config.params import PARAMS

    monkeypatch.delenv(environment.WORKERS_ENV, raising=False)
    for bad in ("0", "-1", "abc"):
        monkeypatch.setenv(environment.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=rf"^TIEBIAS_THREADS: '{bad}' is not allowed; use 'auto' or a whole"):
            profiles.resolve("smoke", tmp_path / "run")  # the parameters cell of every notebook
        assert main(["study", "--profile", "smoke", "--run-dir", str(tmp_path / "run")]) == 2
    monkeypatch.setenv(environment.THREADS_ENV, "1")
    monkeypatch.setenv(environment.WORKERS_ENV, "0")
    with pytest.raises(ValueError, match="^TIEBIAS_WORKERS: '0' is not allowed"):
        profiles.resolve_notebook("01_train", {n: PARAMS[n].default_for("01_train") for n in PARAMS})
    assert main(["study", "--profile", "smoke", "--run-dir", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists(), "refused before anything is written"


def test_thread_count_is_capped_at_the_cores_and_says_so(monkeypatch, tmp_path) -> None:
    from tiebias.config import profiles

    monkeypatch.setattr(environment, "cpu_cores", lambda: 2)
    monkeypatch.setenv(environment.THREADS_ENV, "10000")
    assert environment.fixed_threads() == 2 and threads.ThreadTuner().candidates == [2]
    with pytest.warns(UserWarning, match="TIEBIAS_THREADS=10000 is more than the 2 CPU cores .*: using 2 threads"):
        profiles.resolve("smoke", tmp_path / "run")
    monkeypatch.setenv(environment.THREADS_ENV, "2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profiles.resolve("smoke", tmp_path / "run")  # within the cores: nothing to say


def test_one_fixed_thread_runs_one_job_at_a_time(monkeypatch, restore_threads) -> None:
    torch.set_num_threads(2)  # as on a 2-core machine
    monkeypatch.delenv(environment.WORKERS_ENV, raising=False)
    monkeypatch.setenv(environment.THREADS_ENV, "1")
    assert parallel.thread_budget() == 1 and parallel.workers_for(4) == 1  # the other core stays free
    monkeypatch.setenv(environment.THREADS_ENV, "auto")
    assert parallel.workers_for(4) == 2
    monkeypatch.setattr(environment, "cpu_cores", lambda: 8)
    monkeypatch.setenv(environment.THREADS_ENV, "4")
    used: list[int] = []
    parallel.side_by_side([lambda stop: used.append(torch.get_num_threads())] * 2, 2)
    assert used == [2, 2]  # the fixed count is shared by the jobs side by side
    assert torch.get_num_threads() == 2
