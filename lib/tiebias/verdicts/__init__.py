"""Each claim's rule (``claims``), claim 3 per depth (``depth``), the verdict words (``status``), runs that are not
evidence (``evidence``), the claims' records (``records``) and the paper's numbers beside ours (``reproduction``)."""

from tiebias.verdicts import claims, depth, evidence, records, status

__all__ = ["claims", "depth", "evidence", "records", "status"]
