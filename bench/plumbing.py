"""What the CPU speed-up plumbing buys on this machine now, as speed-up ratios measured in one process with
``--reps`` interleaved repetitions (a busy machine's load hits every contender alike; the spread is printed):

- thread tuner: a training loop next to a second training (another process, all the time), with the kit's
  :class:`ThreadTuner` vs torch's default threads (median step time of each loop's second half);
- side by side: two training loops through :func:`tiebias.system.parallel.side_by_side`, one thread each, vs one
  after the other with the default threads (wall time for both);
- allocator: the training loop in :func:`tiebias.system.alloc.kept_heap` vs glibc's defaults.

The loop is ``bench/train_throughput.py``'s bare loop (random tokens). Usage::

    python bench/plumbing.py [--preset mini] [--steps 16] [--reps 3] [--no-rival] [--only tuner,side,alloc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext

import torch

from tiebias.models.build import build

VOCAB, BATCH, SEQ = 4096, 16, 128


def loop(preset: str, steps: int, tuner: bool = False, heap: str = "keep") -> float:
    """Median step time (s) of the second half of ``steps`` training steps on random tokens."""
    from tiebias.system.alloc import MALLOC_ENV, kept_heap
    from tiebias.system.threads import ThreadTuner

    os.environ[MALLOC_ENV] = heap
    model = build(preset, family="llama", tied=True, vocab_size=VOCAB, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    g, times = torch.Generator().manual_seed(0), []
    with kept_heap():
        t = ThreadTuner() if tuner else None
        for _ in range(steps):
            x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
            t0 = time.perf_counter()
            with t.step() if t else nullcontext():
                loss = model(input_ids=x, labels=x).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            times.append(time.perf_counter() - t0)
    os.environ[MALLOC_ENV] = "keep"
    return statistics.median(times[steps // 2:])


def tuner_ratio(preset: str, steps: int) -> float:
    before = torch.get_num_threads()
    default = loop(preset, steps)
    tuned = loop(preset, steps, tuner=True)
    torch.set_num_threads(before)
    return default / tuned


def side_ratio(preset: str, steps: int) -> float:
    from tiebias.system.parallel import side_by_side

    t0 = time.perf_counter()
    side_by_side([lambda stop: loop(preset, steps)] * 2, 1)
    one = time.perf_counter() - t0
    t0 = time.perf_counter()
    side_by_side([lambda stop: loop(preset, steps)] * 2, 2)
    return one / (time.perf_counter() - t0)


def alloc_ratio(preset: str, steps: int) -> float:
    return loop(preset, steps, heap="default") / loop(preset, steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-rival", action="store_true", help="no second training next to the tuner's loops")
    ap.add_argument("--only", default="tuner,side,alloc", help="which of tuner, side, alloc to measure")
    ap.add_argument("--rival", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rival:  # the second training: runs until killed
        while True:
            loop(args.preset, 50)
    rival = None if args.no_rival else subprocess.Popen(
        [sys.executable, __file__, "--rival", "--preset", args.preset])
    parts = {"thread tuner vs default threads, next to a second training": tuner_ratio,
             "two loops side by side (1 thread each) vs one after the other": side_ratio,
             "freed memory kept vs glibc's defaults": alloc_ratio}
    parts = {k: f for k, f in parts.items() if f.__name__.split("_")[0] in args.only.split(",")}
    ratios: dict[str, list[float]] = {k: [] for k in parts}
    try:
        loop(args.preset, 3)  # warm-up
        for r in range(args.reps):
            for name, measure in parts.items():
                ratios[name].append(measure(args.preset, args.steps))
                print(f"rep {r}: {name}: {ratios[name][-1]:.3f}x", flush=True)
    finally:
        if rival is not None:
            rival.kill()
            rival.wait()
    print(f"\n{args.preset}, batch {BATCH} x {SEQ}, {args.steps} steps per loop, {args.reps} interleaved repetitions, "
          f"{os.cpu_count()} cores; speed-up ratios (> 1: the plumbing is faster)")
    for k, v in ratios.items():
        print(f"  {k:62s} median {statistics.median(v):.3f}x  (spread {min(v):.3f} - {max(v):.3f})")


if __name__ == "__main__":
    main()
