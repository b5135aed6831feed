"""What recording the paper's proxy costs: training steps under GradientProvenance with and without it.

The proxy (claim 2's paper metric, :mod:`tiebias.train.gradients`) is one more autograd node on the embedding
lookup's output and two reductions over its gradient, plus the L1 norms of both paths. Measured here as the ratio of
step times, proxy off / on, interleaving the two over several rounds and taking the median, so machine noise hits
both alike. Usage::

    python bench/proxy_cost.py [--preset small] [--vocab 4096] [--steps 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tiebias.models.build import build
from tiebias.train.gradients import GradientProvenance


def steps_per_second(preset: str, vocab: int, steps: int, proxy: bool, batch: int = 16, seq_len: int = 128) -> float:
    """Optimiser steps per second of a tied model under provenance (recording on), with or without the proxy."""
    torch.manual_seed(0)
    model = build(preset, vocab_size=vocab, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    with GradientProvenance(model, proxy=proxy) as prov:
        for i in range(steps + 2):
            if i == 2:  # the first two steps warm up the allocator and kernels
                t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(input_ids=x, labels=x).loss.backward()
            prov.pop()
            opt.step()
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rates: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for proxy in (False, True):
            rates[proxy].append(steps_per_second(args.preset, args.vocab, args.steps, proxy))
            print(f"round {r}: proxy {'on ' if proxy else 'off'} {rates[proxy][-1]:.2f} steps/s", flush=True)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"preset {args.preset}, vocabulary {args.vocab}, {args.steps} steps x {args.rounds} rounds, "
          f"torch threads {torch.get_num_threads()}")
    print(f"  proxy overhead, training steps (off / on): {off / on:.3f}x")


if __name__ == "__main__":
    main()
