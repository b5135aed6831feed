"""Diverged trainings: the step that ends one, its record, and the refusal every analysis makes.

A loss or gradient norm that is not a finite number means the weights can no longer learn: NaN spreads
to every weight at the next update, and an overflowing gradient norm makes clipping scale every update
to zero. :class:`tiebias.train.steploop.StepLoop` stops at the first such step and the model's completion
record carries ``diverged`` (:func:`at_step`), so the same config is not trained again in vain, 01 reports
the model, and 02, 03 and 04 refuse it by name (:func:`check_models`) instead of deriving a claim from
meaningless weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from tiebias.config.variants import Variant, model_key

if TYPE_CHECKING:
    from tiebias.run.folder import Run

KEY = "diverged"
LOSSES = ("final_train_loss", "final_val_loss", "initial_val_loss")
AGAIN = "train it again in a fresh run_dir (or with overwrite=true)"
ADVICE = f"lower lr and {AGAIN}"


def at_step(step: int, loss: float, grad_norm: float) -> dict[str, Any] | None:
    """The divergence record of optimiser step ``step`` (1-based), or None when its loss and gradient norm are finite.

    Values are kept as text (``"nan"``, ``"inf"``) so the record stays strict JSON.
    """
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return None
    return {"step": int(step), "loss": f"{loss:g}", "grad_norm": f"{grad_norm:g}"}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def reason(summary: Mapping[str, Any]) -> str | None:
    """Why a finished model's weights mean nothing (its training diverged), or None.

    Reads the ``diverged`` record, and for models finished before it existed a final loss that is not a
    finite number. ``summary`` is a completion record or a row of a table of them.
    """
    d = summary.get(KEY)
    if isinstance(d, Mapping):
        return f"training diverged at step {d['step']} (loss {d['loss']}, gradient norm {d['grad_norm']})"
    bad = [k for k in LOSSES if k in summary and not _finite(summary[k])]
    return f"training diverged ({bad[0]} is not a finite number)" if bad else None


def reasons(summaries: pd.DataFrame) -> dict[str, str]:
    """``{key: reason}`` of the diverged models in a table of completion records indexed by model key.

    Args:
        summaries: completion records (the training summaries of :func:`tiebias.train.train_many`), one row per
            model, indexed by model key.

    Returns:
        Model key -> why it counts as diverged (:func:`reason`), for the diverged models only.
    """
    out = {str(k): reason(row) for k, row in summaries.iterrows()}
    return {k: v for k, v in out.items() if v is not None}


def _lr(run: Run, variant: str | Variant, seed: int) -> str:
    """``" (it trained with lr=...)"``, or nothing when its train_config.json cannot say."""
    from tiebias.run.files import read_json

    try:
        lr = read_json(run.train_config_path(variant, seed), "").get("lr")
    except (OSError, ValueError, AttributeError):  # missing or damaged: the advice goes without it
        return ""
    return f" (it trained with lr={lr:g})" if _finite(lr) else ""


def check_models(run: Run, models: Iterable[tuple[str | Variant, int]], what: str) -> None:
    """Refuse a diverged model among ``models`` of ``run`` before ``what`` is computed from it (ValueError naming it).

    Models that have not finished are left to the caller, which names them as missing.
    """
    for variant, seed in models:
        if not run.is_complete(variant, seed):
            continue
        why = reason(run.summary(variant, seed))
        if why is not None:
            raise ValueError(f"model {model_key(variant, seed)} in {run.path}: {why}, so {what} from its weights "
                             f"would mean nothing; lower lr{_lr(run, variant, seed)} and {AGAIN}")
