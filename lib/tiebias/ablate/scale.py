"""Claims 1, 2 and 4 against model size and training length (notebook 04, the ``scale`` and ``exposure`` profiles).

A scale point is a (vocabulary size, preset, training length); the run's own is the profile's, the others vary one
of the three and live in ``<run>/scale/<label>/``. At every point the sweep's models are trained and, per seed:
claim 1's gap (next seed's untied output vs input matrix onto the tied one, orthogonal map), claim 2's output share
(whole run, warmup, after), claim 4's shifts (k minus k = 1), the validation losses, the embedding's share of the
parameters, and tokens seen per embedding row (a larger vocabulary at the same steps sees each row less often).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tiebias import stats
from tiebias.ablate import sweep
from tiebias.config.presets import get_preset
from tiebias.config.variants import Variant
from tiebias.run.files import read_json
from tiebias.run.folder import Run
from tiebias.stats import LEVEL
from tiebias.train.depths import share_data
from tiebias.train.trainer import TrainConfig

PAPER_TOKENS_PER_ROW = 10_000 * 512 * 4096 / 50280
"""Tokens seen per embedding row by the paper's Table 2 models at step 10,000 (512 x 4,096-token batches, its
published training log, :data:`tiebias.paper.FIG4_LOG_WINDOWS`, over OLMo-1B's 50,280 rows)."""

PAPER_SCALE = {"vocab_size": 50280, "width": 2048, "tokens_per_row": PAPER_TOKENS_PER_ROW}
"""OLMo-1B's vocabulary, width and exposure at Table 2's step: where the fitted trends are extrapolated to."""

QUANTITIES = {
    "claim1_gap": "claim 1: untied output -> tied minus untied input -> tied (orthogonal cosine)",
    "claim2_share": "claim 2: output share of the tied matrix's gradient, whole run",
    "claim2_share_warmup": "claim 2: output share during warmup",
    "claim2_share_after_warmup": "claim 2: output share after warmup",
    "loss_tied_minus_untied": "validation loss, tied minus untied (nats)",
}
"""The per-seed quantities of a scale point besides claim 4's shifts and the losses."""


FIGURES = {
    "claim1": (f"Claim 1 against size: the tied matrix's gap (mean, {LEVEL:.0%} CI over seeds)", ["claim1_gap"]),
    "claim2": (f"Claim 2 against size: the output share (mean, {LEVEL:.0%} CI over seeds)",
               ["claim2_share", "claim2_share_warmup", "claim2_share_after_warmup"]),
    "claim4": (f"Claim 4 against size: the shift at the sweep's largest k (mean, {LEVEL:.0%} CI over seeds)", []),
    "loss": ("What tying costs against size: validation loss, tied minus untied (nats)", ["loss_tied_minus_untied"]),
}
"""The scale axis's figures: title and the quantities drawn (claim 4's are added at the sweep's largest k)."""


def quantities(k_top: float) -> dict[str, str]:
    """:data:`QUANTITIES` and claim 4's two shifts at the sweep's largest factor ``k_top``: every trend's label.

    Args:
        k_top: the sweep's largest gradient factor; it names claim 4's columns (``claim4_in_k<k>``,
            ``claim4_out_k<k>``).

    Returns:
        Column name of a per-seed quantity -> its label.
    """
    return {**QUANTITIES, f"claim4_in_k{k_top:g}": f"claim 4: shift towards the untied input matrix at k={k_top:g}",
            f"claim4_out_k{k_top:g}": f"claim 4: shift from the untied output matrix at k={k_top:g}"}


def figure_quantities(k_top: float) -> dict[str, dict[str, str]]:
    """Per figure of :data:`FIGURES`, the quantities it draws and their labels (claim 4's at ``k_top``).

    Args:
        k_top: as in :func:`quantities`.

    Returns:
        Figure name (``claim1``, ``claim2``, ``claim4``, ``loss``) -> {column name: label} of the quantities it draws.
    """
    q = quantities(k_top)
    extra = {"claim4": [f"claim4_in_k{k_top:g}", f"claim4_out_k{k_top:g}"]}
    return {name: {n: q[n] for n in qs + extra.get(name, [])} for name, (_, qs) in FIGURES.items()}


