"""Every number the paper reports beside ours, and the cause of each difference computed by one rule set
(:func:`judge`, stated for readers in :data:`RULES`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tiebias import paper, stats
from tiebias.ablate import checkpoint_levels
from tiebias.ablate.ingredients import KIT, SAME_SEED
from tiebias.align import knn_bins
from tiebias.config.choices import INGREDIENTS
from tiebias.lens import bigram_bound
from tiebias.run.files import (
    COSINE,
    COSINE_CHANGE,
    FINITE,
    KL_BITS,
    SHARE,
    DamagedFileError,
    read_json,
    read_table,
)
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.verdicts.evidence import LAYERWISE, not_meaningful
from tiebias.verdicts.records import current_results

CAUSES = ("agrees", "inconclusive at n seeds", "undetectable at our noise", "protocol", "window", "scale",
          "reference point", "paper inconsistency", "not measured here", "unexplained")
EXPLAINED = ("protocol", "window", "scale", "reference point", "paper inconsistency")  # causes that explain a difference
MOST = 0.5  # a candidate that closes at least this share of the distance to the paper's value names the cause
MIN_SIZES = 4  # a scale axis names the cause only from a line fitted to at least this many sizes
SETTINGS = {("FIG4_LOG_RUN",), ("FIG4_OLD_LOG", "steps"), ("FIG4_OLD_LOG", "warmup_steps"), ("FIG2_LENS",)}

_OLMO1, _OLMO5 = paper.TABLE1["OLMo-1B"], paper.TABLE5["OLMo-1B"]
MARGINS: dict[str, float] = {  # a quarter of the paper's own effect, fixed before any run is read
    # Table 1, OLMo-1B, orthogonal: out -> tied minus in -> tied
    "cosine": abs(_OLMO1["untied output -> tied"]["orthogonal"] - _OLMO1["untied input -> tied"]["orthogonal"]) / 4,
    # Table 5, OLMo-1B: KNN@10 of tied vs untied output minus tied vs untied input
    "overlap": abs(_OLMO5["tied vs untied output"] - _OLMO5["tied vs untied input"]) / 4,
    # the largest claim-4 shift the paper reports (Table 2, k = 1 -> 5)
    "cosine change": max(abs(v[w] - paper.TABLE2_STEP10K[1.0][w]) for v in paper.TABLE2_STEP10K.values() for w in v) / 4,
    # the distance from the paper's quoted output share to 0.5, claim 2's threshold
    "share": abs(paper.FIG4_OUTPUT_SHARE["quoted"] - 0.5) / 4,
    # the distance from the paper's median output / input ratio to 1 (equal paths)
    "ratio": abs(paper.FIG4_OUTPUT_SHARE["median_out_in_ratio"] - 1) / 4,
    # Figure 2, OLMo-1B: tied minus untied KL at layer 0
    "bits": (paper.FIG2_OLMO_KL_BITS[0]["tied"] - paper.FIG2_OLMO_KL_BITS[0]["untied"]) / 4,
    # Table 7: log perplexity ratio, k = 5 vs 1
    "nats": abs(math.log(paper.TABLE7_PPL[5.0] / paper.TABLE7_PPL[1.0])) / 4,
}

RULES = (
    f"Each row is one number the paper reports (or a difference of two, marked derived). \"Ours\" is the mean over "
    f"seeds with, in brackets, the {LEVEL:.0%} confidence interval of that mean (t, over seeds). The paper reports "
    "single runs whose run-to-run noise is unknown: its value is taken as exact, i.e. its noise is assumed small "
    "beside the margin (were it as large as ours, fewer rows could be called anything but inconclusive). The cause "
    "is computed, never typed, by one rule set. `agrees`: the whole interval of ours minus the paper's lies within "
    "a margin fixed in advance per kind of quantity (a quarter of the paper's own effect: "
    + "; ".join(f"{k} {m:.3g}" for k, m in MARGINS.items()) + "). `inconclusive at n seeds`: the interval "
    "reaches both inside and beyond the margin. `undetectable at our noise`: for a change the paper reports, that "
    "change is smaller than our interval's half-width (a measure of our power, not a cause). Only when the interval "
    "lies wholly beyond the margin is there a difference to explain: a candidate (claim 2's windows and metrics, "
    "claim 3's lens readings, claim 4's ingredients, a reference point) counts when its paired change from ours has "
    "an interval clear of 0, points towards the paper, leaves it closer to the paper than ours, and either its "
    f"interval holds the paper's value or it leaves at most {1 - MOST:.0%} of the distance (it closes at least "
    f"{MOST:.0%}, without overshooting further; the closed fraction is shown with its interval); the closest to the paper wins and the others are named. `scale`: a line fitted "
    f"over at least {MIN_SIZES} sizes whose {LEVEL:.0%} prediction interval at the paper's size holds the paper's "
    "value; a trend that does not is reported as a direction only. `paper inconsistency`: the paper's own sources "
    "give this quantity two values further apart than the margin. The spread across the paper's model pairs is "
    "context, never agreement. `unexplained`: a difference nothing the kit measured accounts for. Counts group the "
    "rows that compare one of our numbers with several of the paper's model pairs: one comparison, counted once. "
    "Context, never a cause by itself, follows a row's reason where the run computed it: for the layer-0 KLs, how far "
    "our models beat the bigram baseline (a layer-0 lens is at best a bigram predictor; rows of Figures 2, 6 and 7 "
    "are not meaningful when a model does not beat it); for Table 5, chance and the tied-vs-tied ceiling, overall "
    "and in the rarest and most frequent tokens; for the cosine levels, whether ours still moved over the last "
    "doubling of training. Table 6 (the paper's step 1,000 of 10,000) has ours at a tenth of our training as a "
    "window candidate.")
"""The rule set as the report's header states it."""


@dataclass(frozen=True)
class Estimate:
    """Our value for one quantity and the confidence interval of its mean over seeds (NaN bounds: one seed)."""

    value: float
    low: float
    high: float
    n: int
    label: str

    @classmethod
    def of(cls, values: Any, label: str, level: float = LEVEL) -> Estimate:
        """From per-seed values: mean +- t(n - 1) sd / sqrt(n)."""
        x = np.asarray(values, dtype=float)
        x = x[np.isfinite(x)]
        if not len(x):
            return cls(math.nan, math.nan, math.nan, 0, label)
        low, high, _ = stats.t_interval(float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x), level)
        return cls(float(x.mean()), low, high, len(x), label)

    @classmethod
    def from_ci(cls, mean: float, low: float, high: float, n: int, label: str) -> Estimate:
        """From a t-interval of the mean over ``n`` seeds, kept as it is (NaN bounds below 2 seeds)."""
        low, high = (low, high) if n >= 2 else (math.nan, math.nan)
        return cls(float(mean), float(low), float(high), int(n), label)

    @property
    def usable(self) -> bool:
        return self.n > 0 and math.isfinite(self.value)

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2

    def contains(self, x: float) -> bool:
        return math.isfinite(self.low) and self.low <= x <= self.high

    def text(self) -> str:
        if not self.usable:
            return "not available"
        rng = f" [{self.low:.3g}, {self.high:.3g}]" if math.isfinite(self.low) else " (one seed: no range)"
        return f"{self.value:.3g}{rng}"


def paired_change(candidate: Any, ours: Any, label: str = "paired over seeds") -> Estimate:
    """The per-seed change candidate minus ours (same seeds, same order) and its t-interval."""
    return Estimate.of(np.asarray(candidate, dtype=float) - np.asarray(ours, dtype=float), label)


