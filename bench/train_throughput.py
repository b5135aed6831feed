"""Training throughput: tiebias.train.trainer vs a bare PyTorch loop, provenance on vs off, FLOP/s vs peak,
eager vs torch.compile, glibc's allocator defaults vs freed memory kept (tiebias.system.alloc), one model at a
time vs two side by side (tiebias.train.sweeps), where a step's time goes, and step time alone vs next to
other processes.

Ratios are measured in one run, interleaving the contenders over several rounds and taking the
median, so machine noise hits all of them alike. Usage::

    python bench/train_throughput.py [--preset small] [--steps 100] [--rounds 3] [--no-compile] [--no-load]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from tiebias.config.presets import get_preset
from tiebias.models.build import build, count_parameters
from tiebias.run.folder import Run
from tiebias.system.alloc import MALLOC_ENV, kept_heap
from tiebias.train.sweeps import train_many
from tiebias.train.trainer import TrainConfig, batch_for_step, checkpoint_steps, lr_at, train


def bare_loop(run: Run, cfg: TrainConfig, seed: int = 0, compiled: bool = False, heap: str = "keep") -> float:
    """The same model, batches, optimiser and schedule with nothing else: tokens per second.

    ``compiled``: the model goes through ``torch.compile`` (inductor); the rate is taken over the steps
    after the first two (which pay for compilation), and the compile time is printed. ``heap``: ``keep``
    runs the loop in :func:`tiebias.system.alloc.kept_heap` as the kit's loops do, ``default`` with glibc's defaults.
    """
    before = os.environ.get(MALLOC_ENV)
    os.environ[MALLOC_ENV] = heap
    try:
        with kept_heap():
            return _bare_steps(run, cfg, seed, compiled)
    finally:
        if before is None:
            os.environ.pop(MALLOC_ENV)
        else:
            os.environ[MALLOC_ENV] = before


def _bare_steps(run: Run, cfg: TrainConfig, seed: int, compiled: bool) -> float:
    """The loop of :func:`bare_loop`."""
    tok = run.tokenizer()
    ids = run.tokens("train")
    model = build(cfg.preset, family=cfg.family, tied=True, vocab_size=len(tok), seed=seed)
    fwd = torch.compile(model) if compiled else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=True)
    model.train()
    skip = 2 if compiled else 0
    t_start = t0 = time.perf_counter()
    for step in range(cfg.steps + skip):
        if step == skip:
            if compiled:
                print(f"    torch.compile: first {skip} steps (compilation) took {time.perf_counter() - t_start:.0f} s",
                      flush=True)
            t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        x = batch_for_step(ids, step, seed, cfg.batch_size, cfg.seq_len)
        loss = fwd(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        loss.item()
    return cfg.steps * cfg.batch_size * cfg.seq_len / (time.perf_counter() - t0)


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def profile_split(run: Run, cfg: TrainConfig, steps: int = 3) -> list[tuple[str, float]]:
    """Share of a training step's CPU time per operator (torch profiler, self time), matmuls first."""
    from torch.profiler import ProfilerActivity, profile

    model = build(cfg.preset, family=cfg.family, tied=True, vocab_size=len(run.tokenizer()), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, foreach=True)
    ids = run.tokens("train")

    def step(i: int) -> None:
        x = batch_for_step(ids, i, 0, cfg.batch_size, cfg.seq_len)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()

    with kept_heap():  # as the kit's loops run
        for i in range(2):
            step(i)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(steps):
                step(2 + i)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    shares = sorted(((e.key, e.self_cpu_time_total / total) for e in events), key=lambda kv: -kv[1])
    return [("matmuls (" + ", ".join(MATMULS) + ")", sum(v for k, v in shares if k in MATMULS))] + [
        kv for kv in shares if kv[0] not in MATMULS]


def lib_loop(run: Run, cfg: TrainConfig) -> tuple[float, float]:
    """tiebias.train.trainer: tokens/s end to end (with evaluation and checkpoint I/O) and of the training steps alone.

    The step-only rate leaves out the step intervals that contain an evaluation or a checkpoint write
    (they land in the interval after the step that triggered them).
    """
    s = train(run, "tied", 0, cfg, progress=False, overwrite=True, resume=False)
    m = run.metrics("tied", 0)
    dt = m.elapsed_s.diff().iloc[1:]
    busy = set(checkpoint_steps(cfg.steps, cfg.checkpoint_every)) | {x for x in m.step if x % cfg.eval_every == 0}
    keep = [i for i, step in zip(dt.index, m.step.iloc[1:], strict=True) if step - 1 not in busy]
    step_only = len(keep) * cfg.batch_size * cfg.seq_len / dt.loc[keep].sum()
    shutil.rmtree(run.model_dir("tied", 0))
    return s["tokens_per_second"], step_only


