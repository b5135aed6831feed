"""A claim's record, ``<run>/results/<claim>.json``: checked before it is written and when it is read back; it keeps
its models' identities and reads "stale" once one of them changes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiebias.config.checks import is_int
from tiebias.config.variants import parse_key
from tiebias.run.files import DamagedFileError, read_json, sanitise_json, write_json_atomic
from tiebias.run.folder import Run
from tiebias.verdicts.status import DOES_NOT_HOLD, HOLDS, NOT_MEANINGFUL, STALE, status_of, verdict_of

CLAIMS = {
    "claim1_alignment": "The tied matrix is closer to the untied output matrix than to the untied input matrix",
    "claim2_gradient_flow": "The output path carries most of the gradient reaching the tied matrix",
    "claim3_tuned_lens": "Tied models' early layers have higher tuned-lens KL than untied models'",
    "claim3_tuned_lens_reference": "Claim 3's rule under the paper's reading of the same lenses (hidden state i "
                                   "through translator i - 1, as its public code; its Figure 2 numbers use it)",
    "claim4_causality": "Scaling the input-path gradient moves the tied matrix towards the input space",
}
NOTEBOOK_OF = {"claim1_alignment": "02_align", "claim2_gradient_flow": "01_train", "claim3_tuned_lens": "03_lens",
               "claim3_tuned_lens_reference": "03_lens", "claim4_causality": "04_ablate"}
VALUE_RANGES = {"claim1_alignment": (-2.0, 2.0), "claim2_gradient_flow": (0.0, 1.0)}  # a cosine difference, a share


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _number(name: str, x: Any) -> float:
    """A finite float, else a ValueError naming the parameter."""
    try:
        if isinstance(x, bool):
            raise TypeError
        f = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {x!r} is not a number") from None
    if not math.isfinite(f):
        raise ValueError(f"{name}: {x!r} is not a finite number")
    return f


@dataclass
class Headline:
    """What a claim's record states; ``status`` defaults to ``value > threshold`` (a NaN value needs one)."""

    claim: str
    value: float
    threshold: float
    statement: str
    unit: str = ""
    spread: float | None = None
    noise_floor: float | None = None
    paper: Any = None
    n_seeds: int | None = None
    details: dict | None = None
    status: str | None = None
    models: Sequence[str] | None = None


def record(run: Run, headline: Headline, not_meaningful: str | None = None) -> dict:
    """Store one claim's record under the run's writer lock, everything checked first; returns the entry."""
    h = headline
    claim, value, status, n_seeds, details, unit = h.claim, h.value, h.status, h.n_seeds, h.details, h.unit
    spread, noise_floor = h.spread, h.noise_floor
    if claim not in CLAIMS:
        raise ValueError(f"claim: unknown value {claim!r}; allowed: {', '.join(CLAIMS)}")
    undetermined = isinstance(value, float) and math.isnan(value) and bool(status)
    value = math.nan if undetermined else _number("value", value)
    threshold = _number("threshold", h.threshold)
    if n_seeds is not None and (not is_int(n_seeds) or n_seeds < 1):
        raise ValueError(f"n_seeds: {n_seeds!r} is not allowed; need None or an integer >= 1")
    if status is not None and (not isinstance(status, str) or not status.strip()):
        raise ValueError(f"status: {status!r} is not allowed; need None or a non-empty string")
    if not_meaningful is not None and (not isinstance(not_meaningful, str) or not not_meaningful.strip()):
        raise ValueError(f"not_meaningful: {not_meaningful!r} is not allowed; need None or a non-empty reason")
    if details is not None and not isinstance(details, dict):
        raise ValueError(f"details: {type(details).__name__} is not a dict")
    used = {}
    if h.models is not None and (isinstance(h.models, str) or not isinstance(h.models, Sequence)):
        raise ValueError(f"models: {h.models!r} is not allowed; need None or a list of model keys such as ['tied-s0']")
    for key in h.models or ():
        try:
            v, seed = parse_key(key)
        except (TypeError, ValueError):
            raise ValueError(f"models: {key!r} is not a model key; need '<variant>-s<seed>' such as 'tied-s0'") from None
        if (ident := run.model_id(v, seed)) is not None:
            used[key] = ident
    value_null = str(status)  # why a NaN value is stored as null: the rule's own reason, not the run's
    if not_meaningful:
        status = NOT_MEANINGFUL
    status = status or status_of(value > threshold)
    entry = {"claim": claim, "description": CLAIMS[claim], "value": value, "threshold": threshold,
             "verdict": verdict_of(status), "above_threshold": None if undetermined else bool(value > threshold),
             "status": status, "statement": str(h.statement), "unit": unit,
             "spread": spread, "noise_floor": noise_floor, "paper": h.paper, "n_seeds": n_seeds,
             "details": details or {}, "models": used,
             **({"not_meaningful": not_meaningful} if not_meaningful else {})}
    one = "one seed: a spread needs two or more" if n_seeds == 1 else "not a number (fewer than two values?)"
    reasons = {"spread": one, "noise_floor": "not a number (the noise floor needs two or more seeds)",
               "value": value_null}
    sanitise_json(entry)  # not serialisable: stop before the file is touched
    with run.writing(f"recording {claim}"):
        write_json_atomic(run.result_path(claim), entry, reasons)
    return {**entry, "value": _finite(value), "spread": _finite(spread), "noise_floor": _finite(noise_floor)}


