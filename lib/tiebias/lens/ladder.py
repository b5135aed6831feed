"""Lens-budget ladders of one model, of a run's models, of loaded models and of checkpoints (notebook 03): lenses train
on the validation split and are read on the test split; each rung continues the last (a warm restart), is saved in
``<lens folder>/<recipe>-x<b>/`` (``rung.json`` written last) and read under each protocol (cached CSVs)."""

from __future__ import annotations

import copy
import functools
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tiebias.config.checks import is_int
from tiebias.config.choices import LENS_RECIPES
from tiebias.config.lens import LensSettings, check_settings
from tiebias.config.params import coerce
from tiebias.config.variants import Variant, model_key
from tiebias.lens import cache, evaluate, fit, lenses
from tiebias.lens.fit import logits_precision
from tiebias.lens.tables import convergence, ladder_gaps, per_layer
from tiebias.run.files import damaged, load_torch_file, read_json, remove_entry, write_json_atomic
from tiebias.run.folder import Run
from tiebias.run.layout import LENS_PARAMS_NAME
from tiebias.system.atomic import atomic_path
from tiebias.system.parallel import side_by_side, workers_for
from tiebias.train import divergence

REFERENCE_BUDGET = "reference-budget"  # sub-folder of a lens folder: the ladder at the paper's lens budget
_RUNG = "rung.json"
_TRAINER = "trainer.pt"
_TOP_RECIPE = "recipe.json"


def rung_dir(folder: str | Path, recipe: str, budget: int) -> Path:
    return Path(folder) / f"{recipe}-x{int(budget)}"


def _rung_meta(recipe: str, lens: LensSettings, k: int, *, n_tokens: int, model_sha256: str,
               precision: str) -> dict[str, Any]:
    """What determines rung k of a ladder: every rung before it, the model, and the lens logits' precision."""
    return {"recipe": recipe, "train_lens": LENS_RECIPES[recipe], "ladder": list(lens.budgets[: k + 1]),
            "budget": int(lens.budgets[k]), "lens_steps": lens.steps, "tokens_per_step": lens.tokens_per_step,
            "seq_len": lens.seq_len, "n_train_tokens": int(n_tokens), "model_sha256": model_sha256,
            "logits_precision": precision}


