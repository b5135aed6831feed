"""The four claims: each one's rule, threshold and verdict text, defined once.

1. alignment: gap (untied output -> tied) - (untied input -> tied) above ``NOISE_SDS`` seed sd (one pair: its
   bootstrap CI over tokens above 0);
2. gradient flow: the output path's share of the tied matrix's gradient above ``CLAIM2_SHARE``;
3. tuned lens: the CI of the early-layer KL gap (tied - untied) above 0, at a converged lens budget;
4. causality: with k, the input cosine rises and the output cosine falls by more than ``NOISE_SDS`` seed sd each."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tiebias import stats
from tiebias.align.comparisons import token_gap
from tiebias.config.variants import model_key, parse_key
from tiebias.lens.tables import (
    at_budget,
    at_protocol,
    convergence,
    describe_convergence,
    early_gap,
    ladder_gaps,
)
from tiebias.paper import FIG4_LOG_WINDOWS, FIG4_OUTPUT_SHARE, TABLE1, TABLE2_STEP10K
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.verdicts import evidence, records
from tiebias.verdicts.status import DOES_NOT_HOLD, HOLDS, NOT_MEANINGFUL, printed, status_of

CLAIM3_KEYS = {"package": "claim3_tuned_lens", "reference": "claim3_tuned_lens_reference"}  # one rule, two readings
NOISE_SDS = 2  # "beyond noise": a change larger than this many seed standard deviations
CLAIM2_SHARE = 0.5  # claim 2 holds when the output path carries more than half of the gradient
CLAIM4_RATIO = 1.0  # claim 4 holds when both changes, in units of NOISE_SDS seed sd, are above this


@dataclass
class Verdict(records.Headline):
    """One claim's headline (what its record stores), ``text`` (what the notebook prints) and its models' keys."""

    details: dict = field(default_factory=dict)
    models: list[str] = field(default_factory=list)
    text: str = ""

    @property
    def holds(self) -> bool:
        return bool(self.value > self.threshold)


def record(dest: Run, v: Verdict) -> dict:
    """Store a verdict as its claim's record; from a run that is not evidence "not meaningful", the banner first.

    Args:
        dest: the run (or an external pair's folder) whose ``results/`` holds the record; v: the verdict.

    Returns:
        The stored entry."""
    why = evidence.not_meaningful(dest, v.claim, v.models)
    if why and v.status != NOT_MEANINGFUL:
        v.details["reading"] = v.status or status_of(v.holds)
        v.text, v.status = f"{evidence.banner(why)}\n{v.text}", NOT_MEANINGFUL
    status = v.details.get("reading") if v.status == NOT_MEANINGFUL else v.status
    return records.record(dest, replace(v, status=status), not_meaningful=why)


def models_of(table: pd.DataFrame, variants: Sequence[str] = ()) -> list[str]:
    """The model keys behind an analysis table: its ``variant`` / ``seed`` columns (and the untied model of each
    ``reference_seed``), or each of ``variants`` for every seed in ``seed``, ``seed_source`` or ``seed_target``."""
    pairs: set[tuple[str, int]] = set()
    if "variant" in table and "seed" in table:
        pairs |= {(str(v), int(s)) for v, s in zip(table.variant, table.seed, strict=True)}
    if "reference_seed" in table:
        pairs |= {("untied", int(s)) for s in table.reference_seed}
    seeds = {int(s) for col in ("seed", "seed_source", "seed_target") if col in table for s in table[col].dropna()}
    pairs |= {(v, s) for v in variants for s in seeds}
    return sorted({model_key(v, s) for v, s in pairs})


def beyond_noise(change: float, sd: float) -> bool | None:
    """Whether a change exceeds ``NOISE_SDS`` seed sd (None when there is no sd, e.g. one seed)."""
    return bool(abs(change) > NOISE_SDS * sd) if math.isfinite(sd) else None


def alignment_gap(df: pd.DataFrame, method: str = "orthogonal", *, n_boot: int = 2000, level: float = LEVEL,
                  seed: int = 0) -> dict[str, Any]:
    """Claim 1's numbers on the headline pairing (``cross seed`` when present): the gap per tied model against
    ``NOISE_SDS`` sd over seeds; with one pair a paired bootstrap CI over tokens (threshold: its lower half-width)."""
    pairing = "cross seed" if (df.pairing == "cross seed").any() else "same seed"
    d = df[df.pairing == pairing]
    out_t = d[d.comparison == "untied output -> tied"].groupby("seed_target")[method].mean()
    in_t = d[d.comparison == "untied input -> tied"].groupby("seed_target")[method].mean()
    gap = (out_t - in_t).dropna()
    if gap.empty:
        raise ValueError(f"method: no {method!r} scores for both 'untied output -> tied' and 'untied input -> tied'")
    sd = float(gap.std(ddof=1)) if len(gap) > 1 else math.nan
    floor = df[df.comparison.str.endswith("(noise floor)")].groupby("comparison")[method].mean().to_dict()
    out = {"method": method, "pairing": pairing, "out_to_tied": float(out_t.mean()), "in_to_tied": float(in_t.mean()),
           "gap": float(gap.mean()), "gap_sd": sd, "n": int(len(gap)), "noise_floor": floor}
    if len(gap) > 1:
        threshold = NOISE_SDS * sd
        out.update(basis="seeds", threshold=threshold, holds=bool(out["gap"] > threshold),
                   rule=f"holds if gap > {NOISE_SDS} sd over {len(gap)} tied models = {threshold:.3f}", note="")
        return out
    ci = token_gap(df, method, pairing=pairing, n_boot=n_boot, level=level, seed=seed)
    out.update(basis="tokens", ci_low=ci.ci_low, ci_high=ci.ci_high, ci_level=level, n_boot=n_boot,
               n_tokens=ci.n, threshold=out["gap"] - ci.ci_low, holds=stats.lies_above_zero(ci.ci_low),
               note="one pair: no seed noise floor",
               rule=f"holds if the {level:.0%} bootstrap CI over {ci.n} tokens, [{ci.ci_low:+.3f}, {ci.ci_high:+.3f}], lies "
                    f"above 0 (map fitted once on all tokens; only the scored tokens are resampled)")
    return out


def claim1(table1: pd.DataFrame, method: str, n_seeds: int, *, where: str = "in this run") -> Verdict:
    """Claim 1: the tied matrix sits nearer the output space (:func:`alignment_gap`'s rule).

    Args:
        table1: :func:`tiebias.align.comparisons.table1` (``keep_scores=True`` for one pair); method: the map that
        decides; n_seeds: recorded with the verdict; where: how the closing line names the models.

    Returns:
        The :class:`Verdict` ``claim1_alignment``, the paper's OLMo-1B values and the noise floor beside."""
    c1 = alignment_gap(table1, method)
    if c1["basis"] == "seeds":
        spread = f" ± {c1['gap_sd']:.3f} (sd over {c1['n']} tied models)"
    else:  # one pair: the CI is a bootstrap over tokens, not a spread over seeds
        spread = (f", {c1['ci_level']:.0%} CI [{c1['ci_low']:+.3f}, {c1['ci_high']:+.3f}] (bootstrap over "
                  f"{c1['n_tokens']} tokens; {c1['note']})")
    olmo, neo = TABLE1["OLMo-1B"], TABLE1["GPT-Neo / Pythia"]
    o_out, o_in = olmo["untied output -> tied"]["orthogonal"], olmo["untied input -> tied"]["orthogonal"]
    lines = [f"[{c1['method']}, {c1['pairing']} pairs] untied output -> tied {c1['out_to_tied']:.3f} vs untied input "
             f"-> tied {c1['in_to_tied']:.3f}: gap {c1['gap']:+.3f}{spread}. Paper (OLMo-1B): {o_out:.3f} vs {o_in:.3f}, "
             f"gap {o_out - o_in:+.3f}; GPT-Neo/Pythia: {neo['untied output -> tied']['orthogonal']:.3f} vs "
             f"{neo['untied input -> tied']['orthogonal']:.3f}."]
    fl = c1["noise_floor"]
    if fl:
        lines.append("Noise floor (two seeds of the same kind): " + "; ".join(
            f"{k.replace(' (noise floor)', '')} {v:.3f}" for k, v in fl.items()) + ".")
        tt = fl.get("tied -> tied (noise floor)")
        if tt:
            lines.append(f"The tied matrix aligns with the untied output matrix {c1['out_to_tied'] / tt:.0%} as well as "
                         f"with another tied matrix, and with the untied input matrix {c1['in_to_tied'] / tt:.0%} as well.")
    lines.append(f"Claim 1 (tied closer to untied output than to untied input; rule: {c1['rule']}) "
                 f"{printed(status_of(c1['gap'] > c1['threshold']))} {where}.")
    return Verdict("claim1_alignment", value=c1["gap"], threshold=c1["threshold"], unit=f"{method} cosine gap",
                   statement=f"untied output -> tied {c1['out_to_tied']:.3f} vs untied input -> tied "
                             f"{c1['in_to_tied']:.3f} ({c1['pairing']}, {method}); {c1['rule']}",
                   text="\n".join(lines), spread=c1["gap_sd"], n_seeds=n_seeds,
                   noise_floor=c1["noise_floor"].get("tied -> tied (noise floor)"),
                   paper={"OLMo-1B out->tied": o_out, "OLMo-1B in->tied": o_in}, details=c1,
                   models=models_of(table1, ("tied", "untied")))


def claim2(flow: pd.DataFrame, first_n: int, windows: dict[str, dict[str, float]] | None = None) -> Verdict:
    """Claim 2: the output path's share of the tied matrix's gradient above ``CLAIM2_SHARE``.

    Args:
        flow: one row per tied model (notebook 01's ``summarise_flow``), indexed by model key;
        first_n: the steps read; windows: :func:`tiebias.train.windows.record_details` for the details (None: none).

    Returns:
        The :class:`Verdict` ``claim2_gradient_flow``, spread the sd over seeds, the paper's shares beside."""
    share, ratio = flow.mean_output_share, flow.median_out_in_ratio
    spread = f" ± {share.std(ddof=1):.1%} (sd over {len(share)} seeds)" if len(share) > 1 else " (one seed)"
    value = float(share.mean())
    after = (windows or {}).get("exact l2", {}).get("after warmup")
    after_text = f"; after warmup {after:.1%}" if isinstance(after, float) and math.isfinite(after) else ""
    during = (windows or {}).get("exact l2", {}).get("warmup")
    during_text = f"; during warmup {during:.1%}" if isinstance(during, float) and math.isfinite(during) else ""
    lines = [f"Output path carried {share.mean():.1%}{spread} of the gradient reaching the tied matrix over the first "
             f"{first_n} steps{during_text}{after_text}; median output/input norm ratio {ratio.mean():.1f}x. "
             f"Paper: ~{FIG4_OUTPUT_SHARE['quoted']:.0%} quoted over its first 1000 steps, all of them warmup "
             f"({FIG4_LOG_WINDOWS['l2']['warmup']:.1%} in its published log, {FIG4_LOG_WINDOWS['l2']['after warmup']:.1%}"
             " after warmup; its input norm is a proxy, see the windows above).",
             f"\"Dominates\" means a share above {CLAIM2_SHARE:.0%}: at {value:.1%} the output path's gradient is "
             f"{value / (1 - value):.2f} times the input path's (share / (1 - share)), a lead, not a takeover."
             if 0 < value < 1 else "",
             f"Claim 2 (output path dominates: share > {CLAIM2_SHARE:.0%}) "
             + printed(status_of(value > CLAIM2_SHARE), loud=False) + " in this run."]
    return Verdict("claim2_gradient_flow", value=value, threshold=CLAIM2_SHARE, unit="output share",
                   statement=f"output path carried {share.mean():.1%} of the tied matrix's gradient over the first "
                             f"{first_n} steps{after_text} (exact split)", text="\n".join(x for x in lines if x),
                   spread=share.std(ddof=1) if len(share) > 1 else None, n_seeds=len(share),
                   paper={"quoted": FIG4_OUTPUT_SHARE["quoted"],
                          "reproduction_log": FIG4_OUTPUT_SHARE["reproduction_log_mean"],
                          "log_warmup": FIG4_LOG_WINDOWS["l2"]["warmup"],
                          "log_after_warmup": FIG4_LOG_WINDOWS["l2"]["after warmup"]},
                   details={"median_out_in_ratio": float(ratio.mean()), "first_n": first_n,
                            "per_seed": share.round(4).to_dict(), **({"windows": windows} if windows else {})},
                   models=sorted(str(k) for k in flow.index if _is_key(k)))


def _is_key(label: Any) -> bool:
    try:
        parse_key(label)
    except (TypeError, ValueError):
        return False
    return True


REFERENCE_READING = ("the paper's public code: hidden state i through translator i - 1, the last, already normed, "
                     "state through the last translator and the final norm again")


def claim3_rule(converged: bool | None, ci_low: float) -> str:
    """Claim 3's one rule as a status: "not converged" (``lens.tables.convergence``), "undetermined" without a CI,
    else "holds" when the CI's low end is above 0."""
    if converged is False:
        return "not converged"
    if not math.isfinite(ci_low):
        return "undetermined (no confidence interval)"
    return status_of(stats.lies_above_zero(ci_low))


def claim3(seq_table: pd.DataFrame, *, paired: bool = True, level: float = LEVEL,
           paper: Any = None, protocol: str = "package") -> Verdict:
    """Claim 3 (:func:`claim3_rule`) at the largest budget of the first recipe, under ``protocol``; ``threshold`` is the
    distance from the value to the CI's low end, so ``value > threshold`` is "CI above 0".

    Args:
        seq_table: the lens-ladder table, per sequence, every rung; paired, level: as in
        :func:`tiebias.lens.tables.early_gap`; paper: the paper's value; protocol: a key of :data:`CLAIM3_KEYS`.

    Returns:
        The :class:`Verdict` recorded as ``CLAIM3_KEYS[protocol]``, other recipes named in its text."""
    if protocol not in CLAIM3_KEYS:
        raise ValueError(f"protocol: {protocol!r} is not allowed; allowed: {', '.join(CLAIM3_KEYS)}")
    seq_table = at_protocol(seq_table, protocol)
    recipes = list(dict.fromkeys(seq_table.recipe))
    ladder = ladder_gaps(seq_table, recipes[0], paired=paired, level=level)
    conv = convergence(ladder, seq_table)
    g = early_gap(at_budget(seq_table, None, recipes[0]), paired=paired, level=level)
    budget = int(ladder.budget.max())
    status = claim3_rule(conv["converged"], g["ci_low"])
    lines = [f"Early-layer gap (tied - untied tuned-lens KL, layers {g['early_layers']['tied']}), recipe "
             f"{recipes[0]!r} at {budget}x lens_steps: {g['value']:+.3g} bits, {int(level * 100)}% CI "
             f"[{g['ci_low']:+.3g}, {g['ci_high']:+.3g}] ({g['method']})."]
    if g["depth_note"]:
        lines.append(f"Note: {g['depth_note']}.")
    lines.append(describe_convergence(conv))
    for r in recipes[1:]:
        o = early_gap(at_budget(seq_table, None, r), paired=paired, level=level)
        lines.append(f"For comparison, recipe {r!r} at its largest budget: {o['value']:+.3g} bits "
                     f"[{o['ci_low']:+.3g}, {o['ci_high']:+.3g}].")
    lines.append({"not converged": "Claim 3: NOT CONVERGED at this lens budget (raise lens_budgets or lens_steps); no "
                                   "verdict.",
                  "undetermined (no confidence interval)": "Claim 3: undetermined (no confidence interval for the gap)."}
                 .get(status, f"Claim 3 (tied early layers read worse: CI of the gap above 0) {printed(status)} here."))
    details = {"verdict": status, "ci_low": g["ci_low"], "ci_high": g["ci_high"], "method": g["method"],
               "budget": budget, "recipe": recipes[0], "converged": conv["converged"], "convergence": conv,
               "ladder": ladder.to_dict(orient="records"), "early_layers": g["early_layers"]}
    if protocol != "package":
        lines.insert(0, f"Lenses read with the {protocol!r} protocol ({REFERENCE_READING}); same rule as claim 3.")
        details["protocol"] = protocol
    text = "\n".join(lines)
    threshold = g["value"] - g["ci_low"] if math.isfinite(g["ci_low"]) else math.inf
    return Verdict(CLAIM3_KEYS[protocol], value=g["value"], threshold=threshold, unit="bits (early layers)",
                   statement=text, text=text, spread=g["sd"], n_seeds=g["n_seeds"], paper=paper, details=details,
                   status=status, models=models_of(seq_table))


ONE_SEED_STATUS = "cannot be judged (one seed: no seed noise to compare the change with)"


def claim4_rule(head: dict[str, Any]) -> tuple[float, str]:
    """Claim 4's one rule: ``(value, status)``, the value the smaller of the two claimed changes in units of
    ``NOISE_SDS`` pooled seed sd (a change against the claim negative), holding above ``CLAIM4_RATIO``; with one seed the
    value is NaN and the status says the claim cannot be judged."""
    r_in, r_out = head["vs_untied_input"], head["vs_untied_output"]
    if head["seeds"] < 2:
        return math.nan, ONE_SEED_STATUS
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(min(np.divide(r_in["change"], NOISE_SDS * r_in["seed_std"]),
                          np.divide(-r_out["change"], NOISE_SDS * r_out["seed_std"])))
    if math.isnan(value):
        return value, "undetermined (no seed spread)"
    return value, status_of(value > CLAIM4_RATIO)


def dose_response(table: pd.DataFrame, method: str = "orthogonal", step: int | None = None) -> dict:
    """Claim 4's numbers for one map: each cosine's change from the smallest to the largest k against
    ``NOISE_SDS`` pooled seed sd, its Spearman trend, and :func:`claim4_rule`'s value and status."""
    from scipy.stats import spearmanr

    d = table[table.method == method]
    d = d[d.step == (d.step.max() if step is None else step)]
    ks = sorted(d.k.unique())
    if len(ks) < 2:
        raise ValueError(f"ablate_factors: need at least two different k for a dose-response verdict, got {ks}")
    out: dict[str, Any] = {"method": method, "step": int(d.step.iloc[0]), "k": ks, "seeds": int(d.seed.nunique())}
    for col, want in (("vs_untied_input", "rises"), ("vs_untied_output", "falls")):
        means = d.groupby("k")[col].mean()
        stds = d.groupby("k")[col].std(ddof=1)
        rho = float(spearmanr(d.k, d[col]).statistic) if d[col].nunique() > 1 else 0.0
        change = float(means.iloc[-1] - means.iloc[0])
        noise = stats.pooled_sd(stds.values) if d.seed.nunique() > 1 else math.nan
        monotone = bool(np.all(np.diff(means.values) > 0) if want == "rises" else np.all(np.diff(means.values) < 0))
        direction_ok = change > 0 if want == "rises" else change < 0
        out[col] = {"expected": want, "means": means.round(4).to_dict(), "change": change, "spearman": rho,
                    "seed_std": noise, "monotone": monotone, "direction_as_claimed": bool(direction_ok),
                    "exceeds_noise": beyond_noise(change, noise)}
    value, status = claim4_rule(out)
    out["claim4_value"] = value
    out["claim4_status"] = status
    out["claim4_holds"] = status == HOLDS
    return out


_LABELS = (("vs_untied_input", "untied input -> tied"), ("vs_untied_output", "untied output -> tied"))


def claim4_sentence(verdicts: dict[str, dict], head: str | None = None) -> str:
    """Claim 4 stated once: the verdict under ``head`` (None: the first map), every other map's reading beside
    it with what fell short (``verdicts``: map -> :func:`dose_response`)."""
    def reading(m: str) -> str:
        status, short = verdicts[m]["claim4_status"], []
        for col, label in _LABELS if status == DOES_NOT_HOLD else ():
            r = verdicts[m][col]
            if not r["direction_as_claimed"]:
                short.append(f"{label} changed by {r['change']:+.4f}, against the claim ({r['expected']})")
            elif r["exceeds_noise"] is False:
                short.append(f"{label} changed by {r['change']:+.4f}, within {NOISE_SDS} seed sd "
                             f"({NOISE_SDS * r['seed_std']:.4f})")
        word = printed(status) + (" in this run" if status in (HOLDS, DOES_NOT_HOLD) else "")
        return word + (f" ({'; '.join(short)})" if short else "")

    head = head if head is not None else next(iter(verdicts))
    beside = "".join(f"; under the {m} map it {reading(m)}" for m in verdicts if m != head)
    return (f"Claim 4 (input cosine rises and output cosine falls with k, beyond seed noise), judged under the "
            f"{head} map: {reading(head)}{beside}.")


def claim4(table: pd.DataFrame, methods: Sequence[str], reference: str,
           ingredients: pd.DataFrame | None = None) -> Verdict:
    """Claim 4 from the sweep's alignment table at its final step: the first map's :func:`claim4_rule` decides.

    Args:
        table: :func:`tiebias.ablate.sweep.alignment_table`; methods: the maps read (the first carries the verdict);
        reference: "same" or "cross", named in the text; ingredients: :func:`tiebias.ablate.ingredients.summary` for the
        details (None or empty: not recorded).

    Returns:
        The :class:`Verdict` ``claim4_causality``, every map's :func:`dose_response` in its details."""
    verdicts = {m: dose_response(table, m) for m in methods}
    head = verdicts[methods[0]]
    r_in, r_out = head["vs_untied_input"], head["vs_untied_output"]
    value, status = head["claim4_value"], head["claim4_status"]
    lines = []
    for m, v in verdicts.items():
        for col, label in _LABELS:
            r = v[col]
            noise = ("n/a (one seed)" if r["exceeds_noise"] is None
                     else ("exceeds" if r["exceeds_noise"] else "does NOT exceed"))
            trend = ("two doses: no trend to test beyond this change" if len(v["k"]) < 3 else
                     f"Spearman {r['spearman']:+.2f}, monotone in the claimed direction: {r['monotone']}")
            lines.append(f"[{m}, step {v['step']}, {reference}-seed reference] {label}: expected: {r['expected']}; "
                         f"change k={v['k'][0]:g}->{v['k'][-1]:g} = {r['change']:+.4f} ({trend}); seed sd "
                         f"{r['seed_std']:.4f}: {noise} {NOISE_SDS} sd.")
    lines.append(claim4_sentence(verdicts))
    others = "".join(f"; {m} map's reading: {v['claim4_status']}" for m, v in list(verdicts.items())[1:])
    shifts: dict[str, dict[str, dict[str, float | None]]] = {}  # per ingredient and k, both shifts and intervals
    for r in ([] if ingredients is None else ingredients.to_dict("records")):
        shifts.setdefault(str(r["ingredient"]), {})[f"k={r['k']:g}"] = {
            c: (round(float(r[c]), 4) if math.isfinite(r[c]) else None)
            for c in (f"vs_untied_{w}{e}" for w in ("input", "output") for e in ("", "_ci_low", "_ci_high"))}
    return Verdict("claim4_causality", value=value, threshold=CLAIM4_RATIO, unit=f"min change / ({NOISE_SDS} seed sd)",
                   statement=f"{methods[0]} map (the verdict's): k {head['k'][0]:g}->{head['k'][-1]:g} changes untied-input cosine by "
                             f"{r_in['change']:+.4f} and untied-output cosine by {r_out['change']:+.4f} "
                             f"({reference}-seed reference){others}",
                   text="\n".join(lines), n_seeds=head["seeds"],
                   noise_floor=NOISE_SDS * max(r_in["seed_std"], r_out["seed_std"]) if head["seeds"] > 1 else None,
                   paper={"k=1": TABLE2_STEP10K[1.0], "k=5": TABLE2_STEP10K[5.0]},
                   details={"verdicts": verdicts, "reference": reference,
                            **({"ingredients": shifts} if shifts else {})}, status=status, models=models_of(table))