def side_by_side(run: Run, cfg: TrainConfig, workers: int) -> float:
    """Two models (tied and untied, seed 0) trained by :func:`tiebias.train.sweeps.train_many`: tokens per second, both together."""
    t0 = time.perf_counter()
    train_many(run, [("tied", 0), ("untied", 0)], cfg, workers=workers, progress=False, overwrite=True, resume=False)
    dt = time.perf_counter() - t0
    for v in ("tied", "untied"):
        shutil.rmtree(run.model_dir(v, 0))
    return 2 * cfg.steps * cfg.batch_size * cfg.seq_len / dt


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
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile comparison")
    ap.add_argument("--no-load", action="store_true", help="skip the step times next to other processes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Run.prepare(Path(tmp) / "bench", vocab_size=args.vocab)
        # the default profile's evaluation and checkpoint cadence, so "end to end" is what a study pays
        base = TrainConfig(preset=args.preset, steps=args.steps, eval_every=100, eval_tokens=8192,
                           checkpoint_every=50, warmup_steps=min(20, args.steps // 4))
        cfgs = {"bare loop": None, "tiebias.train.trainer, provenance off": replace(base, record_provenance=False),
                "tiebias.train.trainer, provenance on": base}
        cfgs["bare loop, glibc allocator defaults"] = "default heap"
        if not args.no_compile:
            cfgs["bare loop, torch.compile"] = "compiled"
        cfgs["two models one at a time (2 threads)"] = 1
        cfgs["two models side by side (1 thread each)"] = 2
        results: dict[str, list[float]] = {k: [] for k in cfgs}
        results.update({f"{k}, steps only": [] for k, c in cfgs.items() if isinstance(c, TrainConfig)})
        bare_loop(run, replace(base, steps=5))  # warm-up
        for r in range(args.rounds):
            for name, cfg in cfgs.items():
                if cfg is None or cfg == "compiled":
                    results[name].append(bare_loop(run, base, compiled=cfg == "compiled"))
                elif cfg == "default heap":
                    results[name].append(bare_loop(run, base, heap="default"))
                elif isinstance(cfg, int):
                    results[name].append(side_by_side(run, base, cfg))
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
        split = profile_split(run, base)
    print()
    print(f"preset {args.preset}, batch {base.batch_size} x {base.seq_len}, {args.steps} steps, "
          f"median of {args.rounds} rounds, torch threads {torch.get_num_threads()}")
    for k, v in med.items():
        print(f"  {k:32s} {v:9.0f} tokens/s   {v * flops_per_token / 1e9:6.1f} GFLOP/s")
    off, on = "tiebias.train.trainer, provenance off", "tiebias.train.trainer, provenance on"
    print(f"  library overhead, training steps (bare / train, provenance off): "
          f"{med['bare loop'] / med[off + ', steps only']:.3f}x")
    print(f"  library overhead, end to end incl. evaluation + checkpoints:     {med['bare loop'] / med[off]:.3f}x")
    print(f"  provenance overhead, training steps (off / on):                  "
          f"{med[off + ', steps only'] / med[on + ', steps only']:.3f}x")
    print(f"  provenance overhead, end to end (off / on):                      {med[off] / med[on]:.3f}x")
    print(f"  matmul peak (2048^2 float32): {peak / 1e9:.1f} GFLOP/s; training achieves "
          f"{med['tiebias.train.trainer, provenance on'] * flops_per_token / peak:.1%} of it")
    print(f"  freed memory kept (tiebias.system.alloc) vs glibc's defaults, bare loop: "
          f"{med['bare loop'] / med['bare loop, glibc allocator defaults']:.3f}x")
    print(f"  two models side by side vs one at a time (tiebias.train.sweeps.train_many, end to end): "
          f"{med['two models side by side (1 thread each)'] / med['two models one at a time (2 threads)']:.3f}x")
    if "bare loop, torch.compile" in med:
        print(f"  torch.compile (inductor) vs eager, bare loop, after compilation: "
              f"{med['bare loop, torch.compile'] / med['bare loop']:.3f}x")
    print("  where a step's time goes (torch profiler, self CPU time, 3 steps):")
    for name, share in split[:8]:
        print(f"    {share:6.1%}  {name}")
    if not args.no_load:
        load_table(args.preset)


def load_table(preset: str) -> None:
    """Step time alone and next to other CPU-bound processes, torch's default threads vs the kit's tuner."""
    import contention

    ns = argparse.Namespace(preset=preset, steps=16, batch=16, seq=128)
    print("  step time next to other processes (bench/contention.py, median of the last 8 of 16 steps):")
    quiet = {}
    for policy in ("fixed", "tiebias"):
        cells = []
        for cond in contention.CONDITIONS:
            t = contention.measure(ns, policy, cond)
            quiet.setdefault(policy, t)
            cells.append(f"{cond} {t:.3f} s ({t / quiet['fixed']:.1f}x)")
        print(f"    {policy:8s} " + "; ".join(cells), flush=True)
    print("    (ratios to the quiet step with torch's default threads)")


if __name__ == "__main__":
    main()
