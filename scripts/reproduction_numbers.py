"""The reproduction report's summary as the README quotes it, printed from a run folder's ``reproduction.json``.

    python scripts/reproduction_numbers.py runs/default

Prints the per-claim [Re] / [¬Re] table, the count of each cause (rows that set one number of ours beside several of
the paper's count once), the rows whose cause is ``unexplained`` and claim 3's
mechanism (03's ``lens_row1_mechanism`` and 04's ``lens_row1_penalty_k`` tables, when the run has them): the README's
"Reproduction report" and "Why the paper's reading costs a tied model" figures come from it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from tiebias.lens import mechanism


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    run = ap.parse_args(argv).run
    path = run / "reproduction.json"
    if not path.is_file():
        raise SystemExit(f"run: {run} has no reproduction.json; run python -m tiebias reproduction {run} on it first")
    data = json.loads(path.read_text(encoding="utf-8"))
    print("| claim | the kit's protocol | the paper's protocol |\n|---|---|---|")
    for c in data["claims"]:
        print(f"| {c['claim']} | {c['kit']} | {c['paper_protocol']} |")
    rows = [r for r in data["rows"] if not r["setting"]]
    seen = {(r.get("group") or r["key"], r["cause"]) for r in rows}  # one number of ours beside several: once
    counts = {c: sum(cause == c for _, cause in seen) for c in data["causes_vocabulary"]}
    print(f"\n{len({g for g, _ in seen})} comparisons ({len(rows)} numbers of the paper): "
          + ", ".join(f"{c} {n}" for c, n in counts.items() if n))
    by_source: dict[str, int] = {}
    for r in rows:
        if r["cause"] == "unexplained":
            by_source[r["source"]] = by_source.get(r["source"], 0) + 1
    print("unexplained by source: " + ", ".join(f"{s} {n}" for s, n in by_source.items()))
    mech = run / "metrics" / "lens_row1_mechanism.csv"
    if mech.is_file():
        t = pd.read_csv(mech)
        print("\n| measure | tied | untied | tied - untied [95% CI] |\n|---|---|---|---|")
        for r in t.itertuples():
            print(f"| {r.measure} | {r.tied:.3g} | {r.untied:.3g} | {r.difference:+.3g} [{r.ci_low:+.3g}, "
                  f"{r.ci_high:+.3g}] |")
        both = t.set_index("measure").loc["penalty: both"]
        print(f"\nThe paper's reading costs the tied model {both.tied:.3g} bits at row 1 and the untied model "
              f"{both.untied:.3g} (difference {both.difference:+.3g} [{both.ci_low:+.3g}, {both.ci_high:+.3g}]).")
    pen = run / "metrics" / "lens_row1_penalty_k.csv"
    if pen.is_file():
        p = pd.read_csv(pen)
        print("\n" + ", ".join(f"k = {k:g}: {g.penalty.mean():.3g} bits (sd {g.penalty.std():.2g})"
                              for k, g in p.groupby("k")))
        tr = mechanism.k_trend(p)
        print(f"penalty against log2 k: {tr['slope']:+.3g} bits per doubling of k [{tr['ci_low']:+.3g}, "
              f"{tr['ci_high']:+.3g}]: {tr['word']}")


if __name__ == "__main__":
    main()