@dataclass(frozen=True)
class Candidate:
    """A decomposition's reading, the cause it stands for, and its paired change from ours (None: unpaired)."""

    estimate: Estimate
    cause: str
    name: str
    change: Estimate | None = None


@dataclass(frozen=True)
class Trend:
    """A scale axis's trend (per doubling), its value at the paper's size and the prediction interval there."""

    axis: str
    word: str
    slope: float
    low: float
    high: float
    at_paper: float
    n_sizes: int = 0
    pred_low: float = math.nan
    pred_high: float = math.nan


@dataclass
class Row:
    """One number the paper reports, ours beside it and the cause; rows sharing ``group`` count as one comparison."""

    key: str
    source: str
    quantity: str
    paper: float
    kit: Estimate | None
    paper_protocol: Estimate | None
    cause: str
    why: str
    meaningful: bool = True
    setting: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    group: str = ""


def _qualified(pv: float, kit: Estimate, candidates: Sequence[Candidate]) -> tuple[list[tuple], list[str]]:
    """The candidates that count under :func:`judge`'s rules, closest to the paper first, and why each other did not."""
    d = pv - kit.value
    ok, not_ok = [], []
    for c in (c for c in candidates if c.estimate.usable):
        ch = c.change if c.change is not None and c.change.usable else None
        if ch is None:  # unpaired seeds: the half-widths added in quadrature
            half, diff = math.hypot(c.estimate.half, kit.half), c.estimate.value - kit.value
            ch = Estimate(diff, diff - half, diff + half, min(c.estimate.n, kit.n), "unpaired (half-widths in quadrature)")
        frac = ch.value / d
        lo, hi = sorted((ch.low / d, ch.high / d))
        holds, gap = c.estimate.contains(pv), abs(pv - c.estimate.value)
        if not (math.isfinite(ch.low) and stats.excludes_zero(ch.low, ch.high)):
            not_ok.append(f"{c.name} ({c.estimate.text()}): its change from ours, {ch.value:+.3g} "
                          f"[{ch.low:+.3g}, {ch.high:+.3g}], is not clear of 0")
        elif np.sign(ch.value) != np.sign(d):
            not_ok.append(f"{c.name} ({c.estimate.text()}): moves away from the paper")
        elif gap >= abs(d) or not (holds or gap <= (1 - MOST) * abs(d)):
            not_ok.append(f"{c.name} ({c.estimate.text()}): goes {frac:.0%} of the way to the paper's value and its "
                          f"interval {'holds' if holds else 'misses'} it")
        else:
            ok.append((gap, c, ch, frac, lo, hi, holds))
    return sorted(ok, key=lambda t: t[0]), not_ok


def judge(paper_value: float, kit: Estimate | None, candidates: Sequence[Candidate] = (),
          trends: Sequence[Trend] = (), spread: tuple[float, float] | None = None,
          noise: bool = False, kind: str = "cosine", paper_other: tuple[float, str] | None = None) -> tuple[str, str]:
    """The cause of the difference between ``paper_value`` and ours, and how it was found (the order of
    :data:`RULES`); ``spread``, the paper's values across its model pairs, is context only."""
    if kind not in MARGINS:
        raise ValueError(f"kind: unknown value {kind!r}; allowed: {', '.join(MARGINS)}")
    margin, p = MARGINS[kind], f"{paper_value:.3g}"
    context = (f" (the paper's own model pairs span [{spread[0]:.3g}, {spread[1]:.3g}]: context, not agreement)"
               if spread is not None else "")
    ours = kit.text() if kit is not None else "none"
    if paper_other is not None and abs(paper_other[0] - paper_value) > margin:
        return "paper inconsistency", (f"{paper_other[1]} gives {paper_other[0]:.3g} for this quantity, the paper "
                                       f"{p}: further apart than the {kind} margin ({margin:.3g}); ours {ours}")
    if kit is None or not kit.usable:
        return "unexplained", f"ours {ours}; tried: {', '.join(c.name for c in candidates) or 'nothing'}"
    if not math.isfinite(kit.low):
        return "inconclusive at n seeds", f"at {kit.n} seed(s) ours, {ours}, has no interval{context}"
    lo, hi = kit.low - paper_value, kit.high - paper_value
    diff = f"ours minus the paper's {p}: {kit.value - paper_value:+.3g} [{lo:+.3g}, {hi:+.3g}] ({kit.label})"
    if -margin <= lo and hi <= margin:
        return "agrees", f"{diff}, within the {kind} margin +-{margin:.3g}{context}"
    if lo <= margin and hi >= -margin:
        if noise and kit.half >= abs(paper_value):
            return "undetectable at our noise", (f"the paper's change, {p}, is smaller than our interval's half-width "
                                                 f"at {kit.n} seeds (+-{kit.half:.3g}): {diff}{context}")
        return "inconclusive at n seeds", (f"at {kit.n} seeds {diff} reaches both inside and beyond the {kind} "
                                           f"margin +-{margin:.3g}{context}")
    ok, not_ok = _qualified(paper_value, kit, candidates)
    if ok:
        _, c, ch, frac, flo, fhi, holds = ok[0]
        rest = ("its interval holds the paper's value" if holds else
                f"it overshoots by {frac - 1:.0%} of the distance" if frac > 1 else "the rest is unexplained")
        others = ("; runners-up: " + ", ".join(f"{o[1].name} ({o[1].estimate.value:.3g})" for o in ok[1:])
                  if len(ok) > 1 else "")
        return c.cause, (f"{diff}, beyond the margin +-{margin:.3g}; {c.name}: {c.estimate.text()}, a change of "
                         f"{ch.value:+.3g} [{ch.low:+.3g}, {ch.high:+.3g}] from ours ({ch.label}), {frac:.0%} "
                         f"[{flo:.0%}, {fhi:.0%}] of the way to the paper's {p}; {rest}{others}{context}")
    for t in trends:
        if t.n_sizes >= MIN_SIZES and t.pred_low <= paper_value <= t.pred_high:
            return "scale", (f"{diff}; along {t.axis} ({t.n_sizes} sizes) the line gives {t.at_paper:.3g} at the "
                             f"paper's size, {LEVEL:.0%} prediction interval [{t.pred_low:.3g}, {t.pred_high:.3g}] "
                             f"holding the paper's {p} (an extrapolation){context}")
    for t in trends:
        if stats.excludes_zero(t.low, t.high):
            pred = (f"the line's {LEVEL:.0%} prediction interval at the paper's size is [{t.pred_low:.3g}, "
                    f"{t.pred_high:.3g}]" if math.isfinite(t.pred_low) else "no prediction interval")
            not_ok.append(f"along {t.axis} ours {t.word} ({t.slope:+.3g} per doubling, {LEVEL:.0%} CI [{t.low:+.3g}, "
                          f"{t.high:+.3g}]) {'towards' if np.sign(t.slope) == np.sign(paper_value - kit.value) else 'away from'}"
                          f" the paper's value, from {t.n_sizes} sizes; {pred}: a direction, not a cause")
    return "unexplained", (f"{diff}, beyond the margin +-{margin:.3g}; tried: "
                           f"{'; '.join(not_ok) or 'no decomposition of this number'}{context}")


