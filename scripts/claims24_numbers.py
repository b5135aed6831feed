"""Claims 2 and 4 taken apart, and the scale axis, as the README quotes them, printed from finished run folders.

    python scripts/claims24_numbers.py runs/default [--scale runs/scale]

Prints claim 2's output share per window under the paper's metric and ours, beside the paper's log (01's
``claim2_windows`` table), claim 4's shift at k = 5 under each ingredient (04's ``claim4_ingredients`` table), and,
with ``--scale``, the scale axis (04's ``scale_summary`` and ``scale_trends`` tables of a scale-profile run): the
README's "Claims 2 and 4 in depth" figures come from it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from tiebias.ablate import ingredients, scale
from tiebias.run.folder import Run


def _table(run: Run, name: str, notebook: str) -> pd.DataFrame:
    """A table of ``run``; a SystemExit naming it and the notebook that writes it when it is missing."""
    path = run.table_path(name)
    if not path.is_file():
        raise SystemExit(f"run: {run.path} has no metrics/{name}.csv; run {notebook} on it first")
    return pd.read_csv(path)


def _pct(r: pd.Series) -> str:
    return f"{r['mean']:.1%} [{r.ci_low:.1%}, {r.ci_high:.1%}]"


def claim2(run: Run) -> None:
    """Claim 2's windows: a Markdown table of ours (exact and proxy, L2) beside the paper's log, and the sentences."""
    t = _table(run, "claim2_windows", "01_train")
    cfg = run.config["study"]
    print("| window (steps) | ours, exact (kit) | ours, proxy (paper's metric) | paper's log, proxy |")
    print("|---|---|---|---|")
    for w, g in t.groupby("window", sort=False):
        g = g.set_index("metric")
        e, p = g.loc["exact l2"], g.loc["proxy l2"]
        print(f"| {w} ({int(e.first_step)}-{int(e.last_step)}) | {_pct(e)} | {_pct(p)} | {p.paper:.1%} |")
    print()
    p = t[t.metric == "proxy l2"]
    print(f"Like for like (the paper's metric, proxy with L2 norms; our warmup {cfg['warmup_steps']} steps, the paper's "
          "1000), ours vs the paper's log: "
          + "; ".join(f"{r.window} {r.mean:.1%} vs {r.paper:.1%}" for r in p.itertuples() if pd.notna(r.paper)) + ".")


def claim4(run: Run) -> None:
    """Claim 4's ingredients at k = 5 (and the reference points' other k): a Markdown table and the sentence."""
    t = _table(run, "claim4_ingredients", "04_ablate")
    print("| ingredient | k | towards untied input (95% CI) | from untied output (95% CI) | holds the paper's? | "
          "val loss, k = 5 |")
    print("|---|---|---|---|---|---|")
    for r in t.to_dict("records"):
        ok = "" if pd.isna(r["matches_paper"]) else ("yes" if str(r["matches_paper"]) == "True" else "no")
        loss = f"{r['val_loss_k5']:.2f}" if pd.notna(r.get("val_loss_k5", math.nan)) else ""
        print(f"| {r['ingredient']} | {r['k']:g} | {r['vs_untied_input']:+.4f} [{r['vs_untied_input_ci_low']:+.4f}, "
              f"{r['vs_untied_input_ci_high']:+.4f}] | {r['vs_untied_output']:+.4f} [{r['vs_untied_output_ci_low']:+.4f}, "
              f"{r['vs_untied_output_ci_high']:+.4f}] | {ok} | {loss} |")
    print()
    s = ingredients.PAPER_SHIFT
    print(f"At k = {ingredients.K:g}, the paper's shift is {s['vs_untied_input']:+.3f} (towards the untied input matrix) "
          f"and {s['vs_untied_output']:+.3f} (from the untied output matrix); the column 'holds the paper's?' says "
          "which rows' 95% intervals hold it on both cosines.")


def scale_axis(run: Run) -> None:
    """The scale summary (mean [95% CI] per point and quantity) as a Markdown table, and the trend sentences."""
    s = _table(run, "scale_summary", "04_ablate with the scale profile")
    tr = _table(run, "scale_trends", "04_ablate with the scale profile")
    qs = list(dict.fromkeys(q for q in tr.quantity))
    shown = [q for q in qs if q in set(s.quantity)] + ["val_loss_tied", "val_loss_untied", "embedding_share_tied"]
    print("| vocabulary | width | steps | tokens per row | " + " | ".join(shown) + " |")
    print("|---|---|---|---|" + "---|" * len(shown))
    for _, g in s.groupby("point", sort=False):
        first = g.iloc[0]
        steps = f"{int(first['steps'])}" if "steps" in g else ""
        tpr = f"{first['tokens_per_row']:,.1f}" if "tokens_per_row" in g else ""
        g = g.set_index("quantity")
        cells = [f"{g.loc[q, 'mean']:.3f} [{g.loc[q, 'ci_low']:.3f}, {g.loc[q, 'ci_high']:.3f}]" if q in g.index
                 else "" for q in shown]
        print(f"| {first['vocab_size']} | {first['width']} | {steps} | {tpr} | " + " | ".join(cells) + " |")
    print()
    for t in tr.to_dict("records"):
        if not (isinstance(t["slope"], float) and math.isnan(t["slope"])):
            t["sizes"] = [round(x) for x in sorted(s[s.quantity == t["quantity"]][t["axis"]].unique().tolist())]
            axis, word = scale.AXES[t["axis"]], {"no trend": "shows no trend"}.get(t["word"], t["word"])
            print(f"- {t['quantity']} {word} with {axis} ({t['sizes'][0]} to {t['sizes'][-1]}; slope {t['slope']:+.4f} "
                  f"per doubling, 95% CI [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]); the line predicts "
                  f"{t['at_paper']:+.3f} [{t['at_paper_low']:+.3f}, {t['at_paper_high']:+.3f}] at the paper's {axis} "
                  f"({scale.PAPER_SCALE[t['axis']]:,.0f}), an extrapolation.")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder after 01_train and 04_ablate")
    ap.add_argument("--scale", type=Path, help="a scale-profile run folder after 04_ablate")
    args = ap.parse_args(argv)
    run = Run(args.run)
    claim2(run)
    print()
    claim4(run)
    if args.scale is not None:
        print()
        scale_axis(Run(args.scale))


if __name__ == "__main__":
    main()
