"""The words of a verdict: "holds", "does not hold", a rule's own outcome, "not meaningful", "stale"."""

HOLDS, DOES_NOT_HOLD, NOT_MEANINGFUL, STALE = "holds", "does not hold", "not meaningful", "stale"


def status_of(holds: bool) -> str:
    """The stored status of a rule's yes/no outcome."""
    return HOLDS if holds else DOES_NOT_HOLD


def verdict_of(status: str) -> bool | None:
    """A status as a yes/no verdict: None for any status other than "holds" / "does not hold"."""
    return {HOLDS: True, DOES_NOT_HOLD: False}.get(status)


def printed(status: str, *, loud: bool = True) -> str:
    """A status as a notebook prints it: "HOLDS" ("holds" with ``loud=False``), "does NOT hold", else upper case."""
    if status == HOLDS:
        return "HOLDS" if loud else HOLDS
    return "does NOT hold" if status == DOES_NOT_HOLD else status.upper()
