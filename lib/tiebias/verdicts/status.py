"""The words of a verdict, defined once: what a record stores as its status and what a notebook prints.

Every claim's status is "holds", "does not hold", a rule's own outcome (claim 3's "not converged", claim 4's one-seed
status) or, for a run that is not evidence (:mod:`tiebias.verdicts.evidence`), "not meaningful"; the report calls a
record whose models changed since "stale".
"""

from __future__ import annotations

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_MEANINGFUL = "not meaningful"
"""The status of every claim of a run that is not evidence (:func:`tiebias.verdicts.evidence.not_meaningful`)."""
STALE = "stale"
"""The status ``summary.json`` and ``report.html`` give a claim whose models were retrained or deleted since it was
recorded (:func:`tiebias.verdicts.records.current_results`), until its notebook records it again."""


def status_of(holds: bool) -> str:
    """The stored status of a rule's yes/no outcome: "holds" or "does not hold"."""
    return HOLDS if holds else DOES_NOT_HOLD


def verdict_of(status: str) -> bool | None:
    """A stored status as a yes/no verdict: True for "holds", False for "does not hold", None for any other status
    (a rule's own outcome or "not meaningful": neither yes nor no)."""
    return {HOLDS: True, DOES_NOT_HOLD: False}.get(status)


def printed(status: str, *, loud: bool = True) -> str:
    """A status as a notebook prints it: "HOLDS" ("holds" with ``loud=False``), "does NOT hold", else upper case."""
    if status == HOLDS:
        return "HOLDS" if loud else HOLDS
    if status == DOES_NOT_HOLD:
        return "does NOT hold"
    return status.upper()


__all__ = ["DOES_NOT_HOLD", "HOLDS", "NOT_MEANINGFUL", "STALE", "printed", "status_of", "verdict_of"]