def results(run: Run) -> dict[str, dict]:
    """The claims recorded in a run, each checked."""
    out = {}
    for p in sorted(run.results_dir.glob("*.json")):
        nb = NOTEBOOK_OF.get(p.stem)
        todo = (f"delete it and rerun {'notebook ' + nb if nb else 'the notebook that wrote it'}"
                + (f" (python -m tiebias study --only {nb}, with this run's --profile and --run-dir)" if nb else ""))
        out[p.stem] = check_record(p, read_json(p, todo), todo)
    return out


def _refused(path: Path, why: str, todo: str) -> DamagedFileError:
    return DamagedFileError(f"{path}: refused: {why}; {todo}")


def check_record(path: Path, entry: Any, todo: str) -> dict:
    """A record as read back, refused (naming file, field and ``todo``) unless :func:`record` could have written it."""
    if not isinstance(entry, dict):
        raise _refused(path, f"a claim's record is a JSON object, this file holds a {type(entry).__name__}", todo)
    for key, kind in (("claim", str), ("statement", str), ("status", str), ("threshold", (int, float))):
        if key not in entry:
            raise _refused(path, f"field {key!r} is missing", todo)
        if isinstance(entry[key], bool) or not isinstance(entry[key], kind):
            raise _refused(path, f"field {key!r} is {entry[key]!r}, not a {'string' if kind is str else 'number'}",
                           todo)
    claim, status, threshold, value = entry["claim"], entry["status"], entry["threshold"], entry.get("value")
    if claim != path.stem:
        raise _refused(path, f"field 'claim' is {claim!r}, the file is {path.stem}'s record", todo)
    if not status.strip() or status == STALE:
        raise _refused(path, f"field 'status' is {status!r}, not a status a notebook records", todo)
    if not math.isfinite(threshold):
        raise _refused(path, f"field 'threshold' is {threshold!r}, not a finite number", todo)
    for key in ("value", "spread", "noise_floor"):
        x = entry.get(key)
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)):
            raise _refused(path, f"field {key!r} is {x!r}, not a finite number or null", todo)
    lo, hi = VALUE_RANGES.get(claim, (-math.inf, math.inf))
    if value is not None and not lo <= value <= hi:
        raise _refused(path, f"field 'value' is {value!r}, outside [{lo:g}, {hi:g}] where {claim}'s number lies", todo)
    if status in (HOLDS, DOES_NOT_HOLD) and value is None:
        raise _refused(path, f"status {status!r} without a value (null)", todo)
    above = None if value is None else bool(value > threshold)
    if status in (HOLDS, DOES_NOT_HOLD) and status != status_of(bool(above)):
        raise _refused(path, f"status {status!r} contradicts value {value!r} against threshold {threshold!r} (the "
                       f"rule gives {status_of(bool(above))!r})", todo)
    if entry.get("verdict") != verdict_of(status):
        raise _refused(path, f"verdict {entry.get('verdict')!r} contradicts status {status!r} (which gives "
                       f"{verdict_of(status)!r})", todo)
    if "above_threshold" in entry and entry["above_threshold"] is not above:
        raise _refused(path, f"above_threshold {entry['above_threshold']!r} contradicts value {value!r} against "
                       f"threshold {threshold!r}", todo)
    if entry.get("not_meaningful") is not None and status != NOT_MEANINGFUL:
        raise _refused(path, f"status {status!r} beside the reason the run is not evidence ({entry['not_meaningful']!r}"
                       f"): a run that is not evidence records {NOT_MEANINGFUL!r}", todo)
    n = entry.get("n_seeds")
    if n is not None and (not is_int(n) or n < 1):
        raise _refused(path, f"field 'n_seeds' is {n!r}, not null or an integer >= 1", todo)
    for key, kind in (("unit", str), ("details", dict), ("models", dict), ("not_meaningful", str)):
        if entry.get(key) is not None and not isinstance(entry[key], kind):
            raise _refused(path, f"field {key!r} is a {type(entry[key]).__name__}, not a {kind.__name__}", todo)
    return entry


def stale(run: Run, entry: dict, known: dict[str, str | None] | None = None) -> str | None:
    """Why a record no longer describes the run's models, with the notebook to rerun; None while they are as
    recorded (``known`` caches identities)."""
    used = entry.get("models")
    if not isinstance(used, dict) or not used:
        return None  # recorded before records named their models, or from no model of the run
    known = {} if known is None else known
    changed, gone = [], []
    for key, then in used.items():
        if key not in known:
            try:
                known[key] = run.model_id(*parse_key(key))
            except (TypeError, ValueError):
                known[key] = None
        if known[key] is None:
            gone.append(key)
        elif known[key] != then:
            changed.append(key)
    if not changed and not gone:
        return None
    nb = NOTEBOOK_OF.get(entry.get("claim", ""), "the notebook that recorded it")
    what = "; ".join([f"retrained since: {', '.join(changed)}"] * bool(changed)
                     + [f"deleted or unfinished since: {', '.join(gone)}"] * bool(gone))
    first = "train them again (01_train, or 04_ablate for its variants), then " if gone else ""
    return (f"computed from models {what}; {first}rerun {nb} (python -m tiebias study --only {nb}, with this run's "
            "--profile and --run-dir) to record it from the models as they are")


def current_results(run: Run) -> dict[str, dict]:
    """The claims recorded so far, each whose models changed since marked "stale"."""
    known: dict[str, str | None] = {}
    out = {}
    for claim, entry in results(run).items():
        why = stale(run, entry, known) if isinstance(entry, dict) else None
        out[claim] = entry if why is None else {
            **entry, "status": STALE, "verdict": verdict_of(STALE),
            "stale": {"reason": why, "rerun": NOTEBOOK_OF.get(claim), "recorded_status": entry.get("status")}}
    return out

