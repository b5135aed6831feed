"""Training throughput: tiebias.train vs a bare PyTorch loop, provenance on vs off, and FLOP/s vs peak.

Ratios are measured in one process, interleaving the contenders over several rounds and taking the
median, so machine noise hits all of them alike. Usage::

    python bench/train_throughput.py [--preset small] [--steps 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from tiebias.models import build, count_parameters, get_preset
from tiebias.runs import Run
from tiebias.train import TrainConfig, batch_for_step, lr_at, train


def bare_loop(run: Run, cfg: TrainConfig, seed: int = 0) -> float:
    """The same model, batches, optimiser and schedule with nothing else: tokens per second."""
    tok = run.tokenizer()
    ids = run.tokens("train")
    model = build(cfg.preset, family=cfg.family, tied=True, vocab_size=len(tok), seed=seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=True)
    model.train()
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        x = batch_for_step(ids, step, seed, cfg.batch_size, cfg.seq_len)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        loss.item()
    return cfg.steps * cfg.batch_size * cfg.seq_len / (time.perf_counter() - t0)


def lib_loop(run: Run, cfg: TrainConfig, tag: str) -> float:
    """tiebias.train end to end (checkpoints, metrics, provenance as configured): tokens per second."""
    s = train(run, "tied", 0, cfg, progress=False, overwrite=True, resume=False)
    path = run.model_dir("tied", 0)
    import shutil

    shutil.rmtree(path)
    return s["tokens_per_second"]


def matmul_peak(n: int = 2048, reps: int = 10) -> float:
    """Achieved FLOP/s of a large float32 matmul: the practical peak of this machine."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Run.prepare(Path(tmp) / "bench", vocab_size=args.vocab)
        base = TrainConfig(preset=args.preset, steps=args.steps, eval_every=args.steps,
                           checkpoint_every=args.steps, warmup_steps=min(20, args.steps // 4))
        cfgs = {"bare loop": None, "tiebias.train, provenance off": replace(base, record_provenance=False),
                "tiebias.train, provenance on": base}
        results: dict[str, list[float]] = {k: [] for k in cfgs}
        bare_loop(run, replace(base, steps=5))  # warm-up
        for r in range(args.rounds):
            for name, cfg in cfgs.items():
                tps = bare_loop(run, base) if cfg is None else lib_loop(run, cfg, name)
                results[name].append(tps)
                print(f"round {r}: {name:32s} {tps:9.0f} tokens/s", flush=True)
        med = {k: statistics.median(v) for k, v in results.items()}
        m = build(args.preset, vocab_size=len(run.tokenizer()))
        n = count_parameters(m)
        p = get_preset(args.preset)
        flops_per_token = 6 * (n["non_embedding"] + n["embedding"]) + 12 * p.layers * p.hidden * base.seq_len
        peak = matmul_peak()
    print()
    print(f"preset {args.preset}, batch {base.batch_size} x {base.seq_len}, {args.steps} steps, "
          f"median of {args.rounds} rounds, torch threads {torch.get_num_threads()}")
    for k, v in med.items():
        print(f"  {k:32s} {v:9.0f} tokens/s   {v * flops_per_token / 1e9:6.1f} GFLOP/s")
    print(f"  library overhead   (bare / train, provenance off): {med['bare loop'] / med['tiebias.train, provenance off']:.3f}x")
    print(f"  provenance overhead (off / on):                   "
          f"{med['tiebias.train, provenance off'] / med['tiebias.train, provenance on']:.3f}x")
    print(f"  matmul peak (2048^2 float32): {peak / 1e9:.1f} GFLOP/s; training achieves "
          f"{med['tiebias.train, provenance on'] * flops_per_token / peak:.1%} of it")


if __name__ == "__main__":
    main()
