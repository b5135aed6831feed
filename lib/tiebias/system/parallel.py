"""Independent jobs side by side in one process, each on its own share of the CPU threads.

The kit's small models use two cores poorly from one loop, so two jobs with one thread each get more done
(``bench/train_throughput.py`` measures it). Threads rather than processes: torch's kernels release the GIL, the jobs
share the process's writer lock and loaded data, and one interrupt stops them all. Each job's numbers are the same bit
for bit as when it runs alone. ``workers="auto"`` runs two at a time where there are two CPU threads (of the process,
or fixed by ``TIEBIAS_THREADS``); ``TIEBIAS_WORKERS=N`` fixes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from tiebias.config.checks import is_int
from tiebias.config.environment import WORKERS_ENV, env_count, fixed_threads

CONSTRUCTION = threading.RLock()
"""Held while a model or a lens is built or loaded: transformers' loading swaps ``torch.nn.init``'s functions
process-wide, and initialisation draws from torch's global generator, so jobs construct one at a time."""


class Stopped(Exception):
    """Raised by a job that stopped early because its ``should_stop`` turned True (it left nothing half-written)."""


T = TypeVar("T")
Task = Callable[[Callable[[], bool]], T]
"""A job: called with ``should_stop`` (ask it between steps; True means stop soon and return)."""


def check_workers(workers: object, name: str = "workers") -> None:
    """``"auto"`` or a positive int; else a ValueError naming the parameter."""
    if workers != "auto" and (not is_int(workers) or workers < 1):
        raise ValueError(f"{name}: must be a positive int or 'auto', got {workers!r}")


def thread_budget() -> int:
    """The intra-op threads all jobs together may use: ``TIEBIAS_THREADS`` when it fixes them, else this process's."""
    return fixed_threads() or torch.get_num_threads()


def workers_for(n_jobs: int, workers: int | str = "auto") -> int:
    """How many jobs run at once: ``workers`` (``"auto"``: ``TIEBIAS_WORKERS``, else 2 on 2+ threads), at most
    ``n_jobs``."""
    check_workers(workers)
    if workers == "auto":
        workers = env_count(WORKERS_ENV, "jobs at a time") or (2 if thread_budget() >= 2 else 1)
    return max(1, min(int(workers), n_jobs))


def check_should_stop(should_stop: object) -> None:
    """None or a callable taking no arguments; else a ValueError naming ``should_stop``."""
    if should_stop is not None and not callable(should_stop):
        raise ValueError(f"should_stop: must be None or a function returning True to stop, got {should_stop!r}")


def side_by_side(tasks: Sequence[Task[T]], workers: int | str = "auto") -> list[T]:
    """Run ``tasks`` :func:`workers_for` at a time, each worker on ``thread_budget() // workers`` threads; their
    results in task order. One worker runs them here, one after the other. The first task to raise (or an interrupt)
    stops the others (their ``should_stop`` turns True) and is raised once they returned; the thread count is
    restored."""
    tasks = list(tasks)
    n = workers_for(len(tasks), workers)
    if n <= 1:
        return [task(lambda: False) for task in tasks]
    before, each = torch.get_num_threads(), max(1, thread_budget() // n)
    stop, lock = threading.Event(), threading.Lock()
    pending = list(range(len(tasks)))
    results: dict[int, T] = {}
    errors: dict[int, BaseException] = {}

    def worker() -> None:
        torch.set_num_threads(each)
        while not stop.is_set():
            with lock:
                if not pending:
                    return
                i = pending.pop(0)
            try:
                results[i] = tasks[i](stop.is_set)
            except BaseException as e:  # reported to the caller below, after the others stopped
                errors[i] = e
                stop.set()

    pool = [threading.Thread(target=worker, name=f"tiebias-worker-{k}", daemon=True) for k in range(n)]
    try:
        for t in pool:
            t.start()
        for t in pool:
            while t.is_alive():
                t.join(timeout=0.2)  # short waits, so an interrupt reaches this thread at once
    except BaseException:
        stop.set()
        for t in pool:
            t.join()
        raise
    finally:
        torch.set_num_threads(before)
    real = {i: e for i, e in errors.items() if not isinstance(e, Stopped)} or errors
    if real:
        raise real[min(real)]
    return [results[i] for i in range(len(tasks))]
