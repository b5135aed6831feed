"""Whether a run's numbers can be read as evidence at all: the rule above the four claims' own rules.

A plumbing profile (``smoke``) or a run whose models do not beat the unigram baseline proves only that the code
runs. :func:`tiebias.verdicts.claims.record` asks :func:`not_meaningful` before storing any verdict: such a run records every
claim as "not meaningful" (:data:`tiebias.verdicts.status.NOT_MEANINGFUL`) with the reason, and its printed verdict starts
with :func:`banner`.

A layer-wise claim (:data:`LAYERWISE`, claim 3) asks more: models below the bigram baseline
(:mod:`tiebias.data.bigram`). A tuned lens at layer 0 reads only the current token's embedding, so it is at best a
bigram predictor; a model no better than a count bigram has not shown that its layers add anything beyond one token
of context, and there is no early-versus-late contribution to compare. Claims 1, 2 and 4 are about the embedding matrix
and its gradient, which a model below the unigram baseline has already shaped (the bigram statistics live in that
matrix), so the bigram rule does not apply to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tiebias.data import bigram
from tiebias.data.tokens import unigram_loss
from tiebias.run.folder import Run

PLUMBING_PROFILES = {"smoke": "a plumbing check: its models are too small and too briefly trained to learn much"}
"""Profiles whose runs test the code, never the claims."""
LAYERWISE = ("claim3_tuned_lens", "claim3_tuned_lens_reference")
"""Claims read layer by layer: evidence only from models below the bigram baseline (the module docstring says why)."""


def not_meaningful(run: Run, claim: str | None = None) -> str | None:
    """Why a run's numbers cannot be read as evidence (a plumbing profile, a model not below the unigram baseline,
    or for a :data:`LAYERWISE` claim not below the bigram baseline), or None. A folder without a study record (an
    external pair's) is not judged by this rule.

    Args:
        run: the run folder; its finished models' final validation losses are set against the unigram baseline of
            its own data.
        claim: the claim asked about (None: the rule for every claim, the unigram's only).

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
    why = short_of_unigram(losses, unigram_loss(run.frequencies(), run.tokens("validation")))
    if why or claim not in LAYERWISE:
        return why
    return short_of_bigram(losses, validation_bigram(run))


def validation_bigram(run: Run) -> float:
    """The bigram baseline (nats) of a run on the validation positions its models' loss is scored on: the windows of
    the study's ``seq_len`` in its first ``eval_tokens`` tokens (the whole split's pairs when no study is recorded)."""
    cfg = run.config
    study = next((cfg[s] for s in ("study", "ablation") if isinstance(cfg.get(s), dict) and cfg[s].get("seq_len")), {})
    return bigram.for_run(run).loss(run.tokens("validation"), study.get("seq_len"), study.get("eval_tokens"))


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


def short_of_bigram(losses: Mapping[str, float | None], baseline: float) -> str | None:
    """The reason when a model's validation loss is not strictly below the bigram baseline, else None (for a
    :data:`LAYERWISE` claim; a NaN or missing loss counts as not below)."""
    bad = {k: v for k, v in losses.items() if not (isinstance(v, (int, float)) and v < baseline)}
    if not bad:
        return None
    listed = ", ".join(f"{k} {v:.3f}" if isinstance(v, (int, float)) else f"{k} missing" for k, v in bad.items())
    return (f"{len(bad)} of {len(losses)} models do not beat the bigram baseline of {baseline:.3f} nats (validation "
            f"loss {listed}): a layer-0 lens is at best a bigram predictor, and these models have not shown that their "
            "layers add anything beyond one token of context, so there is no early-versus-late contribution to compare")


def banner(reason: str) -> str:
    """The first line of every verdict of a run that is not evidence.

    Args:
        reason: what :func:`not_meaningful` returned.

    Returns:
        The banner line.
    """
    return (f"NOT MEANINGFUL: these numbers cannot be read as evidence for or against the claim, because {reason}. "
            "The lines below only show that the analysis runs.")


__all__ = ["LAYERWISE", "PLUMBING_PROFILES", "banner", "not_meaningful", "short_of_bigram", "short_of_unigram",
           "validation_bigram"]