@dataclass
class Evidence:
    """What a run folder holds for the report: metrics tables, claim records, study settings, scale trends."""

    run: Run
    claims: dict[str, dict]
    study: dict[str, Any]
    scale_trends: pd.DataFrame | None = None
    scale_source: str | None = None
    _tables: dict[str, pd.DataFrame | None] = field(default_factory=dict)

    @classmethod
    def load(cls, run: Run, scale: Run | None = None) -> Evidence:
        """The run's evidence with its own scale trends and those of ``scale`` (a scale run of the same corpus and
        recipe), each labelled with its run."""
        ev = cls(run, current_results(run), run.config.get("study", {}))
        if scale is not None:
            check_scale_run(run, scale)
        found, notes = [], []
        for src in [run] + ([scale] if scale is not None else []):
            if src.table_path("scale_trends").exists():
                found.append(_read(src.table_path("scale_trends"), "scale_trends").assign(source=str(src.path)))
            elif src is scale:
                notes.append(f"--scale {src.path} has no scale trends (no metrics/scale_trends.csv: its 04_ablate ran "
                             "without a scale axis, or has not run)")
        if found:
            ev.scale_trends = pd.concat(found, ignore_index=True)
            own = [] if run.table_path("scale_trends").exists() else ["this run has none of its own"]
            notes.insert(0, "; ".join([f"trends of {', '.join(dict.fromkeys(ev.scale_trends.source))}", *own]))
        ev.scale_source = "; ".join(notes) or None
        return ev

    def table(self, name: str) -> pd.DataFrame | None:
        """``metrics/<name>.csv`` of the run, or None when its notebook has not run (or measured nothing)."""
        if name not in self._tables:
            path = self.run.table_path(name)
            table = _read(path, name) if path.exists() else None
            self._tables[name] = None if table is None or table.empty else table  # header only: nothing measured
        return self._tables[name]

    def trends(self, quantity: str) -> list[Trend]:
        """The scale axis's fitted trends of one quantity."""
        t = self.scale_trends
        if t is None:
            return []
        out = []
        for r in t[(t.quantity == quantity) & t.slope.notna()].itertuples():
            try:
                n_sizes = len(json.loads(str(r.sizes)))
            except (ValueError, TypeError):
                n_sizes = 0
            pred = [float(getattr(r, c, math.nan)) for c in ("pred_low", "pred_high")]  # older tables: no prediction
            out.append(Trend(f"{r.axis} (scale run {r.source})", str(r.word), float(r.slope),
                             float(r.ci_low), float(r.ci_high), float(r.at_paper), n_sizes, *pred))
        return out

    @property
    def steps(self) -> int:
        return int(self.study.get("steps", 0))


RECIPE = ("corpus_fingerprint", "family", "steps", "batch_size", "seq_len", "lr", "warmup_steps", "weight_decay",
          "beta1", "beta2", "grad_clip", "min_lr_ratio")
"""What a scale run must share with the run it explains (its models' sizes are what it varies)."""


def check_scale_run(run: Run, scale: Run) -> None:
    """Refuse (ValueError) a ``--scale`` run of another corpus or training recipe than ``run``."""
    recipes = []
    for r, name in ((run, "run"), (scale, "--scale")):
        paths = sorted(r.models_dir.glob("tied-s*/train_config.json")) if r.models_dir.is_dir() else []
        if not paths:
            raise ValueError(f"{name}: {r.path} has no trained tied model (models/tied-s<seed>/train_config.json) to "
                             "compare the training recipe with; give the folder of an executed study")
        cfg = read_json(paths[0], "delete the model folder and train it again")
        if not isinstance(cfg, dict):
            raise ValueError(f"{paths[0]}: not a JSON object; delete the model folder and train it again")
        recipes.append({k: cfg.get(k) for k in RECIPE})
    ours, theirs = recipes
    diff = [f"{k} {theirs[k]!r} there, {ours[k]!r} here" for k in RECIPE if theirs[k] != ours[k]]
    if diff:
        raise ValueError(f"--scale: {scale.path} is not a scale run of this run's corpus and recipe ({'; '.join(diff)}"
                         f"); give a run of --profile scale with the same corpus and recipe as {run.path}, or leave "
                         "--scale out (the run's own trends are used)")


_KL_GAP = (-KL_BITS[1], KL_BITS[1])
_ALIGNMENT = (("method", "output_factor", "k", "step", "vs_untied_input", "vs_untied_output"),
              {"output_factor": FINITE, "k": FINITE, "step": FINITE, "vs_untied_input": COSINE,
               "vs_untied_output": COSINE})
TABLES: dict[str, tuple[str, tuple[str, ...], dict[str, tuple[float, float]]]] = {
    "alignment_table1": ("02_align", ("comparison", "pairing", "seed_source", "seed_target", "orthogonal", "linear"),
                         {"orthogonal": COSINE, "linear": COSINE, "identity": COSINE, "knn@*": SHARE}),
    "alignment_evolution": ("02_align", ("matrix", "step", "cos_to_init"), {"step": FINITE, "cos_to_init": COSINE}),
    knn_bins.TABLE: ("02_align", ("comparison", "bin", "count_min", "count_max", "n_tokens", "overlap", "chance",
                                  "ceiling"),
                     {"count_*": FINITE, "n_tokens": FINITE, "overlap": SHARE, "chance": SHARE, "ceiling": SHARE}),
    checkpoint_levels.TABLE: ("02_align", ("quantity", "who", "step", "fraction", "mean", "values"),
                              {"step": FINITE, "fraction": FINITE, "mean": COSINE}),
    "lens_per_layer": ("03_lens", ("protocol", "step", "budget", "variant", "layer", "kl_tuned_bits", "lens_steps"),
                       {"step": FINITE, "budget": FINITE, "layer": FINITE, "lens_steps": FINITE,
                        "kl_tuned_bits": KL_BITS}),
    "lens_readings_per_layer": ("03_lens", ("reading", "layer", "gap", "ci_low", "ci_high", "n_seeds", "label"),
                                {"layer": FINITE, "n_seeds": FINITE, "gap": _KL_GAP, "ci_low": _KL_GAP,
                                 "ci_high": _KL_GAP}),
    bigram_bound.TABLE: ("03_lens", ("variant", "seed", "kl_layer0_bits", "bigram_gain_bits", "ce_model_nats",
                                     "ce_bigram_nats", "ce_unigram_nats"),
                         {"seed": FINITE, "kl_layer0_bits": KL_BITS, "bigram_gain_bits": FINITE,
                          "ce_*": (0.0, FINITE[1])}),
    "claim2_windows": ("01_train", ("window", "metric"), {"share_*": SHARE}),
    "ablation_alignment": ("04_ablate", *_ALIGNMENT),
    "ablation_alignment_same_seed": ("04_ablate", *_ALIGNMENT),
    "claim4_ingredients": ("04_ablate", ("ingredient", "k", "n_seeds", *(f"vs_untied_{w}{e}" for w in ("input", "output")
                                                                          for e in ("", "_ci_low", "_ci_high"))),
                           {"k": FINITE, "n_seeds": FINITE, "vs_untied_input": COSINE_CHANGE,
                            "vs_untied_output": COSINE_CHANGE, "vs_untied_input_ci_*": FINITE,
                            "vs_untied_output_ci_*": FINITE}),
    "claim4_ingredients_per_seed": ("04_ablate", ("ingredient", "k", "seed"),
                                    {"k": FINITE, "seed": FINITE, "vs_untied_input": COSINE_CHANGE,
                                     "vs_untied_output": COSINE_CHANGE}),
    "ablation_perplexity": ("04_ablate", ("k", "tied", "seed", "test_loss"),
                            {"k": FINITE, "seed": FINITE, "test_loss": (0.0, FINITE[1])}),
    "scale_trends": ("04_ablate", ("quantity", "axis", "word", "slope", "ci_low", "ci_high", "at_paper", "sizes"),
                     {"slope": FINITE, "ci_low": FINITE, "ci_high": FINITE, "at_paper": FINITE, "pred_*": FINITE}),
}
"""The tables the report reads: the notebook that writes each, the columns it needs and what each number column can
be (:func:`tiebias.run.files.read_table` refuses a table outside them, naming the file, the column and the row)."""
MAY_BE_EMPTY = {"claim4_ingredients", "claim4_ingredients_per_seed"}  # 04 writes them header only when it measures nothing