def tokens_per_row(steps: int, batch_size: int, seq_len: int, rows: int) -> float:
    """Training tokens per embedding row, ``steps * batch_size * seq_len / rows``: how often each row is seen."""
    for name, v in (("steps", steps), ("batch_size", batch_size), ("seq_len", seq_len), ("rows", rows)):
        if v <= 0:
            raise ValueError(f"{name}: {v} is not allowed; need a positive count")
    return steps * batch_size * seq_len / rows


@dataclass(frozen=True)
class ScalePoint:
    """One model size and training length: its vocabulary, preset and steps (None: the run's own ``steps``); ``base``
    is the run's own point (its models are the run's)."""

    vocab_size: int
    preset: str
    base: bool = False
    steps: int | None = None

    @property
    def label(self) -> str:
        """The point's folder name."""
        return f"v{self.vocab_size}-{self.preset}" + (f"-s{self.steps}" if self.steps is not None else "")

    @property
    def width(self) -> int:
        """The preset's hidden size."""
        return get_preset(self.preset).hidden


def points(vocab_size: int, preset: str, vocab_sizes: Sequence[int], presets: Sequence[str],
           step_counts: Sequence[int] = (), steps: int | None = None) -> list[ScalePoint]:
    """The run's point, then every other vocabulary at its preset, every other preset at its vocabulary and every other
    training length at both.

    Args:
        vocab_size, preset: the run's own vocabulary size and model preset (its point, ``base``).
        vocab_sizes: the other vocabularies (``scale_vocab_sizes``), each at the run's preset.
        presets: the other presets (``scale_presets``), each at the run's vocabulary; every preset is checked (an
            unknown one is refused before anything trains).
        step_counts: the other training lengths (``scale_steps``), each at the run's vocabulary and preset.
        steps: the run's own training length (``steps``); needed with ``step_counts`` (ValueError without it).

    Returns:
        The :class:`ScalePoint` list, the run's own first; values equal to the run's are not repeated.
    """
    get_preset(preset)
    for p in presets:
        get_preset(p)
    if step_counts and steps is None:
        raise ValueError(f"steps: needed with scale_steps {list(step_counts)} (the run's own training length)")
    for s in step_counts:
        if s < 1:
            raise ValueError(f"scale_steps: {s} is not allowed; need training lengths of one step or more")
    out = [ScalePoint(vocab_size, preset, base=True)]
    out += [ScalePoint(v, preset) for v in vocab_sizes if v != vocab_size]
    out += [ScalePoint(vocab_size, p) for p in presets if p != preset]
    out += [ScalePoint(vocab_size, preset, steps=s) for s in step_counts if s != steps]
    return out


def point_config(cfg: TrainConfig, point: ScalePoint) -> TrainConfig:
    """The run's recipe with the point's preset and steps; another length keeps the warmup and scales ``eval_every``
    and ``checkpoint_every`` with the length, so only the length changes."""
    out = replace(cfg, preset=point.preset)
    if point.steps is not None and point.steps != cfg.steps:
        ratio = point.steps / cfg.steps
        out = replace(out, steps=point.steps, eval_every=max(1, round(cfg.eval_every * ratio)),
                      checkpoint_every=max(1, round(cfg.checkpoint_every * ratio)))
    return out.validate()


def usable(pts: Sequence[ScalePoint], seeds: Sequence[int]) -> tuple[list[ScalePoint], str]:
    """The points to study, and a note when the axis is skipped: with one seed there is no other seed's untied model
    (claim 1's headline pairing and claim 4's reference), so only the run's own point is kept.

    Args:
        pts: the points of :func:`points` (the run's own first).
        seeds: the sweep's seeds (``ablate_seeds``).

    Returns:
        ``(points, note)``: all the points and ``""``, or with one seed and several points only the first and the
        reason.
    """
    if len(pts) > 1 and len(seeds) < 2:
        return list(pts[:1]), (f"scale axis skipped: it needs two or more ablate_seeds (each tied model is compared with "
                               f"another seed's untied model); this sweep has {list(seeds)}")
    return list(pts), ""


