"""Every number the paper reports beside ours, and the computed cause of each difference.

A row holds one number from :mod:`tiebias.paper`, ours under the kit's protocol and (where the kit computes it) under
the paper's, a 95% range for one run, and a cause from :data:`CAUSES`. The paper reports single runs, so a value
"agrees" when it lies inside the range one run of ours would fall in 95% of the time (mean +- t sd sqrt(1 + 1/n)
over seeds). Causes come only from the run's own decompositions (claim 2's windows, claim 4's ingredients, claim 3's
readings, a scale axis): a candidate that contains the paper's value names the cause; one that closes at least half
of the distance names it as the main part; otherwise the row says ``unexplained``. Nothing here is typed per row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tiebias import paper, stats
from tiebias.ablate.ingredients import KIT, SAME_SEED
from tiebias.config.choices import INGREDIENTS
from tiebias.run.files import DamagedFileError
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.verdicts.evidence import not_meaningful
from tiebias.verdicts.records import current_results

CAUSES = ("agrees", "protocol", "window", "scale", "reference point", "seed noise", "paper inconsistency",
          "not measured here", "unexplained")
"""The fixed vocabulary of a row's cause."""
MOST = 0.5
"""A candidate that closes at least this share of the distance between ours and the paper's value names the cause."""
SETTINGS = {("FIG4_LOG_RUN",), ("FIG4_OLD_LOG", "steps"), ("FIG4_OLD_LOG", "warmup_steps"), ("FIG2_LENS",)}
"""Keys of :mod:`tiebias.paper` that hold the paper's settings (steps, warmup, lens budget), not results."""


@dataclass(frozen=True)
class Estimate:
    """Our value for one quantity and the 95% range one run would fall in (NaN bounds: fewer than 2 seeds)."""

    value: float
    low: float
    high: float
    n: int
    label: str

    @classmethod
    def of(cls, values: Any, label: str, level: float = LEVEL) -> Estimate:
        """From per-seed values: mean +- t(n - 1) sd sqrt(1 + 1/n), the prediction range of one more run."""
        x = np.asarray(values, dtype=float)
        x = x[np.isfinite(x)]
        if not len(x):
            return cls(math.nan, math.nan, math.nan, 0, label)
        half = stats.t_half_width(float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x), level) \
            * math.sqrt(len(x) + 1)
        return cls(float(x.mean()), float(x.mean()) - half, float(x.mean()) + half, len(x), label)

    @classmethod
    def from_ci(cls, mean: float, low: float, high: float, n: int, label: str) -> Estimate:
        """From a t-interval of the mean over ``n`` seeds: its half-width times sqrt(n + 1) is one run's."""
        half = (high - low) / 2 * math.sqrt(n + 1) if n > 1 else math.nan
        return cls(float(mean), float(mean) - half, float(mean) + half, int(n), label)

    @property
    def usable(self) -> bool:
        return self.n > 0 and math.isfinite(self.value)

    def contains(self, x: float) -> bool:
        return math.isfinite(self.low) and self.low <= x <= self.high

    def text(self) -> str:
        if not self.usable:
            return "not available"
        rng = f" [{self.low:.3g}, {self.high:.3g}]" if math.isfinite(self.low) else " (one seed: no range)"
        return f"{self.value:.3g}{rng}"


@dataclass(frozen=True)
class Candidate:
    """A decomposition's reading of the quantity and the cause it stands for when it matches the paper."""

    estimate: Estimate
    cause: str
    name: str


@dataclass(frozen=True)
class Trend:
    """A scale axis's fitted trend of the quantity (per doubling, 95% interval) and its value at the paper's size."""

    axis: str
    word: str
    slope: float
    low: float
    high: float
    at_paper: float


@dataclass
class Row:
    """One number the paper reports, ours beside it and the computed cause."""

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

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("kit", "paper_protocol"):
            d[k] = None if getattr(self, k) is None else asdict(getattr(self, k))
        return d