def _read(path: Any, name: str) -> pd.DataFrame:
    """One of :data:`TABLES`, read and checked (another name: checked for being a table)."""
    nb, columns, bounds = TABLES.get(name, ("", (), {}))
    todo = (f"delete it and rerun notebook {nb} (python -m tiebias study --only {nb}, with this run's --profile and "
            "--run-dir)" if nb else "delete it and rerun the notebook that writes it")
    return read_table(path, todo, columns=columns, bounds=bounds, allow_empty=name in MAY_BE_EMPTY)


def paper_numbers() -> Iterator[tuple[tuple[str, ...], float]]:
    """Every number :mod:`tiebias.paper` holds, as (key path, value)."""
    def walk(path: tuple[str, ...], x: Any) -> Iterator[tuple[tuple[str, ...], float]]:
        if isinstance(x, dict):
            for k, v in x.items():
                yield from walk((*path, str(k)), v)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            yield path, float(x)

    for name in dir(paper):
        if name.isupper() and isinstance(getattr(paper, name), dict):
            yield from walk((name,), getattr(paper, name))


def _row(key: tuple[str, ...], source: str, quantity: str, pv: float, kit: Estimate | None,
         paper_protocol: Estimate | None = None, candidates: Sequence[Candidate] = (), missing: str = "",
         short: str = "", **judged: Any) -> Row:
    """A row judged by :func:`judge`; without ``kit``, "not measured here" because ``missing`` (quantity ``short``)."""
    if kit is None:
        return Row("/".join(key), source, short or quantity, float(pv), None, None, "not measured here", missing)
    cause, why = judge(pv, kit, candidates, **judged)
    return Row("/".join(key), source, quantity, float(pv), kit, paper_protocol, cause, why)


def _spread(values: Sequence[float]) -> tuple[float, float] | None:
    return (min(values), max(values)) if len(values) > 1 else None


_KNN = {"tied vs untied input": "untied input -> tied", "tied vs untied output": "untied output -> tied",
        "untied input vs output": "untied input -> untied output"}
_NOT_RUN = "its notebook has not run in this folder ({})"


def table1_rows(ev: Evidence) -> list[Row]:
    """Tables 1 and 5 (mean cosine after alignment, KNN@10 overlap) and claim 1's gap, out -> tied minus in -> tied;
    the same-seed pairing is the reference-point candidate."""
    t, rows, missing = ev.table("alignment_table1"), [], _NOT_RUN.format("02_align")

    def ours(comparison: str, column: str) -> tuple[Estimate | None, list[Candidate]]:
        if t is None:
            return None, []
        pairing = "within model" if comparison == "untied input -> untied output" else "cross seed"
        kit = Estimate.of(t[(t.comparison == comparison) & (t.pairing == pairing)][column],
                          f"{column}, in-sample, {pairing}")
        same = t[(t.comparison == comparison) & (t.pairing == "same seed")]
        return kit, [Candidate(Estimate.of(same[column], "same-seed pairs"), "reference point",
                               "pairing each tied model with the untied model of its own seed")] if len(same) else []

    for fam, comps in paper.TABLE1.items():
        for comp, maps in comps.items():
            for m, pv in maps.items():
                kit, cands = ours(comp, m)
                rows.append(_row(("TABLE1", fam, comp, m), "Table 1", f"{comp}, {m} map ({fam})", pv, kit, kit, cands,
                                 missing, f"{comp}, {m} map", spread=_spread([paper.TABLE1[f][comp][m] for f in paper.TABLE1])))
        for m in ("orthogonal", "linear"):
            kit = None
            if t is not None:
                cross = t[t.pairing == "cross seed"].set_index(["seed_source", "seed_target", "comparison"])[m].unstack()
                kit = Estimate.of(cross["untied output -> tied"] - cross["untied input -> tied"],
                                  f"{m}, in-sample, cross seed")
            rows.append(_row(("derived", "TABLE1", fam, "gap", m), "Table 1 (derived)",
                             f"claim 1 gap: out -> tied minus in -> tied, {m} ({fam})",
                             comps["untied output -> tied"][m] - comps["untied input -> tied"][m], kit, kit,
                             missing=missing, short=f"claim 1 gap, {m}",
                             trends=ev.trends("claim1_gap") if m == "orthogonal" else []))
    for fam, cells in paper.TABLE5.items():
        for name, pv in cells.items():
            knn = [c for c in t.columns if c.startswith("knn@")] if t is not None else []
            other = t is not None and "knn@10" not in t
            kit, cands = (None, []) if other else ours(_KNN[name], "knn@10")
            rows.append(_row(("TABLE5", fam, name), "Table 5", f"KNN@10 overlap, {name} ({fam})", pv, kit, kit, cands,
                             f"this run measured {', '.join(knn) or 'no KNN'} (knn_k), the paper's Table 5 k = 10: not "
                             "the same quantity" if other else missing, f"KNN@10, {name}", kind="overlap",
                             spread=_spread([paper.TABLE5[f][name] for f in paper.TABLE5])))
    return rows


_FIG2_PAIRS = {"OLMo-1B": ("FIG2_OLMO_KL_BITS", "Figure 2"), "GPT-Neo / Pythia": ("FIG6_INPUT_LAYER_KL_BITS", "Figure 6"),
               "Qwen3": ("FIG7_INPUT_LAYER_KL_BITS", "Figure 7")}


