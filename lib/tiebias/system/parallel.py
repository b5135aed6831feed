"""Independent jobs side by side in one process, each on its share of the CPU threads (small models use two cores
poorly from one loop, ``bench/plumbing.py``). Threads: torch's kernels release the GIL, the jobs share the writer lock
and loaded data, one interrupt stops them all; each job's numbers are bit for bit those it gets alone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

import torch

from tiebias.config.checks import is_int
from tiebias.config.environment import WORKERS_ENV, env_count, fixed_threads

CONSTRUCTION = threading.RLock()  # held while a model or lens is built or loaded: loading swaps torch.nn.init's
# functions process-wide and initialisation draws from torch's global generator, so jobs construct one at a time


class Stopped(Exception):
    """Raised by a job that stopped early because its ``should_stop`` turned True (it left nothing half-written)."""


T = TypeVar("T")
Task = Callable[[Callable[[], bool]], T]  # a job, called with ``should_stop`` (True: stop soon and return)


_ALLOWED: dict[str, tuple[str, Callable[[object], bool]]] = {  # a loop's arguments: what is allowed, and the test
    "workers": ("a positive int or 'auto'", lambda x: x == "auto" or (is_int(x) and x >= 1)),
    "num_threads": ("a positive int, 'auto' or None", lambda x: x in (None, "auto") or (is_int(x) and x >= 1)),
    "should_stop": ("None or a function returning True to stop", lambda x: x is None or callable(x)),
}


def check_arg(name: str, value: object) -> None:
    """Refuse a ``workers``, ``num_threads`` or ``should_stop`` argument that is not allowed, saying what is."""
    allowed, ok = _ALLOWED[name]
    if not ok(value):
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")


def thread_budget() -> int:
    """The intra-op threads all jobs together may use: ``TIEBIAS_THREADS`` when it fixes them, else this process's."""
    return fixed_threads() or torch.get_num_threads()


def workers_for(n_jobs: int, workers: int | str = "auto") -> int:
    """How many jobs run at once (``"auto"``: ``TIEBIAS_WORKERS``, else 2 on 2+ threads), at most ``n_jobs``."""
    check_arg("workers", workers)
    if workers == "auto":
        workers = env_count(WORKERS_ENV, "jobs at a time") or (2 if thread_budget() >= 2 else 1)
    return max(1, min(int(workers), n_jobs))


def side_by_side(tasks: Sequence[Task[T]], workers: int | str = "auto") -> list[T]:
    """Run ``tasks`` :func:`workers_for` at a time, each worker on ``thread_budget() // workers`` threads; their
    results in task order. The first to raise (or an interrupt) stops the others and is raised once they returned."""
    tasks = list(tasks)
    n = workers_for(len(tasks), workers)
    if n <= 1:
        return [task(lambda: False) for task in tasks]
    before, stop = torch.get_num_threads(), threading.Event()

    def run(task: Task[T]) -> T:
        if stop.is_set():
            raise Stopped
        try:
            return task(stop.is_set)
        except BaseException:
            stop.set()
            raise

    try:
        with ThreadPoolExecutor(n, "tiebias-worker", torch.set_num_threads, (max(1, thread_budget() // n),)) as pool:
            futures = [pool.submit(run, task) for task in tasks]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:  # an interrupt: the workers stop at their next step
                stop.set()
                raise
    finally:
        torch.set_num_threads(before)
    errors = [e for f in futures if (e := f.exception()) is not None]
    if errors:
        raise next((e for e in errors if not isinstance(e, Stopped)), errors[0])
    return [f.result() for f in futures]