def judge(paper_value: float, kit: Estimate | None, candidates: Sequence[Candidate] = (),
          trends: Sequence[Trend] = (), spread: tuple[float, float] | None = None,
          noise: bool = False) -> tuple[str, str]:
    """The cause of the difference between ``paper_value`` and ours, and a sentence saying how it was found.

    In order: ours contains it (agrees); it lies within the paper's own spread across model pairs (agrees); a
    candidate contains it (its cause); a candidate closes at least :data:`MOST` of the distance (its cause, the rest
    named); a scale trend with an interval clear of 0 points from ours towards it (scale); for a change the paper
    reports, ``noise`` and its size inside one run's range around 0 (seed noise); else unexplained.
    """
    p = f"{paper_value:.3g}"
    if kit is not None and kit.usable and kit.contains(paper_value):
        return "agrees", f"the paper's {p} lies inside one run's {LEVEL:.0%} range of ours, {kit.text()} ({kit.label})"
    if kit is not None and kit.usable and spread is not None and spread[0] <= kit.value <= spread[1]:
        return "agrees", (f"ours, {kit.value:.3g}, lies within the paper's own spread across its model pairs "
                          f"[{spread[0]:.3g}, {spread[1]:.3g}]")
    usable = [c for c in candidates if c.estimate.usable]
    for c in usable:
        if c.estimate.contains(paper_value):
            return c.cause, f"{c.name}: {c.estimate.text()}, a range that contains the paper's {p}"
    if kit is not None and kit.usable and kit.value != paper_value:
        closed = [(1 - abs(paper_value - c.estimate.value) / abs(paper_value - kit.value), c) for c in usable]
        if closed and max(closed, key=lambda t: t[0])[0] >= MOST:
            share, c = max(closed, key=lambda t: t[0])
            return c.cause, (f"{c.name} moves ours from {kit.value:.3g} to {c.estimate.value:.3g}, {share:.0%} of "
                             f"the way to the paper's {p}; the rest is unexplained")
    if kit is not None and kit.usable:
        for t in trends:
            if stats.excludes_zero(t.low, t.high) and np.sign(t.slope) == np.sign(paper_value - kit.value):
                return "scale", (f"along {t.axis} ours {t.word} ({t.slope:+.3g} per doubling, {LEVEL:.0%} CI "
                                 f"[{t.low:+.3g}, {t.high:+.3g}]), towards the paper's {p}; the line gives "
                                 f"{t.at_paper:.3g} at the paper's size (an extrapolation)")
        if noise and math.isfinite(kit.low):
            half = (kit.high - kit.low) / 2
            if abs(paper_value) < half:
                return "seed noise", (f"the paper's change, {p}, is smaller than one run's noise at our scale "
                                      f"(+-{half:.3g}): from a single run it cannot be told from 0")
    tried = ", ".join(c.name for c in candidates) or "no decomposition of this number"
    ours = kit.text() if kit is not None else "none"
    return "unexplained", f"ours {ours}; tried: {tried}"


@dataclass
class Evidence:
    """What a run folder holds for the report: its metrics tables, claim records, study settings and scale trends
    (its own ``scale_trends`` table, or another run's given as ``scale``)."""

    run: Run
    claims: dict[str, dict]
    study: dict[str, Any]
    scale_trends: pd.DataFrame | None = None
    scale_source: str | None = None
    _tables: dict[str, pd.DataFrame | None] = field(default_factory=dict)

    @classmethod
    def load(cls, run: Run, scale: Run | None = None) -> Evidence:
        ev = cls(run, current_results(run), run.config.get("study", {}))
        for src in ([run] if scale is None else [scale]):
            path = src.table_path("scale_trends")
            if path.exists():
                ev.scale_trends, ev.scale_source = pd.read_csv(path), str(src.path)
        return ev

    def table(self, name: str) -> pd.DataFrame | None:
        """``metrics/<name>.csv`` of the run, or None when the notebook that writes it has not run."""
        if name not in self._tables:
            path = self.run.table_path(name)
            try:
                self._tables[name] = pd.read_csv(path) if path.exists() else None
            except (ValueError, UnicodeDecodeError) as e:  # pandas' ParserError and EmptyDataError are ValueErrors
                raise DamagedFileError(f"{path}: not a readable table ({type(e).__name__}: {e}); delete it and rerun "
                                       "the notebook that writes it") from None
        return self._tables[name]

    def trends(self, quantity: str) -> list[Trend]:
        """The scale axis's trends of one quantity (:mod:`tiebias.ablate.scale`), those with a fitted line."""
        t = self.scale_trends
        if t is None:
            return []
        out = []
        for r in t[(t.quantity == quantity) & t.slope.notna()].itertuples():
            out.append(Trend(f"{r.axis} (scale run {self.scale_source})", str(r.word), float(r.slope),
                             float(r.ci_low), float(r.ci_high), float(r.at_paper)))
        return out

    @property
    def steps(self) -> int:
        return int(self.study.get("steps", 0))

    @property
    def warmup(self) -> int:
        return int(self.study.get("warmup_steps", 0))


