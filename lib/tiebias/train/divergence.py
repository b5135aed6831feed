"""Diverged trainings (a loss or gradient norm that is not finite: the weights can no longer learn): the step that
ends one, its ``diverged`` record, and the refusal 02, 03 and 04 make of such a model by name."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from tiebias.config.variants import Variant, model_key
from tiebias.run.files import read_json
from tiebias.run.folder import Run

AGAIN = "train it again in a fresh run_dir (or with overwrite=true)"
ADVICE = f"lower lr and {AGAIN}"


def at_step(step: int, loss: float, grad_norm: float) -> dict[str, Any] | None:
    """The divergence record of optimiser step ``step`` (1-based), or None when its loss and gradient norm are finite;
    values kept as text (``"nan"``, ``"inf"``) so the record stays strict JSON."""
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return None
    return {"step": int(step), "loss": f"{loss:g}", "grad_norm": f"{grad_norm:g}"}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def reason(summary: Mapping[str, Any]) -> str | None:
    """Why a finished model's weights mean nothing (its ``diverged`` record, or for older ones a final loss that is
    not finite).

    Args:
        summary: the model's completion record.

    Returns:
        The reason, or None when it trained normally.
    """
    d = summary.get("diverged")
    if isinstance(d, Mapping):
        return f"training diverged at step {d['step']} (loss {d['loss']}, gradient norm {d['grad_norm']})"
    bad = [k for k in ("final_train_loss", "final_val_loss", "initial_val_loss") if k in summary
           and not _finite(summary[k])]
    return f"training diverged ({bad[0]} is not a finite number)" if bad else None


def check_models(run: Run, models: Iterable[tuple[str | Variant, int]], what: str) -> None:
    """Refuse a diverged model among ``models`` of ``run`` before ``what`` is computed from it (unfinished ones are
    left to the caller)."""
    for variant, seed in models:
        why = reason(run.summary(variant, seed)) if run.is_complete(variant, seed) else None
        if why is None:
            continue
        try:  # the learning rate it trained with, when its train_config.json can say
            lr = read_json(run.train_config_path(variant, seed), "").get("lr")
        except (OSError, ValueError, AttributeError):
            lr = None
        lr_note = f" (it trained with lr={lr:g})" if _finite(lr) else ""
        raise ValueError(f"model {model_key(variant, seed)} in {run.path}: {why}, so {what} from its weights "
                         f"would mean nothing; lower lr{lr_note} and {AGAIN}")