def point_run(run: Run, point: ScalePoint) -> Run:
    """The run itself for its own point, else ``<run>/scale/<label>/``: the run's data for another preset, a new
    tokenizer of the same corpus for another vocabulary."""
    if point.base:
        return run
    sub = Run(run.path / "scale" / point.label)
    if sub.config_path.exists():
        return sub
    if point.vocab_size != run.config["vocab_size"]:
        return Run.prepare(sub.path, corpus=run.config["corpus"], vocab_size=point.vocab_size)
    return share_data(run, sub.path, f"the {point.label} models")


def train_points(run: Run, pts: Sequence[ScalePoint], variants: Sequence[Variant], seeds: Sequence[int],
                 cfg: TrainConfig, *, progress: bool = True) -> dict[str, Run]:
    """Train (or reuse, or resume) the sweep's models at every scale point.

    Args:
        run: the run of the base point (others in ``<run>/scale/<label>/``); pts: the points (:func:`usable`).
        variants, seeds, cfg: the sweep's tied variants, seeds and recipe (preset and steps per point).
        progress: show progress bars.

    Returns:
        Point label -> its run folder.
    """
    out = {}
    for p in pts:
        sub = point_run(run, p)
        sweep.run_sweep(sub, variants, seeds, point_config(cfg, p), progress=progress)
        out[p.label] = sub
    return out


def _windows(metrics: pd.DataFrame, warmup: int) -> dict[str, float]:
    """The mean output share over the whole run, its warmup (steps 1..warmup) and after it."""
    m = metrics.dropna(subset=["output_share"])
    return {"claim2_share": float(m.output_share.mean()),
            "claim2_share_warmup": float(m[m.step <= warmup].output_share.mean()) if warmup else math.nan,
            "claim2_share_after_warmup": float(m[m.step > warmup].output_share.mean())}


def point_table(sub: Run, point: ScalePoint, variants: Sequence[Variant], seeds: Sequence[int],
                warmup: int) -> pd.DataFrame:
    """One row per seed at one scale point: claims 1, 2 and 4, losses and the embedding's share of the parameters.

    Args:
        sub, point: the point's run folder (models trained) and the point.
        variants: the tied variants, holding k = 1 (the reference); seeds: two or more (else ValueError), each tied
            model compared with the next seed's untied model; warmup: steps splitting claim 2's share (0: none).

    Returns:
        ``point``, ``vocab_size``, ``preset``, ``width``, ``steps``, ``tokens_per_row``, ``seed``, the
        :data:`QUANTITIES`, ``claim4_in_k<k>`` / ``claim4_out_k<k>``, ``val_loss_<variant>``,
        ``embedding_share_<variant>`` and ``loss_<variant>_minus_tied``.
    """
    if len(seeds) < 2:
        raise ValueError(f"ablate_seeds: {list(seeds)} has one seed; the scale axis compares the tied model with "
                         "another seed's untied model (claim 1's headline pairing), which needs two or more")
    tab = sweep.alignment_table(sub, variants, seeds, methods=("orthogonal",), reference="cross")
    rows = []
    for seed in seeds:
        t = tab[tab.seed == seed].set_index("k")
        base = t.loc[1.0]
        rc = read_json(sub.train_config_path(Variant(True), seed), "train the tied model of this scale point again")
        row: dict[str, Any] = {"point": point.label, "vocab_size": point.vocab_size, "preset": point.preset,
                               "width": point.width, "steps": int(rc["steps"]),
                               "tokens_per_row": tokens_per_row(int(rc["steps"]), int(rc["batch_size"]),
                                                                int(rc["seq_len"]), int(sub.config["tokenizer_size"])),
                               "seed": seed,
                               "claim1_gap": float(base.vs_untied_output - base.vs_untied_input),
                               **_windows(sub.metrics(Variant(True), seed), warmup)}
        for k in t.index:
            if k != 1.0:
                row[f"claim4_in_k{k:g}"] = float(t.loc[k].vs_untied_input - base.vs_untied_input)
                row[f"claim4_out_k{k:g}"] = float(t.loc[k].vs_untied_output - base.vs_untied_output)
        for v in [*variants, Variant(False)]:
            s = sub.summary(v, seed)
            row[f"val_loss_{v.name}"] = float(s["final_val_loss"])
            p = s["parameters"]
            row[f"embedding_share_{v.name}"] = p["embedding"] / p["total"]
        row["loss_tied_minus_untied"] = row["val_loss_tied"] - row["val_loss_untied"]
        for v in variants:
            if v.input_factor != 1.0:
                row[f"loss_{v.name}_minus_tied"] = row[f"val_loss_{v.name}"] - row["val_loss_tied"]
        rows.append(row)
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame, *, level: float = LEVEL) -> pd.DataFrame:
    """Mean and t-interval over seeds of every quantity at every point (one row per point and quantity).

    Args:
        table: rows of :func:`point_table` (several points concatenated).
        level: confidence level of the t-intervals.

    Returns:
        Columns ``point``, ``vocab_size``, ``preset``, ``width``, ``steps`` and ``tokens_per_row`` (where the table has
        them), ``quantity``, ``mean``, ``ci_low``, ``ci_high`` and ``n_seeds``; a quantity with no value at a point
        has no row.
    """
    ids = [c for c in ("point", "vocab_size", "preset", "width", "steps", "tokens_per_row") if c in table.columns]
    cols = [c for c in table.columns if c not in (*ids, "seed")]
    rows = []
    for key, g in table.groupby(ids, sort=False):
        for c in cols:
            vals = g[c].dropna()
            if vals.empty:
                continue
            s = stats.summarise(vals, level=level)
            rows.append({**dict(zip(ids, key, strict=True)), "quantity": c,
                         "mean": s.mean, "ci_low": s.ci_low, "ci_high": s.ci_high, "n_seeds": s.n})
    return pd.DataFrame(rows)


