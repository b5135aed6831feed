"""reproduction.md's [Re] for a claim whose headline numbers differ without a cause says which part reproduced."""

from __future__ import annotations

import math

from tiebias.verdicts.reproduction import Estimate, Row, which_part


def row(source: str, cause: str, paper: float = 0.669, ours: float = 0.802) -> Row:
    return Row(f"K/{source}/{cause}", source, "untied output -> tied", paper, Estimate(ours, math.nan, math.nan, 2, "x"),
               None, cause, "why")


def test_re_with_unexplained_headline_numbers_names_what_reproduced_and_what_not() -> None:
    rows = [row("Table 1", "unexplained"), row("Table 1", "agrees"), row("Figure 4", "unexplained")]
    text = which_part({"claim": "1. alignment", "kit": "[Re]"}, rows)
    assert text == ("reproduced: the sign and the ordering the claim's rule compares; not reproduced: the size, 1 of 2 "
                    "of its headline numbers (Table 1) differ from ours without a found cause (e.g. untied output -> "
                    "tied: paper 0.669, ours 0.802)")
    assert which_part({"claim": "1. alignment", "kit": "[Re]"}, [row("Table 1", "agrees")]) == ""
    assert which_part({"claim": "1. alignment", "kit": "[¬Re]"}, rows) == ""  # [¬Re] says it all
    assert which_part({"claim": "3. early layers pay", "kit": "not converged"}, rows) == ""
