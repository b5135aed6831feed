"""Tuned-lens study over a run (notebook 03): one lens per model, per-layer KL tables, tied-untied gaps.

Lenses are trained on the validation split (text the models never trained on) and evaluated on the
test split (held-out works), so neither the models nor the lenses saw the evaluation text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from . import lens as tl
from .runs import Run, Variant


def lens_dir(run: Run, variant: str | Variant, seed: int):
    """Where a model's lens lives: ``models/<variant>-s<seed>/lens/``."""
    return run.model_dir(variant, seed) / tl.LENS_SUBDIR


def ensure_lens(run: Run, variant: str | Variant, seed: int, *, steps: int, tokens_per_step: int, seq_len: int,
                progress: bool = True, **recipe: Any):
    """Load the model's lens if it was trained with the same recipe, else train and save it. Returns (model, lens)."""
    model = run.load_model(variant, seed)
    path = lens_dir(run, variant, seed)
    recipe.setdefault("warmup_steps", min(25, steps // 10))  # the package recipe's 25, scaled for short runs
    want = {"steps": steps, "tokens_per_step": tokens_per_step, "seq_len": seq_len, **recipe}
    meta = path / "recipe.json"
    if meta.exists() and (path / "params.pt").exists():
        import json

        if json.loads(meta.read_text()) == want:
            return model, tl.load_lens(model, path)
    lens = tl.train_lens(model, run.tokens("validation"), steps=steps, tokens_per_step=tokens_per_step,
                         seq_len=seq_len, progress=progress, **recipe)
    tl.save_lens(lens, path)
    from .runs import write_json_atomic

    write_json_atomic(meta, want)
    return model, lens


def kl_table(run: Run, variants: Sequence[str], seeds: Sequence[int], *, steps: int, tokens_per_step: int,
             seq_len: int, eval_tokens: int, progress: bool = True, **recipe: Any) -> pd.DataFrame:
    """Per-layer evaluation (tuned and logit lens) of every (variant, seed) on the test split, long format."""
    frames = []
    test = run.tokens("test")
    for seed in seeds:
        for v in variants:
            model, lens = ensure_lens(run, v, seed, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                                      progress=progress, **recipe)
            df = tl.evaluate(model, test, lens, seq_len=seq_len, max_tokens=eval_tokens)
            df.insert(0, "variant", Variant.parse(v).name)
            df.insert(1, "seed", seed)
            frames.append(df)
    return pd.concat(frames, ignore_index=True)


def gap_table(df: pd.DataFrame, column: str = "kl_tuned_bits", a: str = "tied", b: str = "untied",
              level: float = 0.95) -> pd.DataFrame:
    """Per layer: mean of ``a`` and ``b``, and the paired gap a - b over seeds with sd, t-interval and p-value.

    ``significant`` means the confidence interval of the gap excludes 0 (needs two or more seeds).
    """
    from scipy import stats

    wide = df.pivot_table(index=["layer", "seed"], columns="variant", values=column)
    if a not in wide or b not in wide:
        raise ValueError(f"variants: need both {a!r} and {b!r} in the table, have {list(wide.columns)}")
    gap = (wide[a] - wide[b]).rename("gap").reset_index()
    rows = []
    for layer, g in gap.groupby("layer"):
        x = g.gap.to_numpy(dtype=float)
        n = len(x)
        mean = float(x.mean())
        sd = float(x.std(ddof=1)) if n > 1 else math.nan
        if n > 1 and sd > 0:
            half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
            p = float(stats.ttest_1samp(x, 0.0).pvalue)
        else:
            half, p = math.nan, math.nan
        lo, hi = mean - half, mean + half
        rows.append({"layer": int(layer), a: float(wide.loc[layer][a].mean()), b: float(wide.loc[layer][b].mean()),
                     "gap": mean, "gap_sd": sd, "ci_low": lo, "ci_high": hi, "p_value": p, "n_seeds": n,
                     "significant": bool(n > 1 and (lo > 0 or hi < 0))})
    return pd.DataFrame(rows)


def early_layers(n_layers: int) -> list[int]:
    """The layers called "early" in verdicts: the input layer and the first third of the blocks."""
    return list(range(0, max(1, math.ceil(n_layers / 3)) + 1))


def claim3(gaps: pd.DataFrame) -> dict[str, Any]:
    """Claim 3 from the numbers: mean tied-untied tuned-lens KL gap over the early layers vs its seed spread."""
    n_layers = int(gaps.layer.max())
    early = early_layers(n_layers)
    e = gaps[gaps.layer.isin(early)]
    value = float(e.gap.mean())
    sd = float(np.sqrt(np.nanmean(e.gap_sd.to_numpy() ** 2))) if e.n_seeds.min() > 1 else math.nan
    sig = e[e.significant].layer.tolist()
    return {"early_layers": early, "value": value, "sd": sd, "threshold": 2 * sd if math.isfinite(sd) else 0.0,
            "input_layer_gap": float(gaps[gaps.layer == 0].gap.iloc[0]),
            "significant_layers": gaps[gaps.significant].layer.tolist(), "significant_early_layers": sig,
            "positive_layers": gaps[gaps.gap > 0].layer.tolist()}


def load_sources(sources: dict[str, Any], device: str = "cpu", dtype: Any = None) -> dict[str, tuple[Any, Any]]:
    """Load any HF causal LMs (local folders or hub ids) with their tokenizers: label -> (model, tokenizer).

    Delegates to :func:`tiebias.sources.load_models`: the configs are checked first (``tied`` really
    tied, ``untied`` really untied, a family the lens can follow, enough free memory), so a wrong pair
    is refused before any weights load. ``dtype`` defaults to float32.
    """
    import torch

    from . import sources as src

    return src.load_models(sources, device=device, dtype=torch.float32 if dtype is None else dtype)


def kl_table_models(models: dict[str, tuple[Any, Any]], corpus: Any = None, *, steps: int, tokens_per_step: int,
                    seq_len: int, eval_tokens: int, progress: bool = True,
                    **recipe: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Lens study on loaded models (e.g. a real tied/untied checkpoint pair) with each model's own tokenizer.

    Lenses train on the corpus's validation split and are evaluated on its test split, as for a run.
    Returns the long per-layer table (``variant`` = label, ``seed`` = 0) and the lenses by label.
    """
    from . import data

    ds = data.load_corpus(corpus)
    recipe.setdefault("warmup_steps", min(25, steps // 10))
    frames, lenses = [], {}
    for label, (model, tok) in models.items():
        val = data.encode(tok, ds["validation"]["text"])
        test = data.encode(tok, ds["test"]["text"])
        lens = tl.train_lens(model, val, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
                             progress=progress, **recipe)
        df = tl.evaluate(model, test, lens, seq_len=seq_len, max_tokens=eval_tokens)
        df.insert(0, "variant", label)
        df.insert(1, "seed", 0)
        frames.append(df)
        lenses[label] = lens
    return pd.concat(frames, ignore_index=True), lenses


def depth_run(run: Run, preset: str, seeds: Sequence[int], config: Any, progress: bool = True) -> Run:
    """Tied and untied models of another depth, in ``<run>/depth/<preset>/``, sharing the run's data and tokenizer.

    Everything but the preset (steps, batch, learning rate, seeds) is the run's, so the two depths differ only in
    shape. Already trained models are reused.
    """
    import shutil
    from dataclasses import replace

    from .models import get_preset
    from .train import train

    get_preset(preset)
    sub = Run(run.path / "depth" / preset)
    if not sub.config_path.exists():
        sub.path.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer", "tokens"):
            if not (sub.path / name).exists():
                shutil.copytree(run.path / name, sub.path / name)
        shutil.copy2(run.path / "token_frequencies.csv", sub.path / "token_frequencies.csv")
        shutil.copy2(run.config_path, sub.config_path)  # last: marks the sub-run as ready
    cfg = replace(config, preset=preset)
    for seed in seeds:
        for v in ("tied", "untied"):
            train(sub, v, seed, cfg, progress=progress)
    return sub


def relative_depth(gaps: pd.DataFrame) -> pd.DataFrame:
    """Add ``depth`` = layer / number of layers, so models of different depth share one axis."""
    out = gaps.copy()
    out["depth"] = out.layer / out.layer.max()
    return out