AXES = {"vocab_size": "vocabulary size", "width": "width", "tokens_per_row": "training length (tokens seen per row)"}
"""The axes a trend is fitted along: the model's size, and its training length alone."""


def axis_rows(table: pd.DataFrame, axis: str, base: ScalePoint) -> pd.DataFrame:
    """The rows of one axis: points that vary ``axis`` while the others stay at the run's point (training length at
    the run's own steps, where the table has a ``steps`` column)."""
    if axis not in AXES:
        raise ValueError(f"axis: unknown value {axis!r}; allowed: {', '.join(AXES)}")
    fixed = {"vocab_size": base.vocab_size, "width": base.width}
    if "steps" in table.columns:
        own = table.loc[table.point == base.label, "steps"]
        if not own.empty:
            fixed["steps"] = int(own.iloc[0])
    if axis == "tokens_per_row":
        fixed.pop("steps", None)
    else:
        fixed.pop(axis)
    keep = np.ones(len(table), dtype=bool)
    for c, v in fixed.items():
        keep &= (table[c] == v).to_numpy()
    return table[keep]


def measured_axes(table: pd.DataFrame) -> list[str]:
    """The axes :func:`trends` fits: vocabulary and width always (a single size says "too few points"), training
    length only where the table holds more than one ``steps``."""
    many = "steps" in table.columns and table["steps"].nunique() > 1
    return [a for a in AXES if a != "tokens_per_row" or many]


def trend(table: pd.DataFrame, quantity: str, axis: str, base: ScalePoint, *, level: float = LEVEL) -> dict[str, Any]:
    """A line fit of a per-seed quantity against log2 of the axis: slope with t-interval, value at :data:`PAPER_SCALE`
    with the mean's (``at_paper_low/high``) and a new run's (``pred_low/high``) intervals, and a ``word``."""
    rows = axis_rows(table, axis, base).dropna(subset=[quantity])
    sizes = sorted(rows[axis].unique())
    out: dict[str, Any] = {"quantity": quantity, "axis": axis, "sizes": [round(s) for s in sizes],
                           "n": int(len(rows))}
    if len(sizes) < 3:
        return {**out, "word": "too few points", "slope": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                "at_paper": math.nan, "at_paper_low": math.nan, "at_paper_high": math.nan, "pred_low": math.nan,
                "pred_high": math.nan}
    x = np.log2(rows[axis].to_numpy(float))
    y = rows[quantity].to_numpy(float)
    s = stats.slope(x, y, level=level)
    fit, low, high = stats.line_at(x, y, math.log2(PAPER_SCALE[axis]), level=level)
    _, pred_low, pred_high = stats.line_at(x, y, math.log2(PAPER_SCALE[axis]), level=level, prediction=True)
    word = "no trend" if s.ci_low <= 0 <= s.ci_high else ("rises" if s.slope > 0 else "falls")
    return {**out, "word": word, "slope": s.slope, "ci_low": s.ci_low, "ci_high": s.ci_high,
            "at_paper": fit, "at_paper_low": low, "at_paper_high": high, "pred_low": pred_low, "pred_high": pred_high,
            "mean": float(y.mean())}