def paper_numbers() -> Iterator[tuple[tuple[str, ...], float]]:
    """Every number :mod:`tiebias.paper` holds, as (key path, value); a (low, high) range yields its midpoint."""
    def walk(path: tuple[str, ...], x: Any) -> Iterator[tuple[tuple[str, ...], float]]:
        if isinstance(x, dict):
            for k, v in x.items():
                yield from walk((*path, str(k)), v)
        elif isinstance(x, tuple) and all(isinstance(v, (int, float)) for v in x):
            yield path, float(np.mean(x))
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            yield path, float(x)

    for name in dir(paper):
        if name.isupper() and isinstance(getattr(paper, name), dict):
            yield from walk((name,), getattr(paper, name))


def _row(key: tuple[str, ...], source: str, quantity: str, paper_value: float, kit: Estimate | None,
         paper_protocol: Estimate | None = None, candidates: Sequence[Candidate] = (), **judged: Any) -> Row:
    cause, why = judge(paper_value, kit, candidates, **judged)
    return Row("/".join(key), source, quantity, float(paper_value), kit, paper_protocol, cause, why)


def _missing(key: tuple[str, ...], source: str, quantity: str, paper_value: float, why: str) -> Row:
    return Row("/".join(key), source, quantity, float(paper_value), None, None, "not measured here", why)


def _spread(values: Sequence[float]) -> tuple[float, float] | None:
    return (min(values), max(values)) if len(values) > 1 else None


_PAIRED = {"untied input -> untied output": "within model"}
_KNN = {"tied vs untied input": "untied input -> tied", "tied vs untied output": "untied output -> tied",
        "untied input vs output": "untied input -> untied output"}
_NOT_RUN = "its notebook has not run in this folder ({})"


def _alignment(ev: Evidence, comparison: str, column: str) -> tuple[Estimate | None, list[Candidate]]:
    """Ours for one Table 1 or 5 cell: cross-seed pairs (the paper compares two separately trained models), and the
    same-seed pairing as the reference-point candidate."""
    t = ev.table("alignment_table1")
    if t is None:
        return None, []
    pairing = _PAIRED.get(comparison, "cross seed")
    sub = t[(t.comparison == comparison) & (t.pairing == pairing)]
    kit = Estimate.of(sub[column], f"{column}, in-sample, {pairing}")
    same = t[(t.comparison == comparison) & (t.pairing == "same seed")]
    cands = [Candidate(Estimate.of(same[column], "same-seed pairs"), "reference point",
                       "pairing each tied model with the untied model of its own seed")] if len(same) else []
    return kit, cands


def table1_rows(ev: Evidence) -> list[Row]:
    """Table 1 (mean cosine after alignment, three maps) and its derived gap, out -> tied minus in -> tied."""
    rows = []
    for fam, comps in paper.TABLE1.items():
        for comp, maps in comps.items():
            for m, pv in maps.items():
                key = ("TABLE1", fam, comp, m)
                kit, cands = _alignment(ev, comp, m)
                if kit is None:
                    rows.append(_missing(key, "Table 1", f"{comp}, {m} map", pv, _NOT_RUN.format("02_align")))
                    continue
                spread = _spread([paper.TABLE1[f][comp][m] for f in paper.TABLE1])
                rows.append(_row(key, "Table 1", f"{comp}, {m} map ({fam})", pv, kit, kit, cands, spread=spread))
        for m in ("orthogonal", "linear"):
            pv = comps["untied output -> tied"][m] - comps["untied input -> tied"][m]
            key = ("derived", "TABLE1", fam, "gap", m)
            t = ev.table("alignment_table1")
            if t is None:
                rows.append(_missing(key, "Table 1 (derived)", f"claim 1 gap, {m}", pv, _NOT_RUN.format("02_align")))
                continue
            cross = t[t.pairing == "cross seed"].set_index(["seed_source", "seed_target", "comparison"])[m].unstack()
            gap = cross["untied output -> tied"] - cross["untied input -> tied"]
            kit = Estimate.of(gap, f"{m}, in-sample, cross seed")
            trends = ev.trends("claim1_gap") if m == "orthogonal" else []
            rows.append(_row(key, "Table 1 (derived)", f"claim 1 gap: out -> tied minus in -> tied, {m} ({fam})",
                             pv, kit, kit, trends=trends))
    return rows


