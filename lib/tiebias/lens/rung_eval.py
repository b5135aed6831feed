"""Evaluating a lens ladder (notebook 03): every rung under every lens protocol, cached next to the lens.

A trained lens can be read two ways (:data:`tiebias.config.choices.LENS_PROTOCOLS`): as the tuned-lens package
trains it, or as the paper's public code reads it. Both readings use the same lens, so a second
protocol costs one more evaluation and no training. Each evaluation is cached as a CSV in the rung's
folder; the package reading keeps the file name it always had (``eval_<tokens>x<seq_len>.csv``), so
runs made before protocols existed are not evaluated again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from tiebias.config.lens import LensSettings
from tiebias.lens import evaluate
from tiebias.run.files import damaged
from tiebias.system.atomic import atomic_path

__all__ = ["evaluate_cached", "eval_name", "logit_name", "rung_frames"]


def eval_name(eval_tokens: int, seq_len: int, protocol: str) -> str:
    """Cache file of one rung's evaluation: the package reading keeps its historical name, others add a suffix."""
    tag = f"eval_{eval_tokens}x{seq_len}"
    return f"{tag}.csv" if protocol == "package" else f"{tag}_{protocol}.csv"


def logit_name(model_sha256: str, eval_tokens: int, seq_len: int, protocol: str) -> str:
    """Cache file of a model's logit-lens evaluation (shared by every rung) under one protocol."""
    return f"logit_{model_sha256[:12]}_{eval_name(eval_tokens, seq_len, protocol)}"


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


def rung_frames(model: Any, tokens: Any, lenses: Mapping[int, Any], dirs: Mapping[int, Path],
                logits: Mapping[str, pd.DataFrame], settings: LensSettings, *, recipe: str,
                num_threads: int | str | None = "auto") -> list[pd.DataFrame]:
    """One per-sequence frame per (rung, protocol) of a recipe's ladder, with the logit lens of that protocol.

    Columns: ``recipe``, ``budget``, ``lens_steps``, ``protocol``, then the :func:`tiebias.lens.evaluate.evaluate`
    columns. ``lenses`` and ``dirs`` map each budget to its lens and rung folder; ``logits`` maps each protocol
    to the model's logit-lens evaluation; ``settings`` gives the protocols, ``seq_len`` and ``eval_tokens``.
    """
    frames = []
    n, seq_len = settings.eval_tokens, settings.seq_len
    for b, lens in lenses.items():
        for protocol in settings.protocols:
            df = evaluate_cached(model, tokens, lens, dirs[b] / eval_name(n, seq_len, protocol), seq_len=seq_len,
                                 eval_tokens=n, logit_lens=False, protocol=protocol, num_threads=num_threads)
            df["kl_logit_bits"] = logits[protocol].kl_logit_bits.to_numpy()
            df["ce_logit_nats"] = logits[protocol].ce_logit_nats.to_numpy()
            df.insert(0, "recipe", recipe)
            df.insert(1, "budget", b)
            df.insert(2, "lens_steps", b * settings.steps)
            df.insert(3, "protocol", protocol)
            frames.append(df)
    return frames
