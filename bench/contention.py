"""Training steps under load: how much slower a step gets when other processes compete for the cores.

Each measurement runs in a fresh process (OpenMP settings only take effect at start-up), for two
thread policies:

- ``fixed``: all cores (``TIEBIAS_THREADS`` = cores): what torch does out of the box;
- ``tiebias``: what the kit does: a :class:`tiebias.system.threads.ThreadTuner` choosing the thread count
  from measured steps;
- ``passive``: the tuner plus sleeping idle OpenMP workers (``OMP_WAIT_POLICY=PASSIVE``), for comparison.

and four conditions: quiet, next to one busy loop, next to two busy loops, and two trainings side by
side. Reported: median step time and its ratio to the same policy's quiet step. Usage::

    python bench/contention.py [--preset small] [--steps 40] [--policies fixed,tiebias]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

CONDITIONS = ("quiet", "1 busy loop", "2 busy loops", "2 trainings")
BUSY = "while True: pass"


def worker(preset: str, steps: int, policy: str, batch: int, seq: int) -> dict:
    """Train ``steps`` steps of a tied model on random tokens; median step time of the second half."""
    import statistics

    import torch

    from tiebias.models.build import build
    from tiebias.system.threads import ThreadTuner

    vocab = 4096  # the default profile's vocabulary
    model = build(preset, family="llama", tied=True, vocab_size=vocab, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    tuner = ThreadTuner() if policy in ("tiebias", "passive") else None
    g = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps):
        x = torch.randint(0, vocab, (batch, seq), generator=g)
        t0 = time.perf_counter()
        with tuner.step() if tuner else nullcontext():
            loss = model(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t0)
    half = times[len(times) // 2:]
    return {"median_s": statistics.median(half), "threads": torch.get_num_threads(),
            "choices": tuner.choices if tuner else []}


def _env(policy: str) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if policy in ("tiebias", "passive"):
        env["TIEBIAS_THREADS"] = "auto"
        if policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        else:
            env.pop("OMP_WAIT_POLICY", None)
    else:
        env.pop("OMP_WAIT_POLICY", None)
        env["TIEBIAS_THREADS"] = str(os.cpu_count() or 1)
    return env


def _spawn(args: argparse.Namespace, policy: str) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--worker", "--preset", args.preset, "--steps", str(args.steps),
           "--policies", policy, "--batch", str(args.batch), "--seq", str(args.seq)]
    return subprocess.Popen(cmd, env=_env(policy), stdout=subprocess.PIPE, text=True)


def measure(args: argparse.Namespace, policy: str, condition: str) -> float:
    """Median step time (s) of one training under one condition (the mean of two when side by side)."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(
        {"1 busy loop": 1, "2 busy loops": 2}.get(condition, 0))]
    try:
        procs = [_spawn(args, policy) for _ in range(2 if condition == "2 trainings" else 1)]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for b in busy:
            b.kill()
            b.wait()
    return sum(o["median_s"] for o in outs) / len(outs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--policies", default="fixed,tiebias")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.preset, args.steps, args.policies, args.batch, args.seq)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
    policies = args.policies.split(",")
    print(f"{args.preset}, batch {args.batch} x {args.seq}, {os.cpu_count()} cores; median step time of the "
          "second half of each run")
    print(f"{'policy':<9}" + "".join(f"{c:>22}" for c in CONDITIONS))
    for policy in policies:
        quiet = None
        cells = []
        for cond in CONDITIONS:
            t = measure(args, policy, cond)
            quiet = quiet or t
            cells.append(f"{t:.3f} s ({t / quiet:.1f}x)")
        print(f"{policy:<9}" + "".join(f"{c:>22}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