def figure2_rows(ev: Evidence) -> list[Row]:
    """Figures 2, 6 and 7: tuned-lens KL at the input layer (and OLMo's layer 1), and the tied - untied gaps; the
    paper's readings of the same lenses are the protocol candidates."""
    rows: list[Row] = []
    cells = [((name, v), fig, fam, 0, x) for fam, (name, fig) in _FIG2_PAIRS.items() if fam != "OLMo-1B"
             for v, x in getattr(paper, name).items()]
    cells += [(("FIG2_OLMO_KL_BITS", str(layer), v), "Figure 2", "OLMo-1B", layer, x)
              for layer, d in paper.FIG2_OLMO_KL_BITS.items() for v, x in d.items()]
    t = ev.table("lens_per_layer")
    if t is not None:  # the package reading of the final models' largest lens budget
        t = t[(t.protocol == "package") & (t.step == t.step.max())]
        t = t[t.budget == t.budget.max()]
    for key, fig, fam, layer, pv in cells:
        variant, kit = key[-1], None
        if t is not None:
            sub = t[(t.variant == variant) & (t.layer == layer)]
            kit = Estimate.of(sub.kl_tuned_bits, f"package reading, {int(sub.lens_steps.max()) if len(sub) else 0}-step lens")
        spread = _spread([d[variant] for d in paper.FIG2_INPUT_LAYER_KL_BITS.values()]) if layer == 0 else None
        rows.append(_row(key, fig, f"tuned-lens KL at layer {layer}, {variant} ({fam}), bits", pv,
                         kit if kit is not None and kit.usable else None, kit if layer == 0 else None,
                         missing=_NOT_RUN.format("03_lens"), spread=spread, kind="bits"))
    gaps = {("OLMo-1B", layer): d["tied"] - d["untied"] for layer, d in paper.FIG2_OLMO_KL_BITS.items()}
    gaps |= {(fam, 0): d["tied"] - d["untied"] for fam, d in paper.FIG2_INPUT_LAYER_KL_BITS.items() if fam != "OLMo-1B"}
    readings = ev.table("lens_readings_per_layer")
    for (fam, layer), pv in gaps.items():
        name, fig = _FIG2_PAIRS[fam]
        g = {} if readings is None else {  # the tied - untied gap under each reading (a: the kit's; b-d: the paper's)
            r.reading: Estimate.from_ci(r.gap, r.ci_low, r.ci_high, int(r.n_seeds), str(r.label))
            for r in readings[readings.layer == layer].itertuples()}
        cands = [Candidate(g[k], "protocol", f"the {g[k].label}") for k in "bcd" if k in g]
        rows.append(_row(("derived", name, str(layer), "gap"), f"{fig} (derived)",
                         f"tied - untied tuned-lens KL at layer {layer} ({fam}), bits", pv, g.get("a"),
                         g.get("d") or g.get("b"), cands, _NOT_RUN.format("03_lens with both readings"), kind="bits",
                         spread=_spread([v for (f, lay), v in gaps.items() if lay == 0]) if layer == 0 else None))
    return rows


def figure3_rows(ev: Evidence) -> list[Row]:
    """Figure 3: an untied model's matrices' cosine to their initialisation."""
    t, rows = ev.table("alignment_evolution"), []
    for which, pv in paper.FIG3_COS_TO_INIT.items():
        kit = None if t is None else Estimate.of(
            t[(t.matrix == f"untied {which}") & (t.step == t.step.max())].cos_to_init,
            f"at our last step ({int(t.step.max())}; the paper's is step 20,000)")
        rows.append(_row(("FIG3_COS_TO_INIT", which), "Figure 3", f"untied {which} matrix: cosine to its initialisation",
                         pv, kit, missing=_NOT_RUN.format("02_align")))
    return rows


_BY_PLACE = {"first 100 steps": "warmup", "warmup": "warmup", "after warmup": "after warmup",
             "whole run": "whole run", "first 1000 steps": "warmup"}  # our window at the same place as the paper's
_SCALE_SHARE = {"whole run": "claim2_share", "first 1000 steps": "claim2_share", "warmup": "claim2_share_warmup",
                "after warmup": "claim2_share_after_warmup"}


def _per_seed_share(ev: Evidence, metric: str, window: str) -> np.ndarray | None:
    """Our output share in one window under one metric, per seed; ``whole run`` is the ``first 1000 steps``
    window when the run is no longer."""
    t = ev.table("claim2_windows")
    if window == "whole run":
        window = "first 1000 steps" if 0 < ev.steps <= 1000 else ""
    if t is None or not window:
        return None
    sub = t[(t.window == window) & (t.metric == metric)]
    return sub[[c for c in sub.columns if c.startswith("share_")]].iloc[0].to_numpy(dtype=float) if len(sub) else None


def _share_row(ev: Evidence, key: tuple[str, ...], what: str, pv: float, norm: str, window: str,
               paper_warmup: int, paper_other: tuple[float, str] | None = None) -> Row:
    """A claim-2 number: ours under the exact split over the same steps (else the same place relative to warmup);
    candidates paired with ours: the paper's proxy over the same steps, both metrics at the same place."""
    name = {"l2": "l2", "squared_l2": "squared l2", "l1": "l1"}[norm]
    same = {"warmup": f"first {paper_warmup} steps"}.get(window, window)  # after warmup, whole run: not our steps
    steps_window = same if same.startswith("first ") and _per_seed_share(ev, f"exact {name}", same) is not None else None
    place = _BY_PLACE[window]
    ours = _per_seed_share(ev, f"exact {name}", steps_window or place)
    if ours is None:
        return _row(key, "Figure 4", what, pv, None, missing=_NOT_RUN.format("01_train with gradient windows"))

    def candidate(metric: str, win: str, cause: str, text: str) -> list[Candidate]:
        x = _per_seed_share(ev, metric, win)
        return [] if x is None else [Candidate(Estimate.of(x, f"{metric}, {win}"), cause, text, paired_change(x, ours))]

    n = int(steps_window.split()[1]) if steps_window else 0
    over = ((f"the same steps ({steps_window}: our whole run of {ev.steps})" if n > ev.steps else
             f"the same steps ({steps_window})") if steps_window else f"our {place}")
    cands = candidate(f"proxy {name}", steps_window or place, "protocol",
                      "the paper's proxy metric (gradient on the embedding output) over " + over)
    proxy = cands[0].estimate if cands else None
    if steps_window and steps_window != place:
        for metric in (f"proxy {name}", f"exact {name}"):
            cands += candidate(metric, place, "window", f"{metric} over our {place}, the same place relative to warmup")
    return _row(key, "Figure 4", what, pv, Estimate.of(ours, f"exact {name}, {steps_window or place}"), proxy, cands,
                trends=ev.trends(_SCALE_SHARE.get(steps_window or place, "")) if norm == "l2" else [], kind="share",
                paper_other=paper_other)


def figure4_rows(ev: Evidence) -> list[Row]:
    """Figure 4: the output path's share of the tied matrix's gradient, per window and norm, its quoted means, and
    the median output / input norm ratio per tied model."""
    rows = [_share_row(ev, ("FIG4_LOG_WINDOWS", norm, window), f"output share, {norm}, {window} (the paper's published "
                       "log)", pv, norm, window, paper.FIG4_LOG_RUN["warmup_steps"])
            for norm, wins in paper.FIG4_LOG_WINDOWS.items() for window, pv in wins.items()]
    rows += [_share_row(ev, ("FIG4_OLD_LOG", "l2", window), f"output share, l2, {window} (the paper's older log)", pv,
                        "l2", window, paper.FIG4_OLD_LOG["warmup_steps"]) for window, pv in paper.FIG4_OLD_LOG["l2"].items()]
    q = paper.FIG4_OUTPUT_SHARE
    rows.append(_share_row(ev, ("FIG4_OUTPUT_SHARE", "quoted"), "output share over the first 1000 steps (quoted)",
                           q["quoted"], "l2", "first 1000 steps", paper.FIG4_LOG_RUN["warmup_steps"]))
    rows.append(_share_row(ev, ("FIG4_OUTPUT_SHARE", "reproduction_log_mean"), "output share, the reproduction "
                           "log's mean", q["reproduction_log_mean"], "l2", "first 1000 steps",
                           paper.FIG4_OLD_LOG["warmup_steps"],
                           (q["quoted"], "the paper's quoted share over the first 1000 steps of its Figure 4 run")))
    # the median ratio: per tied model of claim 2's record (its logs), the proxy input norm as the candidate; the
    # record's pooled value when the logs are missing
    key, what = ("FIG4_OUTPUT_SHARE", "median_out_in_ratio"), "median output / input gradient norm ratio"
    rec = ev.claims.get("claim2_gradient_flow", {})
    if "median_out_in_ratio" not in rec.get("details", {}):
        return rows + [_row(key, "Figure 4", what, q["median_out_in_ratio"], None, missing=_NOT_RUN.format("01_train"))]
    first_n = int(rec["details"].get("first_n") or 0)
    medians: dict[str, list[float]] = {"input_norm": [], "proxy_input_norm": []}
    for model in rec.get("models") or {}:
        safe = re.fullmatch(r"[A-Za-z0-9_.-]+", str(model)) and ".." not in str(model)  # a name, never a path
        log = ev.table(str(model)) if safe else None
        if log is None or not {"input_norm", "output_norm", "step"} <= set(log.columns):
            medians = {"input_norm": []}
            break
        log = log[log.step <= first_n] if first_n else log
        for col, values in medians.items():
            values.append(float((log.output_norm / log[col]).median()) if col in log else math.nan)
    ours, proxy = medians["input_norm"], medians.get("proxy_input_norm", [])
    steps = f"first {first_n} steps" if first_n else "whole run"
    kit = (Estimate.of(ours, f"exact l2, per tied model, {steps}") if ours else
           Estimate(float(rec["details"]["median_out_in_ratio"]), math.nan, math.nan, 1, "exact l2, whole run, pooled seeds"))
    cands = [Candidate(Estimate.of(proxy, f"proxy l2, {steps}"), "protocol", "the paper's proxy input norm (gradient "
                       "on the embedding output) over the same steps", paired_change(proxy, ours))] \
        if ours and proxy and all(math.isfinite(x) for x in proxy) else []
    return rows + [_row(key, "Figure 4", what, q["median_out_in_ratio"], kit, cands[0].estimate if cands else None,
                        cands, kind="ratio")]