def table5_rows(ev: Evidence) -> list[Row]:
    """Table 5: KNN@10 overlap of neighbourhoods."""
    rows = []
    for fam, cells in paper.TABLE5.items():
        for name, pv in cells.items():
            key = ("TABLE5", fam, name)
            t = ev.table("alignment_table1")
            if t is not None and "knn@10" not in t:
                ks = [c for c in t.columns if c.startswith("knn@")]
                rows.append(_missing(key, "Table 5", f"KNN@10, {name}", pv, f"this run measured {', '.join(ks) or 'no KNN'}"
                                     " (knn_k), the paper's Table 5 k = 10: not the same quantity"))
                continue
            kit, cands = _alignment(ev, _KNN[name], "knn@10")
            if kit is None:
                rows.append(_missing(key, "Table 5", f"KNN@10, {name}", pv, _NOT_RUN.format("02_align")))
                continue
            spread = _spread([paper.TABLE5[f][name] for f in paper.TABLE5])
            rows.append(_row(key, "Table 5", f"KNN@10 overlap, {name} ({fam})", pv, kit, kit, cands, spread=spread))
    return rows


def _lens_kl(ev: Evidence, variant: str, layer: int) -> Estimate | None:
    """Tuned-lens KL (bits) at one layer of the final models, package reading, largest lens budget, per seed."""
    t = ev.table("lens_per_layer")
    if t is None:
        return None
    t = t[(t.protocol == "package") & (t.step == t.step.max())]
    t = t[(t.budget == t.budget.max()) & (t.variant == variant) & (t.layer == layer)]
    return Estimate.of(t.kl_tuned_bits, f"package reading, {int(t.lens_steps.max()) if len(t) else 0}-step lens")


def _reading_gaps(ev: Evidence, layer: int) -> dict[str, Estimate]:
    """The tied - untied gap at one layer under each of claim 3's four readings (a: the kit's; b-d: the paper's
    reading, its budget, both)."""
    t = ev.table("lens_readings_per_layer")
    if t is None:
        return {}
    return {r.reading: Estimate.from_ci(r.gap, r.ci_low, r.ci_high, int(r.n_seeds), str(r.label))
            for r in t[t.layer == layer].itertuples()}


def figure2_rows(ev: Evidence) -> list[Row]:
    """Figure 2: tuned-lens KL at the input layer (and OLMo's layer 1), and the tied - untied gaps it shows."""
    rows: list[Row] = []
    cells = [(("FIG2_INPUT_LAYER_KL_BITS", fam, v), fam, 0, v, x)
             for fam, d in paper.FIG2_INPUT_LAYER_KL_BITS.items() for v, x in d.items()]
    cells += [(("FIG2_OLMO_KL_BITS", str(layer), v), "OLMo-1B", layer, v, x)
              for layer, d in paper.FIG2_OLMO_KL_BITS.items() for v, x in d.items()]
    for key, fam, layer, variant, x in cells:
        pv = float(np.mean(x))
        what = f"tuned-lens KL at layer {layer}, {variant} ({fam}), bits"
        kit = _lens_kl(ev, variant, layer)
        if kit is None or not kit.usable:
            rows.append(_missing(key, "Figure 2", what, pv, _NOT_RUN.format("03_lens")))
            continue
        spread = _spread([float(np.mean(d[variant])) for d in paper.FIG2_INPUT_LAYER_KL_BITS.values()]) \
            if layer == 0 else None
        rows.append(_row(key, "Figure 2", what, pv, kit, kit if layer == 0 else None, spread=spread))
    gaps = {("OLMo-1B", layer): d["tied"] - d["untied"] for layer, d in paper.FIG2_OLMO_KL_BITS.items()}
    gaps |= {(fam, 0): float(np.mean(d["tied"])) - d["untied"]
             for fam, d in paper.FIG2_INPUT_LAYER_KL_BITS.items() if fam != "OLMo-1B"}
    for (fam, layer), pv in gaps.items():
        key = ("derived", "FIG2", fam, str(layer), "gap")
        what = f"tied - untied tuned-lens KL at layer {layer} ({fam}), bits"
        g = _reading_gaps(ev, layer)
        if "a" not in g:
            rows.append(_missing(key, "Figure 2 (derived)", what, pv, _NOT_RUN.format("03_lens with both readings")))
            continue
        causes = {"b": "protocol", "c": "protocol", "d": "protocol"}
        cands = [Candidate(g[k], c, f"the {g[k].label}") for k, c in causes.items() if k in g]
        rows.append(_row(key, "Figure 2 (derived)", what, pv, g["a"], g.get("d") or g.get("b"), cands,
                         spread=_spread([v for (f, lay), v in gaps.items() if lay == 0]) if layer == 0 else None))
    return rows


