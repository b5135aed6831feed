"""Claim 3 across depths: the per-depth table, the slope of the gap against depth, and notebook 03's sentence."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tiebias import stats
from tiebias.lens import tables as lens_depth
from tiebias.verdicts import depth as verdict_depth

SEEDS = [0, 1, 2, 3, 4]
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "03_lens.ipynb"


def describe_depth(table: pd.DataFrame) -> str:
    """What notebook 03's depth cell prints for a depth table (its own code, run on ``table``)."""
    cell = next("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if "against_first" in
                "".join(c["source"]))
    code = textwrap.dedent(cell[cell.index("    def against_first"):cell.index("else:\n    DEPTH = None")])
    said: list[str] = []
    ns = {"DEPTH": table, "tables": lens_depth, "pd": pd, "why": None, "print": lambda *a, **_: said.extend(a)}
    exec(code, ns)
    return " ".join(said)


def ladder_table(n_layers: int, early_gap: float, *, noise: float = 0.05, moved: float = 0.0) -> pd.DataFrame:
    """A lens-ladder table (``train_lens_ladders`` layout, per layer) whose tied models read ``early_gap`` bits worse at
    every layer but the output, seed by seed ``early_gap`` +- ``noise`` (the reference reading 1 bit more);
    rung 1 differs from rung 2 by ``moved`` bits."""
    rng = np.random.default_rng(n_layers)
    rows = []
    for seed in SEEDS:
        jitter = noise * rng.standard_normal()
        for budget in (1, 2):
            for protocol, extra in (("package", 0.0), ("reference", 1.0)):
                for layer in range(n_layers + 1):
                    base = 3.0 * (1 - layer / n_layers)
                    tied = base + (early_gap + jitter + extra + (moved if budget == 1 else 0.0)
                                   if layer < n_layers else 0.0)
                    for variant, kl in (("tied", tied), ("untied", base)):
                        rows.append({"variant": variant, "seed": seed, "step": 300, "recipe": "cpu", "budget": budget,
                                     "lens_steps": 10 * budget, "protocol": protocol, "layer": layer,
                                     "kl_tuned_bits": kl})
    return pd.DataFrame(rows)


def test_slope_recovers_a_line_and_its_interval_covers_it() -> None:
    x = np.repeat([6, 10, 16], 5)
    y = 0.02 * x + np.random.default_rng(0).normal(0, 0.01, x.size)
    s = stats.slope(x, y)
    assert s.n == 15 and s.ci_low < 0.02 < s.ci_high and s.ci_high - s.ci_low < 0.01
    flat = stats.slope([1, 2], [3, 3])
    assert flat.slope == 0 and math.isnan(flat.ci_low)
    with pytest.raises(ValueError, match="^x: need at least two distinct"):
        stats.slope([2, 2, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="same length"):
        stats.slope([1, 2, 3], [1, 2])


def test_depth_table_applies_claim3_per_depth_and_protocol() -> None:
    tables = {"small": ladder_table(6, 0.0), "small-deep": ladder_table(10, 0.3), "small-16": ladder_table(16, 0.6)}
    t = verdict_depth.depth_table(tables, ["package", "reference"])
    assert t.protocol.tolist() == ["package"] * 3 + ["reference"] * 3
    assert t.n_layers.tolist() == [6, 10, 16] * 2 and set(t.n_seeds) == {5} and set(t.budget) == {2}
    pkg = t[t.protocol == "package"]
    np.testing.assert_allclose(pkg.gap, [0.0, 0.3, 0.6], atol=0.1)  # the built-in gaps, within the seed jitter
    assert pkg.verdict.tolist() == ["does not hold", "holds", "holds"]
    assert (t[t.protocol == "reference"].gap.to_numpy() > pkg.gap.to_numpy() + 0.8).all()
    assert all(len(p) == 5 for p in t.per_seed)
    assert (t.converged == True).all()  # noqa: E712 (numpy bools)


def test_depth_trend_and_sentence_say_whether_the_gap_grows() -> None:
    four = {f"d{n}": ladder_table(n, 0.04 * (n - 6)) for n in (6, 8, 12, 16)}
    grows = verdict_depth.depth_table(four, ["package"])
    s = lens_depth.depth_trend(grows, "package")
    assert s.ci_low > 0 and 0.03 < s.slope < 0.05
    assert "the gap grows with depth" in describe_depth(grows)
    flat = verdict_depth.depth_table({f"d{n}": ladder_table(n, 0.2) for n in (6, 8, 12, 16)}, ["package"])
    assert "no measurable trend" in describe_depth(flat)
    shrinks = verdict_depth.depth_table({f"d{n}": ladder_table(n, 0.04 * (16 - n)) for n in (6, 8, 12, 16)},
                                        ["package"])
    assert "shrinks" in describe_depth(shrinks)
    one = verdict_depth.depth_table({"a": ladder_table(6, 0.2)}, ["package"])
    assert "one depth only" in describe_depth(one)
    with pytest.raises(ValueError, match="^protocol: 'reference'"):
        lens_depth.depth_trend(grows, "reference")


def test_three_depths_are_compared_by_their_intervals_not_a_slope() -> None:
    t = verdict_depth.depth_table({"a": ladder_table(6, 0.6), "b": ladder_table(10, 0.0), "c": ladder_table(16, 0.0)},
                                  ["package"])
    text = describe_depth(t)
    assert "too few points to claim a slope from" in text and "shrinks" not in text
    assert "10 layers' interval below 6's, 16 layers' interval below 6's" in text
    # the row-1 gap beside the window mean (the fake tables put the same gap on every layer but the output)
    np.testing.assert_allclose(t.row1_gap, [0.6, 0.0, 0.0], atol=0.1)
    assert "at row 1 alone" in text


def test_unconverged_depth_is_reported_as_such() -> None:
    t = verdict_depth.depth_table({"a": ladder_table(6, 0.3, moved=1.0)}, ["package"])
    assert t.verdict.tolist() == ["not converged"] and t.converged.tolist() == [False]
    with pytest.raises(ValueError, match="^tables: need at least one depth"):
        verdict_depth.depth_table({}, ["package"])
