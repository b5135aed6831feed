"""Claim 2's proxy against tokens per measurement, as the README quotes it, printed from finished run folders.

    python scripts/proxy_tokens.py runs/exposure --steps 16 100 300 --times 1 4 16 [--windows RUN_A RUN_B ...]

The paper's hook saw one micro-batch of 8 x 4,096 tokens; the kit's sees a whole step (16 x 128 in the class and
default recipes). For the tied models of ``run`` (every seed, at each checkpoint of ``--steps``) it measures the output
share, exact and under the paper's proxy, on the same weights at the recipe's batch times each of ``--times``
(:func:`shares_at_tokens`), and with ``--windows`` it sets the training logs of runs trained
at different batch sizes side by side (window shares, exact and proxy). Mean and 95% interval over seeds.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch
from transformers import PreTrainedModel

from tiebias import stats
from tiebias.config.variants import Variant
from tiebias.run.files import read_json
from tiebias.run.folder import Run
from tiebias.train import windows
from tiebias.train.gradients import GradientProvenance
from tiebias.train.trainer import batch_for_step

SHOWN = ("exact l2", "proxy l2")


def shares_at_tokens(model: PreTrainedModel, ids: torch.Tensor, seq_len: int, batch_sizes: Sequence[int], *,
                     batches: int = 4, seed: int = 0) -> pd.DataFrame:
    """A tied model's output share under each metric on the same weights at several batch sizes (batch ``b`` drawn as
    step ``b`` of ``seed``): the proxy shrinks with the tokens one measurement sees, the exact split less."""
    if not batch_sizes or any(b < 1 for b in batch_sizes) or batches < 1:
        raise ValueError(f"batch_sizes: {list(batch_sizes)} and batches: {batches}; need one or more of each, each >= 1")
    rows = []
    for bs in batch_sizes:
        for b in range(batches):
            x = batch_for_step(ids, b, seed, bs, seq_len)
            model.zero_grad(set_to_none=True)
            with GradientProvenance(model) as gp:
                model(input_ids=x, labels=x).loss.backward()
                st = gp.pop()
            model.zero_grad(set_to_none=True)
            shares = windows.step_shares(pd.DataFrame([{"step": b, **st._asdict()}])).iloc[0]
            rows.append({"batch_size": bs, "tokens": bs * seq_len, "batch": b,
                         **{m: float(shares[m]) for m in windows.METRICS}})
    return pd.DataFrame(rows)


def _ci(values: list[float]) -> str:
    s = stats.summarise(values)
    return f"{s.mean:.1%} [{s.ci_low:.1%}, {s.ci_high:.1%}]"


def at_tokens(run: Run, steps: list[int | None], times: list[int], batches: int) -> None:
    """The share on the same weights at several batch sizes: a Markdown table, one row per checkpoint and size."""
    seeds = run.seeds("tied")
    if len(seeds) < 2:
        raise SystemExit(f"run: {run.path} has tied models for seeds {seeds}; need two or more for an interval")
    cfg = read_json(run.train_config_path("tied", seeds[0]), "train the run's tied models again")
    ids = run.tokens("validation")
    sizes = [cfg["batch_size"] * t for t in times]
    per: dict[tuple[int | None, int], dict[str, list[float]]] = {}
    for seed in seeds:
        for step in steps:
            model = run.load_model(Variant(True), seed, step)
            t = shares_at_tokens(model, ids, cfg["seq_len"], sizes, batches=batches, seed=seed)
            for bs, g in t.groupby("batch_size"):
                d = per.setdefault((step, int(bs)), {m: [] for m in SHOWN})
                for m in SHOWN:
                    d[m].append(float(g[m].mean()))
    print("| checkpoint (step) | tokens per measurement | exact l2 | proxy l2 (paper's metric) | proxy minus exact |")
    print("|---|---|---|---|---|")
    for (step, bs), d in per.items():
        diff = [p - e for p, e in zip(d["proxy l2"], d["exact l2"], strict=True)]
        s = stats.summarise(diff)
        print(f"| {step if step is not None else cfg['steps']} | {bs * cfg['seq_len']:,} ({bs} x {cfg['seq_len']}) | "
              f"{_ci(d['exact l2'])} | {_ci(d['proxy l2'])} | {s.mean * 100:+.1f} points "
              f"[{s.ci_low * 100:+.1f}, {s.ci_high * 100:+.1f}] |")


def trained_at(runs: list[Run]) -> None:
    """The training logs' window shares of runs trained at different batch sizes: a Markdown table."""
    print("| batch (tokens per step) | window (steps) | exact l2 | proxy l2 (paper's metric) | proxy minus exact |")
    print("|---|---|---|---|---|")
    for run in runs:
        seeds = run.seeds("tied")
        cfg = read_json(run.train_config_path("tied", seeds[0]), "train the run's tied models again")
        logs = {s: run.metrics(Variant(True), s) for s in seeds}
        t = windows.window_shares(logs, cfg["steps"], cfg["warmup_steps"])
        per_model = {s: windows.step_shares(m) for s, m in logs.items()}
        for w, g in t.groupby("window", sort=False):
            g = g.set_index("metric")
            lo, hi = int(g.loc["exact l2"].first_step), int(g.loc["exact l2"].last_step)
            diff = [float(((p := per_model[s][(per_model[s].step >= lo) & (per_model[s].step <= hi)])["proxy l2"]
                           - p["exact l2"]).mean()) for s in seeds]
            d = stats.summarise(diff)
            print(f"| {cfg['batch_size']} x {cfg['seq_len']} = {cfg['batch_size'] * cfg['seq_len']:,} | {w} ({lo}-{hi}) "
                  f"| {_ci([g.loc['exact l2', f'share_{s}'] for s in seeds])} "
                  f"| {_ci([g.loc['proxy l2', f'share_{s}'] for s in seeds])} "
                  f"| {d.mean * 100:+.1f} points [{d.ci_low * 100:+.1f}, {d.ci_high * 100:+.1f}] |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder with tied models of two or more seeds")
    ap.add_argument("--steps", type=int, nargs="*", default=[], help="checkpoints to measure (default: the final models)")
    ap.add_argument("--times", type=int, nargs="+", default=[1, 4, 16], help="batch sizes as multiples of the recipe's")
    ap.add_argument("--batches", type=int, default=4, help="measurements per batch size and model")
    ap.add_argument("--windows", type=Path, nargs="*", default=[], help="runs trained at other batch sizes")
    args = ap.parse_args(argv)
    at_tokens(Run(args.run), list(args.steps) or [None], args.times, args.batches)
    if args.windows:
        print()
        trained_at([Run(p) for p in args.windows])


if __name__ == "__main__":
    main()
