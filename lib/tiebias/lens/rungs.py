"""One model's lens-budget ladder of one recipe: each rung continues the last (a warm restart with its own warmup and
decay), is saved in ``<lens folder>/<recipe>-x<b>/`` (``rung.json`` written last; ``trainer.pt`` at the highest rung
only, to resume) and read under each protocol (cached CSVs); the first recipe's largest rung is copied to the top."""

from __future__ import annotations

import copy
import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from tiebias.config.checks import is_int
from tiebias.config.choices import LENS_RECIPES
from tiebias.config.lens import LensSettings, check_settings
from tiebias.lens import cache, evaluate, fit, lenses
from tiebias.lens.fit import logits_precision
from tiebias.run.files import damaged, load_torch_file, read_json, remove_entry, write_json_atomic
from tiebias.run.layout import LENS_PARAMS_NAME
from tiebias.system.atomic import atomic_path

__all__ = ["eval_name", "evaluate_cached", "rung_dir", "train_ladder", "train_model_lens_ladders"]

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


def _rung_done(path: Path, meta: dict[str, Any], auto_precision: str) -> bool:
    """Whether a rung's lens files exist and the same ladder trained it (no recorded precision: the automatic one)."""
    f = path / _RUNG
    if not ((path / LENS_PARAMS_NAME).is_file() and f.is_file()):
        return False
    saved = read_json(f, "delete the rung's folder: it is trained again")
    saved.setdefault("logits_precision", auto_precision)
    return saved == meta


def train_ladder(model: Any, tokens: Any, folder: str | Path, lens: LensSettings, *, recipe: str | None = None,
                 progress: bool = True, max_cache_bytes: int = cache.MAX_BYTES,
                 num_threads: int | str | None = "auto", should_stop: Callable[[], bool] | None = None,
                 ) -> dict[int, Any]:
    """{budget: TunedLens} of ``recipe``'s ladder (default: the first): finished rungs loaded, an interrupted ladder
    resumed; the rungs share one activation cache of at most ``max_cache_bytes`` (0: none), the same lenses."""
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
    done = 0
    while done < len(budgets) and _rung_done(dirs[done], metas[done], auto):
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
                                   ) if cache.pays_off(draws, tokens.numel() // seq_len) else None
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