_INGREDIENT_CAUSE = {"warmup10": "window", "no_embedding_decay": "protocol", "sgd": "protocol"}
PAPER_RUN_STEPS = 10_000  # the length of the paper's OLMo-1B runs behind Tables 2 and 6


def _cosines(ev: Evidence, k: float, which: str, table: str) -> Estimate | None:
    """The tied model's orthogonal cosine to an untied matrix at the sweep's last step, per seed."""
    t = ev.table(table)
    if t is None:
        return None
    t = t[(t.method == "orthogonal") & (t.output_factor == 1.0) & (t.k == k) & (t.step == t.step.max())]
    pairing = "same seed" if table.endswith("same_seed") else "cross seed"
    return Estimate.of(t[which.replace(" ", "_")], f"orthogonal, {pairing}, our last step ({int(t.step.max()) if len(t) else 0})")


def _shift(ev: Evidence, k: float, which: str) -> tuple[Estimate | None, list[Candidate]]:
    """Our shift from k = 1 to ``k`` and each other ingredient's as a candidate, paired seed by seed where possible."""
    t = ev.table("claim4_ingredients")
    if t is None:
        return None, []
    col = which.replace(" ", "_")
    est = {r.ingredient: Estimate.from_ci(getattr(r, col), getattr(r, f"{col}_ci_low"), getattr(r, f"{col}_ci_high"),
                                          int(r.n_seeds), str(r.ingredient)) for r in t[t.k == k].itertuples()}
    kit = est.pop(KIT, None)
    per = ev.table("claim4_ingredients_per_seed")
    by = None if per is None or col not in per else per[per.k == k].pivot_table(index="seed", columns="ingredient",
                                                                                 values=col)

    def change(name: str) -> Estimate | None:
        if by is None or name not in by or KIT not in by:
            return None
        both = by[[name, KIT]].dropna()
        return paired_change(both[name], both[KIT]) if len(both) > 1 else None

    return kit, [Candidate(e, "reference point" if name == SAME_SEED else _INGREDIENT_CAUSE.get(name, "protocol"),
                           INGREDIENTS.get(name, name), change(name)) for name, e in est.items()]


def _pair_values(ev: Evidence, row: pd.Series) -> np.ndarray:
    """A levels row's per-pair cosines, refused with the file named when they are not a JSON list of cosines."""
    try:
        x = checkpoint_levels.values(row)
    except (ValueError, TypeError):
        x = np.array([np.nan])
    if x.ndim != 1 or not len(x) or not np.all(np.abs(x) <= COSINE[1]):
        raise DamagedFileError(f"{ev.run.table_path(checkpoint_levels.TABLE)}: column 'values' at step {row['step']} of "
                               f"{row['quantity']!r} is not a JSON list of cosines; delete it and rerun notebook "
                               "02_align")
    return x


def _clock_candidate(ev: Evidence, quantity: str) -> list[Candidate]:
    """For a Table 6 cell at k = 1 (step 1,000, a tenth of the paper's runs): ours at our checkpoint nearest a tenth
    of training, paired with our last step: a ``window`` candidate."""
    t = ev.table(checkpoint_levels.TABLE)
    if t is None or not (t.quantity == quantity).any():
        return []
    at = checkpoint_levels.at_fraction(t, quantity, 1000 / PAPER_RUN_STEPS)
    last = t[(t.quantity == quantity) & (t.who == "this run")].sort_values("step").iloc[-1]
    if at.step == last.step:
        return []
    x, end = _pair_values(ev, at), _pair_values(ev, last)
    name = (f"ours at our checkpoint nearest a tenth of training (step {int(at.step)} of {int(last.step)}), where the "
            f"paper's step 1,000 lies in its {PAPER_RUN_STEPS:,}-step runs")
    change = paired_change(x, end, "paired over seed pairs, against our last checkpoint") if len(x) == len(end) else None
    return [Candidate(Estimate.of(x, f"orthogonal, checkpoint step {int(at.step)}"), "window", name, change)]


def claim4_rows(ev: Evidence) -> list[Row]:
    """Tables 2 and 6 (the tied matrix's cosines with the input path scaled by k) and their shifts from k = 1."""
    rows = []
    for name, table, when in (("TABLE2_STEP10K", paper.TABLE2_STEP10K, "step 10k"),
                              ("TABLE6_STEP1K", paper.TABLE6_STEP1K, "step 1k")):
        src = f"Table {name[5]}"
        for k, cells in table.items():
            for which, pv in cells.items():
                kit = _cosines(ev, k, which, "ablation_alignment")
                kit = kit if kit is not None and kit.usable else None
                same = _cosines(ev, k, which, "ablation_alignment_same_seed") if kit else None
                cands = [Candidate(same, "reference point", "the same seed's untied model")] if same else []
                if kit and table is paper.TABLE6_STEP1K and k == 1.0:
                    cands += _clock_candidate(ev, f"untied {which.split()[-1]} -> tied")
                rows.append(_row((name, str(k), which), src, f"cosine {which}, k = {k:g} ({when})", pv, kit, kit,
                                 cands, _NOT_RUN.format(f"04_ablate with k = {k:g}")))
            for which in (cells if k != 1.0 else ()):
                kit, cands = _shift(ev, k, which)
                short = {"vs untied input": "in", "vs untied output": "out"}[which]
                rows.append(_row(("derived", name, str(k), which, "shift"), f"{src} (derived)",
                                 f"shift {which}, k = 1 -> {k:g} ({when})", cells[which] - table[1.0][which], kit, kit,
                                 cands, _NOT_RUN.format(f"04_ablate with k = 1 and {k:g} and two seeds"),
                                 trends=ev.trends(f"claim4_{short}_k{k:g}") if kit else [], noise=True,
                                 kind="cosine change"))
    return rows