def figure3_rows(ev: Evidence) -> list[Row]:
    """Figure 3: how far an untied model's matrices moved from their initialisation (cosine to step 0)."""
    rows = []
    t = ev.table("alignment_evolution")
    for which, pv in paper.FIG3_COS_TO_INIT.items():
        key, what = ("FIG3_COS_TO_INIT", which), f"untied {which} matrix: cosine to its initialisation"
        if t is None:
            rows.append(_missing(key, "Figure 3", what, pv, _NOT_RUN.format("02_align")))
            continue
        sub = t[(t.matrix == f"untied {which}") & (t.step == t.step.max())]
        kit = Estimate.of(sub.cos_to_init, f"at our last step ({int(t.step.max())}; the paper's is step 20,000)")
        rows.append(_row(key, "Figure 3", what, pv, kit))
    return rows


_BY_PLACE = {"first 100 steps": "warmup", "warmup": "warmup", "after warmup": "after warmup",
             "whole run": "whole run", "first 1000 steps": "warmup"}
"""Our window at the same place relative to warmup as each of the paper's (its first 100 and first 1000 steps lie in
its 1,000-step warmup)."""
_SCALE_SHARE = {"whole run": "claim2_share", "warmup": "claim2_share_warmup", "after warmup": "claim2_share_after_warmup"}


def _per_seed_share(ev: Evidence, metric: str, window: str) -> np.ndarray | None:
    """Our output share in one window under one metric (:mod:`tiebias.train.windows`), one value per seed; ``whole
    run`` is the ``first 1000 steps`` window when the run is no longer."""
    t = ev.table("claim2_windows")
    if window == "whole run":
        window = "first 1000 steps" if 0 < ev.steps <= 1000 else ""
    if t is None or not window:
        return None
    sub = t[(t.window == window) & (t.metric == metric)]
    seeds = [c for c in sub.columns if c.startswith("share_")]
    return sub[seeds].iloc[0].to_numpy(dtype=float) if len(sub) else None


def _share(ev: Evidence, metric: str, window: str) -> Estimate | None:
    x = _per_seed_share(ev, metric, window)
    return None if x is None else Estimate.of(x, f"{metric}, {window}")


def _share_row(ev: Evidence, key: tuple[str, ...], what: str, pv: float, norm: str, window: str,
               paper_warmup: int, first: Sequence[Candidate] = ()) -> Row:
    """A claim-2 number: ours under the exact split over the same steps (or the same place relative to warmup when
    our run has no such steps); candidates: the paper's proxy over the same steps, then both metrics over the window
    at the same place relative to warmup."""
    name = {"l2": "l2", "squared_l2": "squared l2", "l1": "l1"}[norm]
    same = {"warmup": f"first {paper_warmup} steps"}.get(window, window)  # after warmup, whole run: not our steps
    steps_window = same if same.startswith("first ") and _share(ev, f"exact {name}", same) is not None else None
    place = _BY_PLACE[window]
    kit = _share(ev, f"exact {name}", steps_window or place)
    if kit is None:
        return _missing(key, "Figure 4", what, pv, _NOT_RUN.format("01_train with gradient windows"))
    proxy = _share(ev, f"proxy {name}", steps_window or place)
    cands = list(first)
    if proxy is not None:
        cands.append(Candidate(proxy, "protocol", "the paper's proxy metric (gradient on the embedding output) over "
                               + (f"the same steps ({_steps_text(ev, steps_window)})" if steps_window else f"our {place}")))
    if steps_window and steps_window != place:
        for metric in (f"proxy {name}", f"exact {name}"):
            e = _share(ev, metric, place)
            if e is not None:
                cands.append(Candidate(e, "window", f"{metric} over our {place}, the same place relative to warmup"))
    scale_key = {"first 1000 steps": "whole run", "first 100 steps": ""}.get(steps_window or place, steps_window or place)
    trends = ev.trends(_SCALE_SHARE.get(scale_key, "")) if norm == "l2" else []
    return _row(key, "Figure 4", what, pv, kit, proxy, cands, trends=trends)


