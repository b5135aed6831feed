"""Training throughput: tiebias.train vs a bare PyTorch loop, provenance on vs off, and FLOP/s vs peak.

Ratios are measured in one process, interleaving the contenders over several rounds and taking the
median, so machine noise hits all of them alike. Usage::

    python bench/train_throughput.py [--preset small] [--steps 100] [--rounds 3]
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
from tiebias.steploop import batch_for_step, checkpoint_steps, lr_at
from tiebias.train import TrainConfig, train


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


def lib_loop(run: Run, cfg: TrainConfig) -> tuple[float, float]:
    """tiebias.train: tokens/s end to end (with evaluation and checkpoint I/O) and of the training steps alone.

    The step-only rate leaves out the step intervals that contain an evaluation or a checkpoint write
    (they land in the interval after the step that triggered them).
    """
    import shutil

    s = train(run, "tied", 0, cfg, progress=False, overwrite=True, resume=False)
    m = run.metrics("tied", 0)
    dt = m.elapsed_s.diff().iloc[1:]
    busy = set(checkpoint_steps(cfg.steps, cfg.checkpoint_every)) | {x for x in m.step if x % cfg.eval_every == 0}
    keep = [i for i, step in zip(dt.index, m.step.iloc[1:], strict=True) if step - 1 not in busy]
    step_only = len(keep) * cfg.batch_size * cfg.seq_len / dt.loc[keep].sum()
    shutil.rmtree(run.model_dir("tied", 0))
    return s["tokens_per_second"], step_only


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
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Run.prepare(Path(tmp) / "bench", vocab_size=args.vocab)
        # the default profile's evaluation and checkpoint cadence, so "end to end" is what a study pays
        base = TrainConfig(preset=args.preset, steps=args.steps, eval_every=100, eval_tokens=8192,
                           checkpoint_every=50, warmup_steps=min(20, args.steps // 4))
        cfgs = {"bare loop": None, "tiebias.train, provenance off": replace(base, record_provenance=False),
                "tiebias.train, provenance on": base}
        results: dict[str, list[float]] = {k: [] for k in cfgs}
        results.update({f"{k}, steps only": [] for k, c in cfgs.items() if c is not None})
        bare_loop(run, replace(base, steps=5))  # warm-up
        for r in range(args.rounds):
            for name, cfg in cfgs.items():
                if cfg is None:
                    results[name].append(bare_loop(run, base))
                else:
                    end_to_end, steps_only = lib_loop(run, cfg)
                    results[name].append(end_to_end)
                    results[f"{name}, steps only"].append(steps_only)
                print(f"round {r}: {name:32s} {results[name][-1]:9.0f} tokens/s", flush=True)
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
    off, on = "tiebias.train, provenance off", "tiebias.train, provenance on"
    print(f"  library overhead, training steps (bare / train, provenance off): "
          f"{med['bare loop'] / med[off + ', steps only']:.3f}x")
    print(f"  library overhead, end to end incl. evaluation + checkpoints:     {med['bare loop'] / med[off]:.3f}x")
    print(f"  provenance overhead, training steps (off / on):                  "
          f"{med[off + ', steps only'] / med[on + ', steps only']:.3f}x")
    print(f"  provenance overhead, end to end (off / on):                      {med[off] / med[on]:.3f}x")
    print(f"  matmul peak (2048^2 float32): {peak / 1e9:.1f} GFLOP/s; training achieves "
          f"{med['tiebias.train, provenance on'] * flops_per_token / peak:.1%} of it")


if __name__ == "__main__":
    main()
