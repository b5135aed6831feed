"""Time and memory of the alignment metrics at the paper's scale (V=50,000 tokens, d=2048).

Times the three alignment maps together on a pair of random float32 matrices, through the
shared-statistics path that ``compare`` uses (``--separate`` also times each map on its own), then
KNN@k overlap, and prints a table with wall time and peak resident memory above the baseline (the two
input matrices already allocated); each step runs in a fresh process so peaks do not mix.
Peak memory is sampled from the process RSS in a background thread, because tracemalloc does not see
torch allocations.  Target: the three maps under 60 s and 4 GB together on a 2-core machine.

    .venv/bin/python bench/bench_alignment.py            # full scale (about 3 minutes on 2 cores)
    .venv/bin/python bench/bench_alignment.py --separate --heldout 5   # also per map and 5-fold
    .venv/bin/python bench/bench_alignment.py --quick    # V=5,000, d=256: a few seconds
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from tiebias.align.maps import METHODS, align_all  # noqa: E402
from tiebias.align.neighbours import knn_overlap  # noqa: E402

TIME_TARGET_S = 60.0
MEM_TARGET_MIB = 4096.0


class PeakRSS:
    """Context manager sampling this process's RSS every few milliseconds; ``peak_mib`` above entry."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.proc = psutil.Process(os.getpid())
        self.base = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self.base = self.peak = self.proc.memory_info().rss
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def peak_mib(self) -> float:
        return (self.peak - self.base) / 2**20


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Result, wall seconds and peak extra RSS (MiB) of one call."""
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
    return out, dt, mem.peak_mib


def run_phase(phase: str, vocab: int, dim: int, target_dim: int, seed: int, k: int,
              heldout: int) -> tuple[float, float, str]:
    """One timed step on freshly generated inputs; runs in its own process so peaks do not mix."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randn(vocab, dim, generator=gen)
    tgt = torch.randn(vocab, target_dim, generator=gen)
    methods = [m for m in METHODS if m != "identity" or dim == target_dim]
    if phase in METHODS:
        res, dt, mib = measure(lambda: align_all(src, tgt, [phase])[phase])
        return dt, mib, f"{res.mean:+.4f}"
    if phase in ("shared", "heldout"):
        folds = heldout if phase == "heldout" else 0
        res_all, dt, mib = measure(lambda: align_all(src, tgt, methods, heldout_folds=folds))
        return dt, mib, " ".join(f"{res_all[m].mean:+.4f}" for m in methods)
    if phase == "knn":
        (mean, _), dt, mib = measure(lambda: knn_overlap(src, tgt, k))
        return dt, mib, f"{mean:.4f}"
    raise ValueError(f"unknown phase {phase!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=50_000, help="rows (tokens), default 50000")
    ap.add_argument("--dim", type=int, default=2048, help="width of the source, default 2048")
    ap.add_argument("--target-dim", type=int, default=None, help="width of the target (default --dim)")
    ap.add_argument("--quick", action="store_true", help="small smoke run: V=5000, d=256")
    ap.add_argument("--k", type=int, default=10, help="neighbours for KNN overlap")
    ap.add_argument("--no-knn", action="store_true", help="skip the KNN overlap")
    ap.add_argument("--separate", action="store_true", help="also time each map on its own")
    ap.add_argument("--heldout", type=int, default=0, help="also time k-fold held-out alignment (k>=2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.quick:
        args.vocab, args.dim = 5000, 256
    tdim = args.target_dim or args.dim
    methods = [m for m in METHODS if m != "identity" or args.dim == tdim]
    phases = (list(methods) if args.separate else []) + ["shared"]
    phases += ["heldout"] if args.heldout else []
    phases += [] if args.no_knn else ["knn"]
    labels = {"shared": "all maps, shared (compare)", "heldout": f"all maps, {args.heldout}-fold held-out",
              "knn": f"knn@{args.k}"}

    print(f"V={args.vocab}  d_source={args.dim}  d_target={tdim}  float32  threads={torch.get_num_threads()}"
          f"  cpus={os.cpu_count()}  load(1m)={os.getloadavg()[0]:.1f}")
    print(f"inputs: {args.vocab * (args.dim + tdim) * 4 / 2**20:.0f} MiB, generated in each step's own "
          "process and excluded from the peaks", flush=True)
    rows: list[tuple[str, float, float, str]] = []
    ctx = mp.get_context("spawn")
    t_start = time.perf_counter()
    for phase in phases:
        with ctx.Pool(1) as pool:
            dt, mib, score = pool.apply(run_phase, (phase, args.vocab, args.dim, tdim, args.seed, args.k,
                                                    args.heldout))
        name = labels.get(phase, phase)
        rows.append((name, dt, mib, score))
        print(f"  {name}: {dt:.1f} s, {mib:.0f} MiB", flush=True)

    width = max(len(r[0]) for r in rows)
    print(f"\n{'step':<{width}}  {'seconds':>8}  {'peak MiB':>9}  score")
    for name, dt, mib, score in rows:
        print(f"{name:<{width}}  {dt:8.2f}  {mib:9.0f}  {score}")
    shared = rows[phases.index("shared")]
    sep = [r for r, p in zip(rows, phases, strict=True) if p in METHODS]
    sep_txt = f"{sum(r[1] for r in sep):.1f} s one by one (peak {max(r[2] for r in sep):.0f} MiB), " if sep else ""
    ok_t = shared[1] < TIME_TARGET_S
    ok_m = shared[2] < MEM_TARGET_MIB
    print(f"\nthree maps: {sep_txt}{shared[1]:.1f} s shared (peak {shared[2]:.0f} MiB)"
          f"  -> time {'OK' if ok_t else 'OVER'} (<{TIME_TARGET_S:.0f} s), "
          f"memory {'OK' if ok_m else 'OVER'} (<{MEM_TARGET_MIB:.0f} MiB)")
    print(f"bench wall time {time.perf_counter() - t_start:.0f} s, load(1m) now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
