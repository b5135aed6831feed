"""Every claim's rule, threshold and verdict words, whether a run is evidence at all, and the claims' records.

``status`` owns the words ("holds", "does not hold", "not meaningful"); ``claims`` the four rules; ``depth`` claim 3
per model depth; ``evidence`` the runs that cannot be evidence; ``records`` what ``summary.json`` is made of.
"""

from tiebias.verdicts import claims, depth, evidence, records, status
from tiebias.verdicts.claims import Verdict
from tiebias.verdicts.status import DOES_NOT_HOLD, HOLDS, NOT_MEANINGFUL, STALE

__all__ = ["DOES_NOT_HOLD", "HOLDS", "NOT_MEANINGFUL", "STALE", "Verdict", "claims", "depth", "evidence", "records", "status"]