def _steps_text(ev: Evidence, window: str) -> str:
    n = int(window.split()[1])
    return f"{window}: our whole run of {ev.steps}" if n > ev.steps else window


def figure4_rows(ev: Evidence) -> list[Row]:
    """Figure 4: the output path's share of the tied matrix's gradient, per window and norm, and its quoted means."""
    rows = []
    for norm, wins in paper.FIG4_LOG_WINDOWS.items():
        for window, pv in wins.items():
            rows.append(_share_row(ev, ("FIG4_LOG_WINDOWS", norm, window), f"output share, {norm}, {window} (the "
                                   "paper's published log)", pv, norm, window, paper.FIG4_LOG_RUN["warmup_steps"]))
    old = paper.FIG4_OLD_LOG["l2"]
    for window, pv in old.items():
        rows.append(_share_row(ev, ("FIG4_OLD_LOG", "l2", window), f"output share, l2, {window} (the paper's "
                               "older log)", pv, "l2", window,
                               paper.FIG4_OLD_LOG["warmup_steps"]))
    kit = _share(ev, "exact l2", "first 1000 steps")
    half = (kit.high - kit.low) / 2 if kit is not None and math.isfinite(kit.low) else math.nan
    older = Candidate(Estimate(old["whole run"], old["whole run"] - half, old["whole run"] + half, 1,
                               "the older log"), "paper inconsistency",
                      f"the paper's older log ({paper.FIG4_OLD_LOG['steps']} steps, warmup "
                      f"{paper.FIG4_OLD_LOG['warmup_steps']}) gives {old['whole run']:.3g} over its whole run, within "
                      "one run's noise: this number comes from another run than the quoted one")
    q = paper.FIG4_OUTPUT_SHARE
    rows.append(_share_row(ev, ("FIG4_OUTPUT_SHARE", "quoted"), "output share over the first 1000 steps (quoted)",
                           q["quoted"], "l2", "first 1000 steps", paper.FIG4_LOG_RUN["warmup_steps"]))
    rows.append(_share_row(ev, ("FIG4_OUTPUT_SHARE", "reproduction_log_mean"), "output share, the reproduction "
                           "log's mean", q["reproduction_log_mean"], "l2", "first 1000 steps",
                           paper.FIG4_OLD_LOG["warmup_steps"], [older]))
    rows.append(_ratio_row(ev, q["median_out_in_ratio"], old["whole run"], half))
    return rows


def _ratio_row(ev: Evidence, pv: float, old_share: float, half: float) -> Row:
    """The median output / input norm ratio: ours (exact, whole run) and the older log's share as a ratio."""
    key, what = ("FIG4_OUTPUT_SHARE", "median_out_in_ratio"), "median output / input gradient norm ratio"
    rec = ev.claims.get("claim2_gradient_flow", {}).get("details", {})
    if "median_out_in_ratio" not in rec:
        return _missing(key, "Figure 4", what, pv, _NOT_RUN.format("01_train"))
    kit = Estimate(float(rec["median_out_in_ratio"]), math.nan, math.nan, 1, "exact l2, whole run, pooled seeds")
    lo, hi = old_share - half, min(old_share + half, 0.999)
    older = Candidate(Estimate(old_share / (1 - old_share), lo / (1 - lo), hi / (1 - hi), 1, "the older log"),
                      "paper inconsistency", f"a ratio of {pv:.3g} is a share of {pv / (1 + pv):.3g}, the paper's "
                      f"older log's {old_share:.3g} (another run than the quoted 70%)")
    return _row(key, "Figure 4", what, pv, kit, None, [older])


_COLUMN = {"vs untied input": "vs_untied_input", "vs untied output": "vs_untied_output"}
_SHORT = {"vs untied input": "in", "vs untied output": "out"}
_INGREDIENT_CAUSE = {"warmup10": "window", "no_embedding_decay": "protocol", "sgd": "protocol"}
"""The cause each of claim 4's recipe ingredients stands for (:data:`tiebias.config.choices.INGREDIENTS`)."""


