"""Which models of a run are finished: a half-made run is refused (an analysis of the finished models only would
compare fewer seeds than the run was made with), naming its unfinished models and what to do."""

from __future__ import annotations

from collections.abc import Sequence

from tiebias.config.variants import Variant, model_key
from tiebias.run.files import ParameterChangedError
from tiebias.run.folder import Run

__all__ = ["check_profile", "require_complete"]


def require_complete(run: Run, variants: Sequence[str | Variant], seeds: Sequence[int] | None = None) -> list[int]:
    """The seeds to analyse, each with a finished model of every variant that is this run's; else a ValueError
    naming each unfinished model and saying to run 01_train again or to choose the finished seeds.

    Args:
        run: the run. variants, seeds: the models needed (seeds None: every seed with a folder of these variants).

    Returns:
        The seeds whose models are all finished and belong to the run.
    """
    names = [Variant.parse(v).name for v in variants]
    if seeds is None:
        listed = run.models()
        seeds = sorted(set(listed[listed.variant.isin(names)].seed.tolist()))
    status = {(v, int(s)): "complete" if run.is_complete(v, s) else "interrupted: no complete.json"
              if run.model_dir(v, s).is_dir() else "not trained" for s in seeds for v in names}
    bad = {vs: st for vs, st in status.items() if st != "complete"}
    if not bad:
        for v, s in status:
            run.check_model_origin(v, s)
        return sorted({s for _, s in status})
    listed = ", ".join(f"{model_key(v, s)} ({st})" for (v, s), st in bad.items())
    done = sorted({s for _, s in status} - {s for _, s in bad})
    alternative = f"; or analyse only the finished seeds: seeds={done}" if done else ""
    missing = [vs for vs, st in bad.items() if st == "not trained"]
    # a model never started may be one the last run's parameters left out: then "the same parameters" would loop
    how = (f"with variants that include {', '.join(repr(v) for v in dict.fromkeys(v for v, _ in missing))} and seeds "
           f"that include {', '.join(map(str, dict.fromkeys(s for _, s in missing)))}" if missing
           else "with the same parameters")
    raise ValueError(f"run {run.path}: unfinished models: {listed}. Run 01_train again {how}: it resumes the "
                     f"interrupted models and trains the missing ones{alternative}")


def check_profile(run: Run, profile: str, notebook: str) -> None:
    """Refuse (:class:`ParameterChangedError`) to read a run with another profile than its work was done with.

    Args:
        run: the run. profile: the profile the notebook runs with. notebook: its name, for the message.
    """
    have = run.profile
    if have is not None and profile != have:
        raise ParameterChangedError(
            run.path, {"profile": (have, profile)}, "its models were made and its claims are judged with the folder's "
            "profile", f"run {notebook} with the run's profile: profile = {have!r} in the parameters cell, --profile "
            f"{have} on the command line (make study PROFILE={have}), -p profile {have} with papermill")