def table7_rows(ev: Evidence) -> list[Row]:
    """Table 7: perplexity at k = 1 and 5; only their ratio is comparable (our test-loss difference, nats)."""
    rows = [_row(("TABLE7_PPL", str(k)), "Table 7", f"WikiText-2 perplexity, k = {k:g}", pv, None, missing=(
        "a perplexity level depends on the corpus and the tokenizer (WikiText-2 with OLMo's 50k-token vocabulary "
        "there, our corpus and vocabulary here): the row below compares the change")) for k, pv in paper.TABLE7_PPL.items()]
    t, kit = ev.table("ablation_perplexity"), None
    if t is not None and {1.0, 5.0} <= set(t.k):
        by = t[t.tied].pivot_table(index="seed", columns="k", values="test_loss")
        kit = Estimate.of(by[5.0] - by[1.0], "test loss, tied_in5 minus tied, same seed")
    return rows + [_row(("derived", "TABLE7_PPL", "log ratio"), "Table 7 (derived)", "log perplexity ratio k = 5 vs "
                        "k = 1 (test loss change, nats)", math.log(paper.TABLE7_PPL[5.0] / paper.TABLE7_PPL[1.0]), kit,
                        kit, missing=_NOT_RUN.format("04_ablate with k = 1 and 5"),
                        trends=ev.trends("loss_tied_in5_minus_tied"), kind="nats", noise=True)]


def setting_rows(ev: Evidence) -> list[Row]:
    """The paper's settings (training length, warmup, lens budget) beside this run's."""
    lens = int(ev.study.get("lens_steps", 0)) * max(ev.study.get("lens_budgets") or [1])
    ours = {"steps": ev.steps, "warmup_steps": int(ev.study.get("warmup_steps", 0)), "olmo_script_steps": lens,
            "olmo_script_tokens_per_step": int(ev.study.get("lens_tokens_per_step", 0))}
    rows = []
    for key, pv in paper_numbers():
        if not any(key[:len(s)] == s for s in SETTINGS):
            continue
        mine = lens if key[0] == "FIG2_LENS" and key[-1] == "steps" else ours.get(key[-1], 0)
        est = Estimate(float(mine), math.nan, math.nan, 1, "this run's setting") if mine else None
        rows.append(Row("/".join(key), "settings", " ".join(key[1:]).replace("_", " "), pv, est, None,
                        "not measured here", f"a setting of the paper's run, not a result; this run's: {mine or 'none'}",
                        setting=True))
    return rows


def inconsistency_rows(ev: Evidence) -> list[Row]:
    """The paper's own inconsistencies: a stated value beside its own log's, judged by the same margin."""
    held = dict(paper_numbers())
    rows = []
    for i, inc in enumerate(paper.INCONSISTENCIES):
        key = tuple(str(inc["held"]).split("/"))
        cause, why = judge(float(inc["stated"]), None, kind=str(inc["kind"]),  # type: ignore[arg-type]
                           paper_other=(held[key], f"its own log ({'/'.join(key)})"))
        rows.append(Row(f"INCONSISTENCIES/{i}", "paper's sources", f"{inc['where']}", float(inc["stated"]), None, None,  # type: ignore[arg-type]
                        cause, f"{why}; stated in {inc['where']}"))
    return rows


def _context(row: Row, name: str, data: dict[str, Any], sentence: str) -> None:
    """Add a computed analysis to a row: its numbers under ``extra[name]``, its sentence after the reason."""
    row.extra[name] = data
    row.why = f"{row.why}; context ({name}): {sentence}"


def _bigram_context(ev: Evidence, r: Row, parts: list[str]) -> None:
    """Figures 2, 6 and 7's layer-0 KL beside how far our models beat the bigram baseline."""
    t = ev.table(bigram_bound.TABLE)
    layer0 = parts[0] in ("FIG6_INPUT_LAYER_KL_BITS", "FIG7_INPUT_LAYER_KL_BITS") or parts[:2] == [
        "FIG2_OLMO_KL_BITS", "0"]
    sub = None if t is None or not layer0 else t[t.variant == parts[-1]]
    if sub is None or sub.empty:
        return
    kl, gain = float(sub.kl_layer0_bits.mean()), float(sub.bigram_gain_bits.mean())
    beats = bool((sub.ce_model_nats < sub.ce_bigram_nats).all())
    data = {"kl_layer0_bits": sub.kl_layer0_bits.tolist(), "bigram_gain_bits": sub.bigram_gain_bits.tolist(),
            "ce_model_nats": float(sub.ce_model_nats.mean()), "ce_bigram_nats": float(sub.ce_bigram_nats.iloc[0]),
            "ce_unigram_nats": float(sub.ce_unigram_nats.iloc[0]), "beats_bigram": beats}
    tail = ("a layer-0 lens reads only the current token, so this gain is about all the room a layer-0 KL has"
            if beats else "the models do not beat the bigram, so claim 3 is not evidence from them")
    _context(r, "bigram baseline", data, f"our {parts[-1]} models' test loss {data['ce_model_nats']:.3f} nats "
             f"against the bigram baseline's {data['ce_bigram_nats']:.3f} (unigram {data['ce_unigram_nats']:.3f}) "
             f"on the lens's test windows, a gain of {gain:+.3f} bits beside our layer-0 KL of {kl:.3f}: {tail}")


def _knn_context(ev: Evidence, r: Row, parts: list[str]) -> None:
    """Table 5's overlap against chance and the tied-vs-tied ceiling, overall and in the extreme frequency bins."""
    t = ev.table(knn_bins.TABLE)
    comp = _KNN.get(parts[-1]) if parts[0] == "TABLE5" else None
    if t is None or comp is None or not (t.comparison == comp).any():
        return
    c = knn_bins.cell(t, comp)
    seen = t[(t.comparison == comp) & (t.bin != "unseen")]
    bins = {str(b.bin): {"overlap": float(b.overlap), "ceiling": float(b.ceiling), "count_min": int(b.count_min),
                         "count_max": int(b.count_max)} for b in seen.itertuples()}
    lo, hi = seen.iloc[0], seen.iloc[-1]
    _context(r, "KNN by frequency", {**c, "bins": bins},
             f"ours is {c['overlap'] / c['chance']:.1f}x chance ({c['chance']:.3g}, k / (V - 1)) and "
             f"{c['overlap'] / c['ceiling']:.0%} of the tied-vs-tied ceiling ({c['ceiling']:.3g}); rarest bin "
             f"{lo.overlap:.3g} (ceiling {lo.ceiling:.3g}), most frequent {hi.overlap:.3g} (ceiling "
             f"{hi.ceiling:.3g})")


_LEVEL_OF = {("TABLE1", "OLMo-1B", "untied output -> tied", "orthogonal"): "untied output -> tied",
             ("TABLE1", "OLMo-1B", "untied input -> tied", "orthogonal"): "untied input -> tied",
             ("TABLE1", "OLMo-1B", "untied input -> untied output", "orthogonal"): "untied input -> untied output",
             **{(t, "1.0", f"vs untied {w}"): f"untied {w} -> tied" for t in ("TABLE2_STEP10K", "TABLE6_STEP1K")
                for w in ("input", "output")},
             ("FIG3_COS_TO_INIT", "input"): "untied input: cosine to initialisation",
             ("FIG3_COS_TO_INIT", "output"): "untied output: cosine to initialisation"}
"""The rows whose level :mod:`tiebias.ablate.checkpoint_levels` reads at every checkpoint, and its quantity."""