def _cosines(ev: Evidence, k: float, which: str, table: str) -> Estimate | None:
    """The tied model's orthogonal Procrustes cosine to an untied matrix at the sweep's last step, per seed."""
    t = ev.table(table)
    if t is None:
        return None
    t = t[(t.method == "orthogonal") & (t.output_factor == 1.0) & (t.k == k) & (t.step == t.step.max())]
    pairing = "same seed" if table.endswith("same_seed") else "cross seed"
    return Estimate.of(t[_COLUMN[which]], f"orthogonal, {pairing}, our last step ({int(t.step.max()) if len(t) else 0})")


def _shift(ev: Evidence, k: float, which: str) -> tuple[Estimate | None, list[Candidate]]:
    """Our shift from k = 1 to ``k`` (claim 4's ingredients table) and each other ingredient's as a candidate."""
    t = ev.table("claim4_ingredients")
    if t is None:
        return None, []
    col = _COLUMN[which]
    est = {r.ingredient: Estimate.from_ci(getattr(r, col), getattr(r, f"{col}_ci_low"), getattr(r, f"{col}_ci_high"),
                                          int(r.n_seeds), str(r.ingredient)) for r in t[t.k == k].itertuples()}
    kit = est.pop(KIT, None)
    cands = [Candidate(e, "reference point" if name == SAME_SEED else _INGREDIENT_CAUSE.get(name, "protocol"),
                       INGREDIENTS.get(name, name)) for name, e in est.items()]
    return kit, cands


def claim4_rows(ev: Evidence) -> list[Row]:
    """Tables 2 and 6 (the tied matrix's cosines with the input path scaled by k) and their shifts from k = 1."""
    rows = []
    for name, table, when in (("TABLE2_STEP10K", paper.TABLE2_STEP10K, "step 10k"),
                              ("TABLE6_STEP1K", paper.TABLE6_STEP1K, "step 1k")):
        src = f"Table {name[5]}"
        for k, cells in table.items():
            for which, pv in cells.items():
                key, what = (name, str(k), which), f"cosine {which}, k = {k:g} ({when})"
                kit = _cosines(ev, k, which, "ablation_alignment")
                if kit is None or not kit.usable:
                    rows.append(_missing(key, src, what, pv, _NOT_RUN.format(f"04_ablate with k = {k:g}")))
                    continue
                same = _cosines(ev, k, which, "ablation_alignment_same_seed")
                cands = [Candidate(same, "reference point", "the same seed's untied model")] if same else []
                rows.append(_row(key, src, what, pv, kit, kit, cands))
            if k == 1.0:
                continue
            for which in cells:
                pv = cells[which] - table[1.0][which]
                key, what = ("derived", name, str(k), which, "shift"), f"shift {which}, k = 1 -> {k:g} ({when})"
                kit, cands = _shift(ev, k, which)
                if kit is None:
                    rows.append(_missing(key, f"{src} (derived)", what, pv,
                                         _NOT_RUN.format(f"04_ablate with k = 1 and {k:g} and two seeds")))
                    continue
                trends = ev.trends(f"claim4_{_SHORT[which]}_k{k:g}")
                rows.append(_row(key, f"{src} (derived)", what, pv, kit, kit, cands, trends=trends, noise=True))
    return rows


def table7_rows(ev: Evidence) -> list[Row]:
    """Table 7: perplexity at k = 1 and 5. The levels are another corpus and tokenizer's; their ratio is comparable,
    as our test-loss difference (the log of the perplexity ratio, nats)."""
    rows = [_missing(("TABLE7_PPL", str(k)), "Table 7", f"WikiText-2 perplexity, k = {k:g}", pv,
                     "a perplexity level depends on the corpus and the tokenizer (WikiText-2 with OLMo's 50k-token "
                     "vocabulary there, our corpus and vocabulary here): the row below compares the change")
            for k, pv in paper.TABLE7_PPL.items()]
    pv = math.log(paper.TABLE7_PPL[5.0] / paper.TABLE7_PPL[1.0])
    key, what = ("derived", "TABLE7_PPL", "log ratio"), "log perplexity ratio k = 5 vs k = 1 (test loss change, nats)"
    t = ev.table("ablation_perplexity")
    if t is None or not {1.0, 5.0} <= set(t.k):
        rows.append(_missing(key, "Table 7 (derived)", what, pv, _NOT_RUN.format("04_ablate with k = 1 and 5")))
        return rows
    by = t[t.tied].pivot_table(index="seed", columns="k", values="test_loss")
    kit = Estimate.of(by[5.0] - by[1.0], "test loss, tied_in5 minus tied, same seed")
    rows.append(_row(key, "Table 7 (derived)", what, pv, kit, kit, trends=ev.trends("loss_tied_in5_minus_tied"),
                     noise=True))
    return rows


