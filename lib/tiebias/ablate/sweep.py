"""Claim 4's sweep (paper Tables 2, 6, 7) over seeds: tied models whose input-path gradient is multiplied by k, beside
the untied reference of each seed."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from tiebias.align import embeddings, maps
from tiebias.config.training import check_factor, factors_problem
from tiebias.config.variants import Variant, parse_key
from tiebias.run.folder import Run
from tiebias.train import divergence
from tiebias.train.sweeps import train_many
from tiebias.train.trainer import TrainConfig, evaluate_loss


def check_factors(factors: Any, name: str = "factors", minimum: int = 1) -> list[float]:
    """Gradient factors, each checked by :func:`tiebias.config.training.check_factor`, ascending.

    Args:
        factors: a sequence of numbers.
        name: the parameter named in error messages.
        minimum: the fewest factors allowed.

    Returns:
        The factors as floats, ascending.
    """
    try:
        items = list(factors)
    except TypeError:
        raise ValueError(f"{name}: {factors!r} is not a list of numbers (e.g. [1, 2, 5, 10])") from None
    out = [check_factor(name, f) for f in items]
    if why := factors_problem(out, minimum):
        raise ValueError(f"{name}: {items!r} is not allowed; {why}")
    return sorted(out)


def sweep_variants(factors: Iterable[float], *, inverse_output: bool = False) -> list[Variant]:
    """Tied variants for input factors k (k = 1 is the plain tied model).

    Args:
        factors: the input-gradient factors.
        inverse_output: also multiply the output path's gradient by 1/k.

    Returns:
        One tied variant per factor, ascending k (the untied reference is not among them).
    """
    return [Variant(True, k, 1.0 / k if inverse_output else 1.0) for k in check_factors(list(factors))]


def _sweep_models(variants: Sequence[Variant], seeds: Sequence[int]) -> list[tuple[Variant, int]]:
    """Every model of a sweep: the tied variants and the untied reference of each seed."""
    return [(v, seed) for seed in seeds for v in [*variants, Variant(False)]]


def estimate_seconds(run: Run, cfg: TrainConfig, n_models: int, probe_steps: int = 3) -> float:
    """Estimated training time of ``n_models`` new models, from the run's models of the same shape or a timed probe."""
    from tiebias.models.build import build
    from tiebias.run.files import OVERWRITE_HINT, read_json
    from tiebias.train.trainer import batch_for_step

    rates = []
    for key in run.models().query("complete").key:
        s = run.summary(*parse_key(key))
        if not s.get("tokens_per_second"):
            continue
        c = read_json(run.train_config_path(*parse_key(key)), f"restore it, or retrain {key} ({OVERWRITE_HINT})")
        if all(c.get(k) == getattr(cfg, k) for k in ("preset", "family", "batch_size", "seq_len")):
            rates.append(s["tokens_per_second"])
    if rates:
        tps = float(np.median(rates))
    else:
        model = build(cfg.preset, family=cfg.family, vocab_size=run.config["tokenizer_size"])
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        x = batch_for_step(run.tokens("train"), 0, 0, cfg.batch_size, cfg.seq_len)
        model(input_ids=x, labels=x).loss.backward()  # warm-up
        t0 = time.perf_counter()
        for _ in range(probe_steps):
            opt.zero_grad()
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
        tps = probe_steps * cfg.batch_size * cfg.seq_len / (time.perf_counter() - t0)
    return n_models * cfg.steps * cfg.batch_size * cfg.seq_len / tps


def plan(run: Run, variants: Sequence[Variant], seeds: Sequence[int], cfg: TrainConfig,
         budget_minutes: float | None = None) -> pd.DataFrame:
    """Which models the sweep needs, which the run has, and the time estimate (warns when over ``budget_minutes``).

    Args:
        run, variants, seeds, cfg: the run, the tied variants (the untied reference is added), seeds and recipe.
        budget_minutes: the budget warned about (None: never).

    Returns:
        One row per model with ``trained``; ``attrs["to_train"]`` and ``attrs["estimated_seconds"]``.
    """
    df = pd.DataFrame([{"variant": v.name, "seed": seed, "input_factor": v.input_factor,
                        "output_factor": v.output_factor, "trained": run.is_complete(v, seed)}
                       for v, seed in _sweep_models(variants, seeds)]).drop_duplicates(["variant", "seed"])
    todo = int((~df.trained).sum())
    est = estimate_seconds(run, cfg, todo) if todo else 0.0
    df.attrs["estimated_seconds"] = est
    df.attrs["to_train"] = todo
    if budget_minutes is not None and est > 60 * budget_minutes:
        warnings.warn(f"ablation sweep: {todo} models to train, estimated {est / 60:.1f} min, over the budget of "
                      f"{budget_minutes:g} min; reduce factors, seeds or steps", stacklevel=2)
    return df


def run_sweep(run: Run, variants: Sequence[Variant], seeds: Sequence[int], cfg: TrainConfig,
              progress: bool = True, overwrite: bool = False) -> list[dict]:
    """Train every missing model of the sweep, the untied reference of each seed added.

    Args:
        run, variants, seeds, cfg: the run, the tied variants, the seeds and the recipe.
        progress, overwrite: progress bars; retrain a model made with another config.

    Returns:
        One training summary per model (:func:`tiebias.train.sweeps.train_many`).
    """
    return train_many(run, _sweep_models(variants, seeds), cfg, progress=progress, overwrite=overwrite)


