"""Whether a run's numbers can be evidence at all: the rule above the four claims' own rules.

A plumbing profile (``smoke``) or a claim's models not below the unigram baseline prove only that the code runs; a
layer-wise claim (claim 3) also needs them below the bigram baseline, since a layer-0 lens is at best a bigram predictor."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from tiebias.data import bigram
from tiebias.data.tokens import unigram_loss
from tiebias.run.folder import Run

PLUMBING_PROFILES = {"smoke": "a plumbing check: its models are too small and too briefly trained to learn much"}
LAYERWISE = ("claim3_tuned_lens", "claim3_tuned_lens_reference")
_WHY = {"unigram": "they learned too little for their matrices to mean anything",
        "bigram": "a layer-0 lens is at best a bigram predictor, and these models have not shown that their layers add "
                  "anything beyond one token of context, so there is no early-versus-late contribution to compare"}


def not_meaningful(run: Run, claim: str | None = None, models: Collection[str] = ()) -> str | None:
    """Why a claim's numbers from a run cannot be evidence, or None (they can; no finished model; no study record).

    Args:
        run: the run folder; claim: the claim asked about (None: the unigram rule only).
        models: the keys of the models the claim is computed from (empty: every finished model of the run).

    Returns:
        The reason, a clause to follow "because", or None."""
    if not run.config_path.exists():
        return None
    name = Path(str(run.profile)).stem if run.profile else None  # a shipped profile by name or by its file's path
    if name in PLUMBING_PROFILES:
        return f"the {name!r} profile is {PLUMBING_PROFILES[name]}"
    losses = {r.key: run.summary(r.variant, r.seed).get("final_val_loss")
              for r in run.models().query("complete").itertuples() if not models or r.key in models}
    if not losses:
        return None
    why = short_of(losses, unigram_loss(run.frequencies(), run.tokens("validation")), "unigram")
    return why if why or claim not in LAYERWISE else short_of(losses, validation_bigram(run), "bigram")


def validation_bigram(run: Run) -> float:
    """The bigram baseline (nats) on the validation windows the models' loss is scored on."""
    cfg = run.config
    study = next((cfg[s] for s in ("study", "ablation") if isinstance(cfg.get(s), dict) and cfg[s].get("seq_len")), {})
    return bigram.fit(run.tokens("train"), len(run.frequencies())).loss(run.tokens("validation"), study.get("seq_len"), study.get("eval_tokens"))


def short_of(losses: Mapping[str, float | None], baseline: float, kind: str) -> str | None:
    """The reason when a model's validation loss is not strictly below the ``kind`` baseline (NaN or missing: not
    below), else None."""
    bad = {k: v for k, v in losses.items() if not (isinstance(v, (int, float)) and v < baseline)}
    if not bad:
        return None
    listed = ", ".join(f"{k} {v:.3f}" if isinstance(v, (int, float)) else f"{k} missing" for k, v in bad.items())
    return (f"{len(bad)} of {len(losses)} models do not beat the {kind} baseline of {baseline:.3f} nats (validation "
            f"loss {listed}): {_WHY[kind]}")


def banner(reason: str) -> str:
    """The first line of every verdict of a run that is not evidence.

    Args:
        reason: what :func:`not_meaningful` returned.

    Returns:
        The banner line."""
    return (f"NOT MEANINGFUL: these numbers cannot be read as evidence for or against the claim, because {reason}. "
            "The lines below only show that the analysis runs.")