def _clock_context(ev: Evidence, r: Row, parts: list[str]) -> None:
    """Whether our level of a Table 1, 2, 6 or Figure 3 number still moved over the last doubling of training."""
    t, q = ev.table(checkpoint_levels.TABLE), _LEVEL_OF.get(tuple(parts))
    ours = None if t is None or q is None else t[(t.quantity == q) & (t.who == "this run")].sort_values("step")
    if ours is None or len(ours) < 2:
        return
    last, half = ours.iloc[-1], checkpoint_levels.at_fraction(t, q, 0.5)
    if half.step == last.step:
        return
    move = paired_change(_pair_values(ev, last), _pair_values(ev, half), "paired over seed pairs")
    data = {"steps": ours.step.astype(int).tolist(), "means": ours["mean"].tolist(), "last_doubling": asdict(move)}
    still = (f"still moving ({LEVEL:.0%} CI clear of 0)" if math.isfinite(move.low)
             and stats.excludes_zero(move.low, move.high) else "not clearly moving")
    _context(r, "training clock", data, f"from step {int(half.step)} to our last, {int(last.step)}, ours "
             f"moved {move.value:+.3g} [{move.low:+.3g}, {move.high:+.3g}]: {still}")


BUILDERS = (table1_rows, figure2_rows, figure3_rows, figure4_rows, claim4_rows, table7_rows, inconsistency_rows,
            setting_rows)
"""Each source of the paper's numbers, in the paper's order."""
CANNOT_BE_JUDGED = "cannot be judged"


def claim_lines(ev: Evidence) -> list[dict[str, str]]:
    """Per claim: [Re] or [¬Re] at our scale under the kit's protocol and under the paper's, and why."""
    c = ev.claims
    proxy = _per_seed_share(ev, "proxy l2", "warmup")  # claim 2 under the paper's protocol: the CI's low end above 0.5
    two = (None if proxy is None else f"{CANNOT_BE_JUDGED} (the proxy share of {sum(not math.isfinite(x) for x in proxy)}"
           f" of {len(proxy)} seeds is not a number: no interval)" if not np.isfinite(proxy).all() else
           f"{CANNOT_BE_JUDGED} (one seed: no interval)" if len(proxy) < 2 else
           "holds" if stats.summarise(proxy).ci_low > 0.5 else "does not hold")
    shift = ev.table("claim4_ingredients")  # claim 4: the k = 5 shift towards input, away from output, CIs clear of 0
    kit5 = None if shift is None else shift[(shift.ingredient == KIT) & (shift.k == 5.0)]
    ends = [] if kit5 is None or not len(kit5) else [float(kit5[e].iloc[0]) for e in ("vs_untied_input_ci_low",
                                                                                       "vs_untied_output_ci_high")]
    four = (None if not ends else f"{CANNOT_BE_JUDGED} (no {LEVEL:.0%} interval of the k = 5 shift: one seed, or not a "
            "number)" if not all(map(math.isfinite, ends)) else "holds" if ends[0] > 0 > ends[1] else "does not hold")
    lines = []
    for claim, kit_key, paper_status, why in (
            ("1. alignment", "claim1_alignment", c.get("claim1_alignment", {}).get("status"),
             "the paper's protocol is the kit's here (centred, in-sample Procrustes, two separately trained models)"),
            ("2. gradient imbalance", "claim2_gradient_flow", two,
             f"paper's protocol: its proxy metric (l2) over the warmup, share above 0.5 with the {LEVEL:.0%} CI"),
            ("3. early layers pay", "claim3_tuned_lens", c.get("claim3_tuned_lens_reference", {}).get("status"),
             "paper's protocol: its code's lens reading (hidden state i through translator i - 1)"),
            ("4. causality", "claim4_causality", four,
             "paper's protocol: the k = 5 shift against another run's untied model, towards input and away from "
             f"output with the {LEVEL:.0%} CI clear of 0")):
        rec = c.get(kit_key, {})
        re_of = {"holds": "[Re]", "does not hold": "[¬Re]"}
        lines.append({"claim": claim, "kit": re_of.get(str(rec.get("status")), str(rec.get("status") or "not run")),
                      "paper_protocol": re_of.get(str(paper_status), str(paper_status)) if paper_status
                      else "not measured here", "kit_statement": str(rec.get("statement", "not run")),
                      "paper_protocol_is": why})
    return lines


CLAIM_SOURCES = {"1. alignment": ("Table 1",), "2. gradient imbalance": ("Figure 4",),
                 "3. early layers pay": ("Figure 2",), "4. causality": ("Table 2", "Table 6")}


def which_part(line: dict[str, str], rows: Sequence[Row]) -> str:
    """For a [Re] claim whose headline numbers differ from ours without a cause: what reproduced (the sign and
    ordering the rule compares) and what did not (the size); empty otherwise."""
    mine = [r for r in rows if line["kit"] == "[Re]" and not r.setting and r.kit is not None and r.source.startswith(
        CLAIM_SOURCES.get(line["claim"], ("-",))) and r.cause in ("agrees", "unexplained")]
    off = [r for r in mine if r.cause == "unexplained"]
    if not off:
        return ""
    return (f"reproduced: the sign and the ordering the claim's rule compares; not reproduced: the size, {len(off)} of "
            f"{len(mine)} of its headline numbers ({', '.join(sorted({x.source for x in off}))}) differ from ours "
            f"without a found cause (e.g. {off[0].quantity}: paper {off[0].paper:.3g}, ours {off[0].kit.value:.3g})")


@dataclass
class Reproduction:
    """The report's content: rows, per-claim lines, why the run is not evidence (or None), and the counts: rows of
    one ``group`` are one comparison, counted once under each cause it gets (``with_two_causes``: those with 2+)."""

    rows: list[Row]
    claims: list[dict[str, str]]
    not_meaningful: str | None
    scale_source: str | None
    causes: dict[str, int] = field(init=False)
    comparisons: int = field(init=False)
    with_two_causes: int = field(init=False)

    def __post_init__(self) -> None:
        by: dict[str, set[str]] = {}
        for r in self.rows:
            if not r.setting:
                by.setdefault(r.group or r.key, set()).add(r.cause)
        self.causes = {c: sum(c in causes for causes in by.values()) for c in CAUSES}
        self.comparisons = len(by)
        self.with_two_causes = sum(len(c) > 1 for c in by.values())


def build(run: Run, scale: Run | None = None) -> Reproduction:
    """Every number of :mod:`tiebias.paper` beside this run's, each with its computed cause."""
    ev = Evidence.load(run, scale)
    rows = [r for b in BUILDERS for r in b(ev)]
    why = not_meaningful(run, models={k for r in ev.claims.values() for k in r.get("models", {})})  # any claim's
    layerwise = None if why else not_meaningful(run, LAYERWISE[0], ev.claims.get(LAYERWISE[0], {}).get("models", {}))
    for r in rows:
        parts = r.key.split("/")
        for add in (_bigram_context, _knn_context, _clock_context):  # context, never a cause of its own
            add(ev, r, parts)
        if r.kit is not None and r.kit.usable and not r.setting:
            r.group = f"{r.kit.label} = {r.kit.value!r} [{r.kit.low!r}, {r.kit.high!r}], n {r.kit.n}"
        if why or (layerwise and r.source.startswith(("Figure 2", "Figure 6", "Figure 7"))):
            r.meaningful = False
            r.why = f"not meaningful ({why or layerwise}); {r.why}"
    lines = claim_lines(ev)
    for line in lines:
        line["which_part"] = which_part(line, rows)
    for line in lines if why else ():
        line["kit"] = line["paper_protocol"] = "not meaningful"
    return Reproduction(rows, lines, why, ev.scale_source)
