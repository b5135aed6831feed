"""Which models of a run are finished: the check an analysis makes before it reads any of them.

A model folder without its ``complete.json`` was interrupted (01 or 04 stopped mid-training). An analysis
that quietly kept the finished models only would compare fewer seeds than the run was made with, and
claim 1 would change its method (one pair: a bootstrap over tokens instead of cross-seed pairs) without a
word. So the analyses refuse a half-made run, naming its unfinished models and what to do, and a model folder
copied in from another run (trained on other data), naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from tiebias.config.variants import Variant, model_key
from tiebias.run.folder import Run
from tiebias.run.variation import ParameterChangedError

COMPLETE, INTERRUPTED, MISSING = "complete", "interrupted", "missing"


def model_status(run: Run, variants: Sequence[str | Variant], seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per variant and seed: key, variant, seed, status (complete, interrupted or missing).

    ``seeds`` None: every seed that has a model folder of any of ``variants``.
    """
    names = [Variant.parse(v).name for v in variants]
    if seeds is None:
        listed = run.models()
        seeds = sorted(set(listed[listed.variant.isin(names)].seed.tolist()))
    rows = []
    for s in seeds:
        for v in names:
            status = (COMPLETE if run.is_complete(v, s) else INTERRUPTED if run.model_dir(v, s).is_dir()
                      else MISSING)
            rows.append({"key": model_key(v, s), "variant": v, "seed": int(s), "status": status})
    return pd.DataFrame(rows, columns=["key", "variant", "seed", "status"])


def require_complete(run: Run, variants: Sequence[str | Variant], seeds: Sequence[int] | None = None, *,
                     trained_by: str = "01_train") -> list[int]:
    """The seeds to analyse, each with a finished model of every variant; a half-made run is refused.

    Args:
        run: the run folder.
        variants: the variants every seed needs (names or :class:`tiebias.config.variants.Variant`).
        seeds: the seeds asked for (None: every seed with a model folder of any of ``variants``).
        trained_by: the notebook the error message says to run again.

    Returns:
        The seeds, ascending (``[]`` for a run without any of these models).

    ``seeds`` None: every seed with a model folder of any of ``variants`` (an empty run gives ``[]``, for
    the caller to refuse in its own words). Any of those models interrupted or missing stops with a
    ValueError naming each, and saying to run ``trained_by`` again (it resumes them) or to choose the
    seeds whose models are finished; a finished one trained on another run's data (copied in) stops with
    :class:`tiebias.run.folder.ForeignModelError` naming it (:meth:`tiebias.run.folder.Run.check_model_origin`).
    """
    status = model_status(run, variants, seeds)
    bad = status[status.status != COMPLETE]
    if bad.empty:
        for r in status.itertuples():
            run.check_model_origin(r.variant, r.seed)
        return sorted(set(status.seed.tolist()))
    what = {INTERRUPTED: "interrupted: no complete.json", MISSING: "not trained"}
    listed = ", ".join(f"{r.key} ({what[r.status]})" for r in bad.itertuples())
    done = sorted(set(status.seed) - set(bad.seed))
    alternative = f"; or analyse only the finished seeds: seeds={done}" if done else ""
    missing = bad[bad.status == MISSING]
    # a model never started may be one the last run's parameters left out: then "the same parameters" would loop
    how = (f"with variants that include {', '.join(repr(v) for v in dict.fromkeys(missing.variant))} and seeds that "
           f"include {', '.join(map(str, dict.fromkeys(missing.seed)))}" if len(missing) else "with the same parameters")
    raise ValueError(f"run {run.path}: unfinished models: {listed}. Run {trained_by} again {how}: it resumes the "
                     f"interrupted models and trains the missing ones{alternative}")


__all__ = ["COMPLETE", "INTERRUPTED", "MISSING", "model_status", "require_complete"]


def check_profile(run: Run, profile: str, notebook: str) -> None:
    """Refuse to read a run with another profile than the one its work was done with (:attr:`Run.profile`), before
    anything is read or written: :class:`ParameterChangedError`, as 01 and 04 give for a run trained with other values.

    An analysis run with another profile would read the run's models with that profile's settings (a smoke lens
    budget on a class run) and record its claims in the run, where the verdicts and the report read the run's
    profile. A run that records no profile yet (its 01 or 04 has not finished) passes.

    Args:
        run: the run folder the notebook reads.
        profile: the profile the notebook was given (its resolved ``profile`` parameter).
        notebook: the notebook's name, for the way out the error names.
    """
    have = run.profile
    if have is not None and profile != have:
        raise ParameterChangedError(
            run.path, {"profile": (have, profile)}, "its models were made and its claims are judged with the folder's "
            "profile", f"run {notebook} with the run's profile: profile = {have!r} in the parameters cell, --profile "
            f"{have} on the command line (make study PROFILE={have}), -p profile {have} with papermill")
