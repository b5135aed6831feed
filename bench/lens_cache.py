"""What the lens activation cache buys: one lens ladder trained with and without it, as a time ratio.

A ladder (``lens.ladder.train_ladder``) may compute the frozen model's hidden states and target statistics once and
replay them at every step, instead of running the model each step; the lenses are the same bit for bit. Measured here
as the ratio of wall times, no cache / cache (the cache's build included), interleaving the two over several rounds
and taking the median, so machine noise hits both alike. The token stream is sized so that training draws each
sequence ``--visits`` times (the default profile draws each about 2.2 times; below 1.5 no cache is built), on one
thread as each of a study's two side-by-side lens workers.

Measured on the shared 2-core machine under heavy load (load average 12 to 19), three interleaved rounds each:
smoke-sized (tiny preset, vocab 1024, seq_len 64, 20 steps x 256 tokens, two rungs, 72 sequences drawn 160 times):
no cache / cache = 2.92, 1.34, 1.64, median 1.64; default-sized (small, vocab 4096, seq_len 128, 50 steps x 512
tokens, 181 sequences drawn 400 times): 8.62, 1.84, 7.77, median 7.77. The cache (about 170 lines) is kept.
Usage::

    python bench/lens_cache.py [--preset small] [--vocab 4096] [--seq-len 128] [--steps 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from tiebias.config.lens import LensSettings
from tiebias.lens import ladder
from tiebias.models.build import build


def ladder_seconds(model: torch.nn.Module, tokens: torch.Tensor, settings: LensSettings, cache: bool) -> float:
    """Wall time of one two-rung ladder, trained into a fresh folder, with or without the activation cache."""
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        ladder.train_ladder(model, tokens, folder, settings, progress=False, max_cache_bytes=(1 << 30) if cache else 0,
                           num_threads=None)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--tokens-per-step", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--visits", type=float, default=2.2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a study's lens workers run on 1 each)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    settings = LensSettings(steps=args.steps, tokens_per_step=args.tokens_per_step, eval_tokens=args.seq_len,
                            seq_len=args.seq_len, budgets=(1, 2))
    draws = 2 * args.steps * (args.tokens_per_step // args.seq_len)
    n_seq = max(1, int(draws / args.visits))
    model = build(args.preset, vocab_size=args.vocab, seed=0).eval()
    tokens = torch.randint(0, args.vocab, (n_seq * args.seq_len,), generator=torch.Generator().manual_seed(0))
    ladder_seconds(model, tokens, settings, cache=False)  # warm-up: allocator, kernels
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for cache in (False, True) if r % 2 == 0 else (True, False):
            times[cache].append(ladder_seconds(model, tokens, settings, cache))
        print(f"round {r + 1}: no cache {times[False][-1]:.2f} s, cache {times[True][-1]:.2f} s")
    ratio = statistics.median(a / b for a, b in zip(times[False], times[True], strict=True))
    print(f"{args.preset}, vocab {args.vocab}, {n_seq} sequences of {args.seq_len} drawn {draws} times: "
          f"no cache / cache = {ratio:.2f} (median of {args.rounds} interleaved rounds)")


if __name__ == "__main__":
    main()