def trends(table: pd.DataFrame, quantities: Sequence[str], base: ScalePoint, *, level: float = LEVEL) -> pd.DataFrame:
    """:func:`trend` for every quantity on every measured axis (:func:`measured_axes`).

    Args:
        table: per-seed rows of :func:`point_table` at several points.
        quantities: the columns to fit (e.g. the keys of :func:`quantities`).
        base: the run's own point, fixing the axis that does not vary.
        level: confidence level of the slope's and the prediction's intervals.

    Returns:
        One row per quantity and axis, the keys of :func:`trend` as columns: ``quantity``, ``axis``, ``sizes``, ``n``,
        ``word``, ``slope``, ``ci_low``, ``ci_high``, ``at_paper``, ``at_paper_low``, ``at_paper_high``, ``pred_low``, ``pred_high`` and ``mean``
        (missing where there were too few points).
    """
    return pd.DataFrame([trend(table, q, a, base, level=level) for q in quantities for a in measured_axes(table)])


def sentence(tr: dict[str, Any], what: str) -> str:
    """One plain sentence on one trend: does the quantity grow with size, and what the line predicts at the paper's.

    Args:
        tr: one trend (:func:`trend`, or a row of :func:`trends` as a dict).
        what: how the sentence names the quantity (e.g. its label from :func:`quantities`).

    Returns:
        The sentence: direction, slope per doubling with its interval (at :data:`tiebias.stats.LEVEL`), and the
        line's value at :data:`PAPER_SCALE` flagged as an extrapolation; or a note that too few sizes were measured.
    """
    axis = AXES[tr["axis"]]
    if tr["word"] == "too few points":
        return f"{what} against {axis}: {len(tr['sizes'])} size(s) only, no trend can be fitted."
    span = f"{tr['sizes'][0]} to {tr['sizes'][-1]}"
    head = {"rises": "rises", "falls": "falls", "no trend": "shows no trend"}[tr["word"]]
    size = ""
    if tr["word"] != "no trend" and math.isfinite(tr.get("mean", math.nan)) and tr["mean"] != 0:
        grows = (tr["word"] == "rises") == (tr["mean"] > 0)
        size = f" (its size {'grows' if grows else 'shrinks'})"
    bounded = ""
    if "share" in tr["quantity"] and not 0 <= tr["at_paper"] <= 1:
        bounded = " (outside [0, 1], where a share lies: the line cannot hold that far)"
    return (f"{what} {head} with {axis}{size} ({span}; slope {tr['slope']:+.4f} per doubling, {LEVEL:.0%} CI "
            f"[{tr['ci_low']:+.4f}, {tr['ci_high']:+.4f}]). The line predicts {tr['at_paper']:+.3f} "
            f"[{tr['at_paper_low']:+.3f}, {tr['at_paper_high']:+.3f}] at the paper's {axis} "
            f"({PAPER_SCALE[tr['axis']]:,.0f}){bounded}: an extrapolation far beyond the sizes measured, a direction rather "
            "than a forecast.")


__all__ = ["AXES", "FIGURES", "PAPER_SCALE", "PAPER_TOKENS_PER_ROW", "QUANTITIES", "ScalePoint", "axis_rows",
           "measured_axes", "point_config", "point_run", "point_table", "points", "sentence", "summary",
           "tokens_per_row", "train_points", "trend", "trends", "usable"]