def train_ladder(model: Any, tokens: Any, folder: str | Path, lens: LensSettings, *, recipe: str | None = None,
                 progress: bool = True, max_cache_bytes: int = cache.MAX_BYTES,
                 num_threads: int | str | None = "auto", should_stop: Callable[[], bool] | None = None,
                 ) -> dict[int, Any]:
    """{budget: TunedLens} of ``recipe``'s ladder (default: the first): finished rungs loaded, an interrupted ladder
    resumed (``trainer.pt`` at the highest rung); the rungs share one activation cache (``max_cache_bytes``, 0: none)."""
    lens = check_settings(lens)
    recipe = lens.recipes[0] if recipe is None else recipe
    if recipe not in LENS_RECIPES:
        raise ValueError(f"lens_recipes: unknown recipe {recipe!r}; allowed: {', '.join(LENS_RECIPES)}")
    if not is_int(max_cache_bytes) or max_cache_bytes < 0:
        raise ValueError(f"max_cache_bytes: must be an int >= 0 (0: no cache), got {max_cache_bytes!r}")
    budgets, steps, seq_len = lens.budgets, lens.steps, lens.seq_len
    folder = Path(folder)
    sha = lenses.unembed_sha256(model)
    precision = logits_precision(model.device)
    metas = [_rung_meta(recipe, lens, k, n_tokens=tokens.numel(), model_sha256=sha, precision=precision)
             for k in range(len(budgets))]
    dirs = [rung_dir(folder, recipe, b) for b in budgets]
    auto = logits_precision(model.device, "auto")
    done = 0  # rungs whose lens files exist and the same ladder trained (no recorded precision: the automatic one)
    while done < len(budgets) and (dirs[done] / LENS_PARAMS_NAME).is_file() and (dirs[done] / _RUNG).is_file():
        saved = read_json(dirs[done] / _RUNG, "delete the rung's folder: it is trained again")
        if {"logits_precision": auto, **saved} != metas[done]:
            break
        done += 1
    out: dict[int, Any] = {}
    if done == len(budgets):
        return {b: lenses.load_lens(model, d) for b, d in zip(budgets, dirs, strict=True)}
    start = max((k for k in range(done) if (dirs[k] / _TRAINER).is_file()), default=-1)
    for k in range(start):
        out[budgets[k]] = lenses.load_lens(model, dirs[k])
    tuned, state = None, {}
    if start >= 0:
        tuned = lenses.load_lens(model, dirs[start])
        state = load_torch_file(dirs[start] / _TRAINER, "a rung's lens optimiser and data generator states",
                                "delete it and run 03_lens again: the ladder then resumes from a lower rung that "
                                "kept its trainer state, or is trained again from the start")
        out[budgets[start]] = copy.deepcopy(tuned) if start < len(budgets) - 1 else tuned
    draws = (budgets[-1] - (budgets[start] if start >= 0 else 0)) * steps * (lens.tokens_per_step // seq_len)
    activations = cache.build_cache(model, tokens, seq_len=seq_len, tokens_per_step=lens.tokens_per_step,
                                   max_bytes=max_cache_bytes, progress=progress, num_threads=num_threads,
                                   ) if draws >= cache.MIN_VISITS * (tokens.numel() // seq_len) else None
    for k in range(start + 1, len(budgets)):
        seg = (budgets[k] - (budgets[k - 1] if k else 0)) * steps
        rung_fit = lens.fit(recipe, seg, low_precision=precision == "bf16")
        tuned = fit.train_lens(model, tokens, rung_fit, lens=tuned, state=state, cache=activations, progress=progress,
                                    num_threads=num_threads, should_stop=should_stop)
        remove_entry(dirs[k])
        lenses.save_lens(tuned, dirs[k], logits_precision=precision)
        with atomic_path(dirs[k] / _TRAINER) as tmp:
            torch.save(state, tmp)
        write_json_atomic(dirs[k] / _RUNG, metas[k])  # last: marks the rung finished
        if k > 0:
            (dirs[k - 1] / _TRAINER).unlink(missing_ok=True)
        out[budgets[k]] = copy.deepcopy(tuned) if k < len(budgets) - 1 else tuned  # the next rung trains in place
    return out


def eval_name(eval_tokens: int, seq_len: int, protocol: str) -> str:
    """Cache file of one rung's evaluation under ``protocol``."""
    tag = f"eval_{eval_tokens}x{seq_len}"
    return f"{tag}.csv" if protocol == "package" else f"{tag}_{protocol}.csv"


def evaluate_cached(model: Any, tokens: Any, lens: Any, path: Path, *, seq_len: int, eval_tokens: int,
                    logit_lens: bool, protocol: str = "package",
                    num_threads: int | str | None = "auto") -> pd.DataFrame:
    """Per-sequence evaluation of one lens (or the logit lens alone) under ``protocol``, cached as ``path``."""
    if path.is_file():
        try:
            return pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise damaged(path, e, "delete it: the evaluation is computed again from the saved lens") from None
    df = evaluate.evaluate(model, tokens, lens, seq_len=seq_len, max_tokens=eval_tokens, per_sequence=True,
                           logit_lens=logit_lens, num_threads=num_threads, protocol=protocol)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return df


def train_model_lens_ladders(model: Any, train_tokens: Any, test_tokens: Any, folder: str | Path,
                             lens: LensSettings, *, progress: bool = True, num_threads: int | str | None = "auto",
                             should_stop: Callable[[], bool] | None = None,
                             logit_folder: str | Path | None = None) -> pd.DataFrame:
    """Every recipe's ladder of one model, trained or loaded, read per sequence under each protocol (the logit lens
    once, cached in ``logit_folder``); the first recipe's largest rung is copied to the top of ``folder``."""
    lens = check_settings(lens)
    folder = Path(folder)
    sha = lenses.unembed_sha256(model)
    logit_folder = Path(logit_folder) if logit_folder is not None else folder
    n, seq_len = lens.eval_tokens, lens.seq_len
    read = functools.partial(evaluate_cached, model, test_tokens, seq_len=seq_len, eval_tokens=n,
                             num_threads=num_threads)
    logits = {p: read(None, logit_folder / f"logit_{sha[:12]}_{eval_name(n, seq_len, p)}", logit_lens=True,
                      protocol=p) for p in lens.protocols}
    frames = []
    for recipe in lens.recipes:
        trained = train_ladder(model, train_tokens, folder, lens, recipe=recipe, progress=progress,
                               num_threads=num_threads, should_stop=should_stop)
        for b, tuned in trained.items():
            for p in lens.protocols:
                df = read(tuned, rung_dir(folder, recipe, b) / eval_name(n, seq_len, p), logit_lens=False, protocol=p)
                df["kl_logit_bits"] = logits[p].kl_logit_bits.to_numpy()
                df["ce_logit_nats"] = logits[p].ce_logit_nats.to_numpy()
                ids = {"recipe": recipe, "budget": b, "lens_steps": b * lens.steps, "protocol": p}
                frames.append(df.assign(**ids)[[*ids, *df.columns]])
    # the first recipe's largest rung, copied to the top of the folder (unless already there)
    meta = _rung_meta(lens.recipes[0], lens, len(lens.budgets) - 1, n_tokens=train_tokens.numel(), model_sha256=sha,
                      precision=logits_precision(model.device))
    top = folder / _TOP_RECIPE
    if not (top.is_file() and json.loads(top.read_text()) == meta and (folder / LENS_PARAMS_NAME).is_file()):
        for f in rung_dir(folder, lens.recipes[0], lens.budgets[-1]).iterdir():
            if f.is_file() and f.name not in (_RUNG, _TRAINER) and not f.name.startswith("eval_"):
                with atomic_path(folder / f.name) as tmp:
                    shutil.copy2(f, tmp)
        write_json_atomic(top, meta)
    return pd.concat(frames, ignore_index=True)


def _final_step(run: Run, variant: str | Variant, seed: int) -> int | None:
    try:
        return int(run.summary(variant, seed)["steps"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def ensure_lens(run: Run, variant: str | Variant, seed: int, lens: LensSettings, *, step: int | None = None,
                progress: bool = True, device: str = "cpu") -> tuple[Any, Any]:
    """One model of a run (or its checkpoint at ``step``) with its verdict lens, trained if not yet saved.

    Args: run, variant, seed: the model; lens: the settings (the first recipe's ladder only); step: a checkpoint's
        step (None: the final model); progress, device: progress bars, where the model runs.
    Returns: ``(model, lens)``: the model and the ``TunedLens`` of the first recipe's largest rung.
    """
    lens = check_settings(lens)
    model = run.load_model(variant, seed, step, device=device)
    with run.writing(f"lens of {model_key(variant, seed)}"):
        trained = train_ladder(model, run.tokens("validation"), run.lens_dir(variant, seed, step), lens,
                               progress=progress)
    return model, trained[max(trained)]


def train_lens_ladders(run: Run, variants: Sequence[str], seeds: Sequence[int], lens: LensSettings, *,
                       step: int | None = None, per_sequence: bool = False, progress: bool = True,
                       device: str = "cpu", workers: int | str = "auto", subdir: str = "") -> pd.DataFrame:
    """The lens ladders of every (variant, seed) of a run, or of its checkpoints at ``step``, trained or loaded, read.

    Args: run, variants, seeds: the run and its finished models; lens: the settings; step: a checkpoint (None: final);
        per_sequence: rows per sequence; progress, device: progress bars, where the models run; workers: models
        trained side by side on a CPU; subdir: ladders in ``<lens folder>/<subdir>/``.
    Returns: ``variant``, ``seed``, ``step``, ``recipe``, ``budget``, ``lens_steps``, ``protocol``, ``layer`` and the
        evaluation columns.
    """
    lens = check_settings(lens)
    val, test = run.tokens("validation"), run.tokens("test")
    jobs = [(seed, v) for seed in seeds for v in variants]
    n = workers_for(len(jobs), workers) if torch.device(device).type == "cpu" else 1

    def job(seed: int, v: str) -> Callable[[Callable[[], bool]], pd.DataFrame]:
        def go(should_stop: Callable[[], bool]) -> pd.DataFrame:
            final = _final_step(run, v, seed)
            at = None if step is None or step == final else step
            model = run.load_model(v, seed, at, device=device)
            lens_dir = run.lens_dir(v, seed, at)
            df = train_model_lens_ladders(model, val, test, lens_dir / subdir, lens, progress=progress,
                                                num_threads="auto" if n == 1 else None, should_stop=should_stop,
                                                logit_folder=lens_dir)
            ids = {"variant": Variant.parse(v).name, "seed": seed, "step": step if step is not None else final}
            return df.assign(**ids)[[*ids, *df.columns]]
        return go

    divergence.check_models(run, [(v, seed) for seed, v in jobs], "a tuned lens")
    names = ", ".join(model_key(v, seed) for seed, v in jobs)
    with run.writing(f"lenses of {names}"):  # one writer of lens folders
        frames = side_by_side([job(seed, v) for seed, v in jobs], n)
    out = pd.concat(frames, ignore_index=True)
    return out if per_sequence else per_layer(out)


def train_pair_lens_ladders(models: dict[str, tuple[Any, Any]], corpus: Any, lens: LensSettings, *,
                            folder: str | Path, per_sequence: bool = False, progress: bool = True,
                            subdir: str = "") -> tuple[pd.DataFrame, dict[str, Any]]:
    """The lens ladders of loaded models, each with its own tokenizer (one that cannot read the corpus is refused).

    Args: models: {label: (model, tokenizer)}; corpus: None for the embedded one; lens: the settings;
        folder: the pair's folder; per_sequence, progress, subdir: as in :func:`train_lens_ladders`.
    Returns: (the table, ``variant`` = label and ``seed`` = 0; the top lens by label).
    """
    from tiebias.align.tokenizers import check_tokenizers
    from tiebias.data import corpus as data
    from tiebias.data import tokens

    lens = check_settings(lens)
    ds = data.load_corpus(corpus)
    check_tokenizers(models, [*ds["validation"]["text"], *ds["test"]["text"]], str(corpus or data.EMBEDDED_CORPUS))
    frames, top_lenses = [], {}
    for label, (model, tok) in models.items():
        val = tokens.encode(tok, ds["validation"]["text"])
        test = tokens.encode(tok, ds["test"]["text"])
        top = Run(folder).pair_lens_dir(label)
        sub = top / subdir
        df = train_model_lens_ladders(model, val, test, sub, lens, progress=progress, logit_folder=top)
        frames.append(df.assign(variant=label, seed=0, step=-1)[["variant", "seed", "step", *df.columns]])
        top_lenses[label] = lenses.load_lens(model, sub)
    out = pd.concat(frames, ignore_index=True)
    return (out if per_sequence else per_layer(out)), top_lenses


def _val_loss_at(run: Run, variant: str | Variant, seed: int, step: int) -> tuple[float, int]:
    """(validation loss, its step) of the last evaluation at or before ``step``."""
    val = run.metrics(variant, seed, "val").sort_values("step")
    before = val[val.step <= step]
    if before.empty:
        return math.nan, -1
    row = before.iloc[-1]
    return float(row.val_loss), int(row.step)


def train_checkpoint_lens_ladders(run: Run, variants: Sequence[str], seeds: Sequence[int],
                                  checkpoints: Sequence[int], lens: LensSettings, *, progress: bool = True,
                                  device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The verdict's early-layer gap at each training checkpoint, beside the validation loss there.

    Args: run, variants, seeds, lens, progress, device: as in :func:`train_lens_ladders`; checkpoints: their steps.
    Returns: (per checkpoint: ``step``, ``val_loss``, ``val_loss_<variant>``, ``val_step``, ``gap``, ``ci_low``,
        ``ci_high``, ``half_width``, ``n_seeds``, ``converged``, ``budget``; the per-layer table of all of them).
    """
    steps_list = coerce("lens_checkpoints", list(checkpoints))
    lens = check_settings(lens)
    recipe = lens.recipes[0]
    headline = lens.replace(recipes=(recipe,), protocols=lens.protocols[:1])
    rows, tables = [], []
    for ck in steps_list:
        for v in variants:
            for s in seeds:
                if ck != _final_step(run, v, s):
                    run.model_path(v, s, ck)  # a missing checkpoint stops here, naming the step
        seq = train_lens_ladders(run, variants, seeds, headline, step=ck, per_sequence=True, progress=progress,
                                 device=device)
        ladder = ladder_gaps(seq, recipe)
        g = ladder.iloc[-1]
        vals = [[_val_loss_at(run, v, s, ck) for s in seeds] for v in variants]
        row: dict[str, Any] = {"step": ck, **{f"val_loss_{Variant.parse(v).name}": float(np.mean([x for x, _ in vs]))
                                              for v, vs in zip(variants, vals, strict=True)}}
        row["val_step"] = min(st for vs in vals for _, st in vs)  # the earliest evaluation behind any model's loss
        row.update(val_loss=float(np.mean([x for vs in vals for x, _ in vs])), gap=float(g.gap), ci_low=float(g.ci_low),
                   ci_high=float(g.ci_high), half_width=float(g.half_width), n_seeds=int(g.n_seeds),
                   converged=convergence(ladder, seq)["converged"], budget=int(g.budget))
        rows.append(row)
        tables.append(per_layer(seq))
    return pd.DataFrame(rows), pd.concat(tables, ignore_index=True)