def common_steps(run: Run, variants: Sequence[Variant], seeds: Sequence[int]) -> list[int]:
    """Checkpoint steps present for every tied variant and the untied reference of every seed.

    Args:
        run, variants, seeds: the run, the sweep's tied variants and its seeds.

    Returns:
        The shared checkpoint steps, ascending.
    """
    sets = [{s for s, _ in run.checkpoints(v, seed)} for v, seed in _sweep_models(variants, seeds)]
    return sorted(set.intersection(*sets)) if sets else []


def compared_steps(steps: Sequence[int], most: int = 4) -> list[int]:
    """The final step and up to ``most - 1`` earlier ones in its last 7/8 (earlier ones are mostly the initialisation).

    Args:
        steps, most: the available checkpoint steps; the most steps returned.

    Returns:
        The chosen steps, ascending; step 0 is never chosen.
    """
    steps = sorted(steps)
    picked = sorted({s for s in steps if s > 0 and s >= steps[-1] // 8}) if steps else []
    return picked[-most:]


def alignment_table(run: Run, variants: Sequence[Variant], seeds: Sequence[int], *,
                    steps: Sequence[int | None] = (None,), methods: Sequence[str] = ("orthogonal", "linear"),
                    heldout_folds: int = 0, reference: str = "same") -> pd.DataFrame:
    """Per (k, seed, step, method), as Table 2: cosine of the untied input and output matrices mapped onto the tied one.

    Args:
        run, variants, seeds: the sweep's run (diverged models refused), tied variants and seeds.
        steps, methods, heldout_folds: checkpoint steps (None: final), alignment maps, 0 (in-sample) or k >= 2 folds.
        reference: ``"same"`` (the same seed's untied model) or ``"cross"`` (the next seed's).

    Returns:
        ``variant``, ``k``, ``output_factor``, ``seed``, ``reference_seed``, ``step``, ``method``,
        ``vs_untied_input``, ``vs_untied_output``.
    """
    if reference not in ("same", "cross"):
        raise ValueError(f"reference: unknown value {reference!r}; allowed: 'same', 'cross'")
    seeds = list(seeds)
    if reference == "cross" and len(seeds) < 2:
        raise ValueError(f"reference: 'cross' needs at least two seeds, got {seeds}")
    divergence.check_models(run, _sweep_models(variants, seeds), "claim 4's alignment")
    rows = []
    for i, seed in enumerate(seeds):
        ref_seed = seed if reference == "same" else seeds[(i + 1) % len(seeds)]
        for step in steps:
            ref = embeddings.from_run(run, Variant(False), ref_seed, step)
            for v in variants:
                if not v.tied:
                    raise ValueError(f"variant: {v.name!r} is not a tied model")
                tied = embeddings.from_run(run, v, seed, step)
                res_in = maps.align_all(ref.input, tied.input, methods, heldout_folds=heldout_folds)
                res_out = maps.align_all(ref.output, tied.input, methods, heldout_folds=heldout_folds)
                for m in methods:
                    rows.append({"variant": v.name, "k": v.input_factor, "output_factor": v.output_factor,
                                 "seed": seed, "reference_seed": ref_seed,
                                 "step": step if step is not None else int(run.summary(v, seed)["steps"]),
                                 "method": m, "vs_untied_input": res_in[m].mean,
                                 "vs_untied_output": res_out[m].mean})
    return pd.DataFrame(rows)


def perplexities(run: Run, variants: Sequence[Variant], seeds: Sequence[int], *, seq_len: int,
                 max_tokens: int = 32768, splits: Sequence[str] = ("validation", "test")) -> pd.DataFrame:
    """Perplexity of every final model (tied variants and untied) on held-out splits (Table 7 analog).

    Args:
        run, variants, seeds: the sweep's run (diverged models refused), tied variants and seeds.
        seq_len, max_tokens, splits: the evaluation's sequence length, most tokens per split, the splits.

    Returns:
        One row per model: ``variant``, ``k`` (NaN for untied), ``tied``, ``seed``, ``<split>_loss`` (nats),
        ``<split>_ppl``.
    """
    divergence.check_models(run, _sweep_models(variants, seeds), "a perplexity")
    rows = []
    data = {s: run.tokens(s) for s in splits}
    for v, seed in _sweep_models(variants, seeds):
        model = run.load_model(v, seed)
        row: dict[str, Any] = {"variant": v.name, "k": v.input_factor if v.tied else math.nan, "tied": v.tied,
                               "seed": seed}
        for s, ids in data.items():
            loss = evaluate_loss(model, ids, seq_len=seq_len, max_tokens=max_tokens)
            row[f"{s}_loss"] = loss
            row[f"{s}_ppl"] = math.exp(loss)
        rows.append(row)
    return pd.DataFrame(rows)


def gradient_shares(run: Run, variants: Sequence[Variant], seeds: Sequence[int]) -> pd.DataFrame:
    """Mean output share of the applied embedding gradient per (k, seed): does scaling rebalance the paths?

    Args:
        run, variants, seeds: the run (diverged models refused), the tied variants and seeds.

    Returns:
        ``variant``, ``k``, ``seed``, ``output_share`` (mean over logged steps), ``median_out_in_ratio``.
    """
    divergence.check_models(run, [(v, seed) for seed in seeds for v in variants], "a gradient share")
    rows = []
    for seed in seeds:
        for v in variants:
            m = run.metrics(v, seed)
            rows.append({"variant": v.name, "k": v.input_factor, "seed": seed,
                         "output_share": float(m.output_share.mean()),
                         "median_out_in_ratio": float((m.output_norm / m.input_norm).median())})
    return pd.DataFrame(rows)