def setting_rows(ev: Evidence) -> list[Row]:
    """The paper's settings (training length, warmup, lens budget) beside this run's: the scope of every comparison."""
    lens = int(ev.study.get("lens_steps", 0)) * max(ev.study.get("lens_budgets") or [1])
    ours = {"steps": ev.steps, "warmup_steps": ev.warmup, "olmo_script_steps": lens,
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


BUILDERS = (table1_rows, table5_rows, figure2_rows, figure3_rows, figure4_rows, claim4_rows, table7_rows, setting_rows)
"""Each source of the paper's numbers, in the paper's order; together they give a row for every number."""


def _re(status: str | None) -> str:
    return {"holds": "[Re]", "does not hold": "[¬Re]"}.get(str(status), str(status or "not run"))


def claim_lines(ev: Evidence) -> list[dict[str, str]]:
    """Per claim: [Re] or [¬Re] at our scale under the kit's protocol and under the paper's, and why."""
    c = ev.claims
    proxy = _per_seed_share(ev, "proxy l2", "warmup")
    proxy_low = stats.summarise(proxy[np.isfinite(proxy)]).ci_low if proxy is not None and len(proxy) > 1 else None
    shift = ev.table("claim4_ingredients")
    kit5 = None if shift is None else shift[(shift.ingredient == KIT) & (shift.k == 5.0)]
    lines = []
    for claim, kit_key, paper_status, why in (
            ("1. alignment", "claim1_alignment", c.get("claim1_alignment", {}).get("status"),
             "the paper's protocol is the kit's here (centred, in-sample Procrustes, two separately trained models)"),
            ("2. gradient imbalance", "claim2_gradient_flow",
             None if proxy_low is None else ("holds" if proxy_low > 0.5 else "does not hold"),
             f"paper's protocol: its proxy metric (l2) over the warmup, share above 0.5 with the {LEVEL:.0%} CI"),
            ("3. early layers pay", "claim3_tuned_lens", c.get("claim3_tuned_lens_reference", {}).get("status"),
             "paper's protocol: its code's lens reading (hidden state i through translator i - 1)"),
            ("4. causality", "claim4_causality",
             None if kit5 is None or not len(kit5) else
             ("holds" if kit5.vs_untied_input_ci_low.iloc[0] > 0 > kit5.vs_untied_output_ci_high.iloc[0]
              else "does not hold"),
             "paper's protocol: the k = 5 shift against another run's untied model, towards input and away from "
             f"output with the {LEVEL:.0%} CI clear of 0")):
        rec = c.get(kit_key, {})
        lines.append({"claim": claim, "kit": _re(rec.get("status")),
                      "paper_protocol": _re(paper_status) if paper_status else "not measured here",
                      "kit_statement": str(rec.get("statement", "not run")), "paper_protocol_is": why})
    return lines


@dataclass
class Reproduction:
    """The report's content: rows, per-claim lines, and why the run is not evidence (or None)."""

    rows: list[Row]
    claims: list[dict[str, str]]
    not_meaningful: str | None
    scale_source: str | None

    def causes(self) -> dict[str, int]:
        return {c: sum(r.cause == c for r in self.rows if not r.setting) for c in CAUSES}


def build(run: Run, scale: Run | None = None) -> Reproduction:
    """Every number of :mod:`tiebias.paper` beside this run's, each with its computed cause."""
    ev = Evidence.load(run, scale)
    rows = [r for b in BUILDERS for r in b(ev)]
    why = not_meaningful(run)
    lines = claim_lines(ev)
    if why:
        for r in rows:
            r.meaningful = False
            r.why = f"not meaningful ({why}); {r.why}"
        for line in lines:
            line["kit"] = line["paper_protocol"] = "not meaningful"
    return Reproduction(rows, lines, why, ev.scale_source)
