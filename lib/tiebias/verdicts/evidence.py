"""Whether a run's numbers can be read as evidence at all: the rule above the four claims' own rules.

A plumbing profile (``smoke``) or a run whose models do not beat the unigram baseline proves only that the code
runs. :func:`tiebias.verdicts.claims.record` asks :func:`not_meaningful` before storing any verdict: such a run records every
claim as "not meaningful" (:data:`tiebias.verdicts.status.NOT_MEANINGFUL`) with the reason, and its printed verdict starts
with :func:`banner`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tiebias.data.tokens import unigram_loss
from tiebias.run.folder import Run

PLUMBING_PROFILES = {"smoke": "a plumbing check: its models are too small and too briefly trained to learn much"}
"""Profiles whose runs test the code, never the claims."""


def not_meaningful(run: Run) -> str | None:
    """Why a run's numbers cannot be read as evidence (a plumbing profile, a model not below the unigram baseline),
    or None. A folder without a study record (an external pair's) is not judged by this rule.

    Args:
        run: the run folder; its finished models' final validation losses are set against the unigram baseline of
            its own data.

    Returns:
        The reason (a clause to follow "because"), or None when the numbers can be read (also for a run with no
        finished model).
    """
    if not run.config_path.exists():
        return None
    profile = run.profile
    name = Path(str(profile)).stem if profile else None  # a shipped profile by name or by its file's path
    if name in PLUMBING_PROFILES:
        return f"the {name!r} profile is {PLUMBING_PROFILES[name]}"
    m = run.models()
    losses = {r.key: run.summary(r.variant, r.seed).get("final_val_loss") for r in m[m.complete].itertuples()}
    if not losses:
        return None
    return short_of_unigram(losses, unigram_loss(run.frequencies(), run.tokens("validation")))


def short_of_unigram(losses: Mapping[str, float | None], unigram: float) -> str | None:
    """The reason when a model's validation loss is not strictly below the unigram baseline, else None.

    A model not below it learned too little for its matrices to mean anything; a diverged model's NaN (or a
    missing loss) counts as not below.
    """
    bad = {k: v for k, v in losses.items() if not (isinstance(v, (int, float)) and v < unigram)}
    if not bad:
        return None
    listed = ", ".join(f"{k} {v:.3f}" if isinstance(v, (int, float)) else f"{k} missing" for k, v in bad.items())
    return (f"{len(bad)} of {len(losses)} models do not beat the unigram baseline of {unigram:.3f} nats (validation "
            f"loss {listed}): they learned too little for their matrices to mean anything")


def banner(reason: str) -> str:
    """The first line of every verdict of a run that is not evidence.

    Args:
        reason: what :func:`not_meaningful` returned.

    Returns:
        The banner line.
    """
    return (f"NOT MEANINGFUL: these numbers cannot be read as evidence for or against the claim, because {reason}. "
            "The lines below only show that the analysis runs.")


__all__ = ["PLUMBING_PROFILES", "banner", "not_meaningful", "short_of_unigram"]
