"""Independent jobs side by side in one process, each on its own share of the CPU threads.

The kit's small models use two cores poorly from one loop: matrices 128 wide leave both cores
waiting on each other. Two jobs with one thread each get more done. Measured on the kit's 2-core
machine: a ``small`` training step takes 0.239 s on two threads, and 0.41-0.43 s per step each when two
trainings run side by side on one thread each, i.e. 0.21 s per model step (14% more models per
minute; ``bench/train_throughput.py`` prints both). Threads rather than processes: torch's kernels
release the GIL, the jobs share the process's writer lock on the run and its loaded data, and one
interrupt stops them all. Results do not depend on it: each job's numbers are the same bit for bit as
when it runs alone (tests train and lens both ways).

``workers="auto"`` runs two jobs at a time where there are at least two CPU threads and two jobs,
one otherwise; ``TIEBIAS_WORKERS=N`` fixes it (1: one job at a time, with the thread tuner as before). The
threads are this process's, or ``TIEBIAS_THREADS`` when it fixes them: ``TIEBIAS_THREADS=1`` runs one job at a
time on one thread, leaving the other cores free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from tiebias.config.checks import is_int
from tiebias.config.environment import WORKERS_ENV, env_count, fixed_threads

CONSTRUCTION = threading.RLock()
"""Held while a model or a lens is built or loaded. transformers' loading swaps ``torch.nn.init``'s functions
for no-ops process-wide while it runs (``no_init_weights``), and initialisation draws from torch's global
generator: jobs side by side therefore construct their models one at a time, and get the same ones."""

class Stopped(Exception):
    """Raised by a job that stopped early because its ``should_stop`` turned True (it left nothing half-written)."""


T = TypeVar("T")
Task = Callable[[Callable[[], bool]], T]
"""A job: called with ``should_stop`` (ask it between steps; True means stop soon and return)."""


def check_workers(workers: object, name: str = "workers") -> None:
    """``"auto"`` or a positive int; else a ValueError naming the parameter."""
    if workers == "auto":
        return
    if not is_int(workers) or workers < 1:
        raise ValueError(f"{name}: must be a positive int or 'auto', got {workers!r}")


def thread_budget() -> int:
    """The intra-op threads all jobs together may use: ``TIEBIAS_THREADS`` when it fixes them, else this process's."""
    return fixed_threads() or torch.get_num_threads()


def workers_for(n_jobs: int, workers: int | str = "auto") -> int:
    """How many jobs run at once: ``workers`` (or ``TIEBIAS_WORKERS``), at most ``n_jobs``.

    ``"auto"``: two when :func:`thread_budget` is two or more, else one.
    """
    check_workers(workers)
    if workers == "auto":
        workers = env_count(WORKERS_ENV, "jobs at a time") or (2 if thread_budget() >= 2 else 1)
    return max(1, min(int(workers), n_jobs))


def check_should_stop(should_stop: object) -> None:
    """None or a callable taking no arguments; else a ValueError naming ``should_stop``."""
    if should_stop is not None and not callable(should_stop):
        raise ValueError(f"should_stop: must be None or a function returning True to stop, got {should_stop!r}")


def side_by_side(tasks: Sequence[Task[T]], workers: int | str = "auto") -> list[T]:
    """Run ``tasks`` ``workers`` at a time (see :func:`workers_for`); their results in task order.

    With one worker the tasks run here, one after the other, with the caller's thread settings. With
    more, each worker thread uses ``threads // workers`` intra-op threads (at least one; ``threads`` is
    :func:`thread_budget`). The first
    task to raise stops the others (their ``should_stop`` turns True) and its error is raised once they
    have returned; an interrupt (KeyboardInterrupt) does the same. The caller's thread count is restored.
    """
    tasks = list(tasks)
    n = workers_for(len(tasks), workers)
    if n <= 1:
        return [task(lambda: False) for task in tasks]
    before = torch.get_num_threads()
    each = max(1, thread_budget() // n)
    stop = threading.Event()
    pending = list(range(len(tasks)))
    results: dict[int, T] = {}
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()

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
    real = {i: e for i, e in errors.items() if not isinstance(e, Stopped)}
    if real or errors:
        raise (real or errors)[min(real or errors)]
    return [results[i] for i in range(len(tasks))]


__all__ = ["CONSTRUCTION", "WORKERS_ENV", "Stopped", "Task", "check_should_stop", "check_workers", "side_by_side",
           "thread_budget", "workers_for"]
