"""Claim 3's numbers as the README quotes them, printed from a finished run folder (03_lens's tables and summary.json).

    python scripts/claim3_numbers.py runs/default

Prints the claims-table row's figures (layer-0 tuned- and logit-lens KL, both readings' early-layer gap with its CI
and lens budget), the lens ladder, the four readings as a Markdown table with the layer differences the text quotes,
and the validation losses of the "training length" table. The README's default-profile claim-3 figures come from it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from tiebias.run.folder import Run
from tiebias.verdicts import records


def _ms(s: pd.Series) -> str:
    return f"{s.mean():.3f} ± {s.std(ddof=1):.3f}"


def _needed(run: Run) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Claim 3's two records and 03's two tables of ``run``; a SystemExit naming what is missing and how to make it."""
    claims = records.results(run)  # a damaged record is named with the notebook that rewrites it
    keys = ("claim3_tuned_lens", "claim3_tuned_lens_reference")
    missing = [f"results/{k}.json" for k in keys if k not in claims]
    missing += [f"metrics/{t}.csv" for t in ("lens_per_layer", "lens_readings") if not run.table_path(t).is_file()]
    if missing:
        raise SystemExit(f"run: {run.path} has no {', '.join(missing)}; run 03_lens on it first, with both "
                         "lens_protocols (package, reference)")
    return claims, pd.read_csv(run.table_path("lens_per_layer")), pd.read_csv(run.table_path("lens_readings"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder after 03_lens")
    run = Run(ap.parse_args(argv).run)
    claims, kl, rd = _needed(run)
    kl = kl[kl.protocol == "package"] if "protocol" in kl else kl
    l0 = kl[kl.layer == 0].groupby("variant")
    print(f"layer-0 tuned-lens KL (bits): tied {_ms(l0.get_group('tied').kl_tuned_bits)}, "
          f"untied {_ms(l0.get_group('untied').kl_tuned_bits)}; logit lens: tied "
          f"{l0.get_group('tied').kl_logit_bits.mean():.1f}, untied {l0.get_group('untied').kl_logit_bits.mean():.1f}")
    for key in ("claim3_tuned_lens", "claim3_tuned_lens_reference"):
        c = claims[key]
        d = c["details"]
        conv = d.get("convergence", {})
        print(f"{key}: gap {c['value']:+.3f} bits, 95% CI [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], seed sd "
              f"{c['spread']:.3f}, {c['status']}; budget {d['budget']}x, converged {d['converged']} (last rung moved it "
              f"{conv.get('change', float('nan')):+.4f}, half-width {conv.get('half_width', float('nan')):.3f})")
        print("  ladder: " + ", ".join(f"{r['budget']}x {r['gap']:+.4f}" for r in d["ladder"]))
    print("\n| reading | early-layer gap (bits) | 95% CI | layer 0 tied / untied | layer 1 tied / untied |")
    print("|---|---|---|---|---|")
    for r in rd.itertuples():
        print(f"| ({r.reading}) {r.label.split(' (')[0]} | {r.gap:+.3f} | [{r.ci_low:+.3f}, {r.ci_high:+.3f}] | "
              f"{r.tied_l0:.2f} / {r.untied_l0:.2f} | {r.tied_l1:.2f} / {r.untied_l1:.2f} |")
    by = rd.set_index("reading")
    print(f"\nlens steps: verdict {by.lens_steps['a']}, reference {by.lens_steps['c']}")
    print(f"layer-1 tied - untied: (b) {by.gap_l1['b']:+.2f}, (d) {by.gap_l1['d']:+.2f} bits (paper {by.paper_gap_l1['b']:+.2f});"
          f" layer 0 under (c): {by.gap_l0['c']:+.2f} bits ({by.gap_l0['c'] / by.paper_gap_l0['c']:.0%} of the paper's "
          f"{by.paper_gap_l0['c']:+.2f})")
    seeds = run.config["study"]["seeds"]
    losses = {v: pd.Series([run.metrics(v, s, "val").sort_values("step").val_loss.iloc[-1] for s in seeds]).mean()
              for v in ("tied", "untied")}
    print(f"final validation loss: tied {losses['tied']:.2f} / untied {losses['untied']:.2f}")


if __name__ == "__main__":
    main()
