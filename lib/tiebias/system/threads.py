"""CPU threads that follow the load: :class:`ThreadTuner` re-chooses the intra-op thread count during long loops from
measured step times (``bench/plumbing.py``). ``TIEBIAS_THREADS=N`` fixes it instead, which keeps a run the same bit for
bit under load (a long inner dimension can round differently with another count); OpenMP's settings are the user's."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace

import torch

from tiebias.config.environment import fixed_threads
from tiebias.system.parallel import check_arg


class ThreadTuner:
    """Keeps the fastest thread count for a loop of similar steps (wrap each step in :meth:`step`): times ``probe``
    steps per candidate, probes again after ``every`` steps (doubling up to ``max_every`` while the choice holds) and
    at once when ``patience`` steps in a row take ``jump`` times as long."""

    def __init__(self, candidates: Sequence[int] | None = None, *, every: int = 100, max_every: int = 800,
                 probe: int = 2, jump: float = 1.5, patience: int = 3) -> None:
        fixed = fixed_threads()
        self.candidates = [fixed] if fixed else sorted(
            set(candidates or range(1, max(torch.get_num_threads(), 1) + 1)), reverse=True)
        if not self.candidates or min(self.candidates) < 1:
            raise ValueError(f"candidates: {candidates!r} is not allowed; need thread counts >= 1")
        self.every, self.max_every, self.probe, self.jump, self.patience = every, max_every, probe, jump, patience
        self.interval, self.chosen = every, self.candidates[0]
        self.choices: list[tuple[int, int]] = []  # (step index, threads) each time the choice was made
        self._queue: list[int] = []
        self._times: dict[int, list[float]] = {}
        self._baseline, self._since, self._slow, self._n = float("nan"), 0, 0, 0
        self.tuning = len(self.candidates) > 1
        self._start_probe()

    def _start_probe(self) -> None:
        if not self.tuning:
            _set_threads(self.candidates[0])
            return
        self._times = {c: [] for c in self.candidates}
        self._queue = [c for c in self.candidates for _ in range(self.probe)]

    @contextmanager
    def step(self) -> Iterator[None]:
        """Time one step's compute at the thread count the tuner picks for it."""
        probing = bool(self._queue)
        n = self._queue.pop(0) if probing else self.chosen
        _set_threads(n)
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        self._n += 1
        if probing:
            self._times[n].append(dt)
            if not self._queue:
                self._choose()
            return
        self._since += 1
        self._slow = self._slow + 1 if dt > self.jump * self._baseline else 0
        if self._slow >= self.patience:
            self._slow, self.interval = 0, self.every  # the load changed: look again soon
            self._start_probe()
        elif self._since >= self.interval:
            self._start_probe()

    def _choose(self) -> None:
        median = {c: statistics.median(t) if t else float("inf") for c, t in self._times.items()}
        best = min(self._times, key=median.__getitem__)
        self.interval = min(self.interval * 2, self.max_every) if best == self.chosen and self.choices else self.every
        self.chosen, self._since = best, 0
        self._baseline = median[best] if self._times[best] else float("nan")
        self.choices.append((self._n, best))
        _set_threads(best)


def _set_threads(n: int) -> None:
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


@contextmanager
def loop_threads(num_threads: int | str | None = "auto", device_type: str = "cpu",
                 ) -> Iterator[ThreadTuner | SimpleNamespace]:
    """Threads for one loop, restored after: ``"auto"`` tunes on a CPU, an int fixes them, None keeps them; yields
    what wraps each step. Freed memory is kept meanwhile (:func:`tiebias.system.alloc.kept_heap`)."""
    from tiebias.system.alloc import kept_heap

    check_arg("num_threads", num_threads)
    before = torch.get_num_threads()
    try:
        if isinstance(num_threads, int):
            torch.set_num_threads(num_threads)
        with kept_heap():
            yield ThreadTuner() if num_threads == "auto" and device_type == "cpu" else SimpleNamespace(step=nullcontext)
    finally:
        torch.set_num_threads(before)
