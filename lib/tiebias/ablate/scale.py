"""Claims 1, 2 and 4 against model size and training length (04, the ``scale`` and ``exposure`` profiles): each
point varies the vocabulary, preset or steps of the run's own and lives in ``<run>/scale/<label>/``."""

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
from tiebias.train.sweeps import share_data
from tiebias.train.trainer import TrainConfig

PAPER_TOKENS_PER_ROW = 10_000 * 512 * 4096 / 50280
"""Tokens per embedding row of the paper's Table 2 models at step 10,000 (512 x 4,096 tokens per step, 50,280 rows)."""
PAPER_SCALE = {"vocab_size": 50280, "width": 2048, "tokens_per_row": PAPER_TOKENS_PER_ROW}
"""OLMo-1B at Table 2's step: where the fitted trends are extrapolated to."""
AXES = {"vocab_size": "vocabulary size", "width": "width", "tokens_per_row": "training length (tokens seen per row)"}
QUANTITIES = {
    "claim1_gap": "claim 1: untied output -> tied minus untied input -> tied (orthogonal cosine)",
    "claim2_share": "claim 2: output share of the tied matrix's gradient, whole run",
    "claim2_share_warmup": "claim 2: output share during warmup",
    "claim2_share_after_warmup": "claim 2: output share after warmup",
    "loss_tied_minus_untied": "validation loss, tied minus untied (nats)",
}


def quantities(k_top: float) -> dict[str, str]:
    """Every trend's label: :data:`QUANTITIES` and claim 4's two shifts at the sweep's largest factor.

    Args:
        k_top: the sweep's largest gradient factor.

    Returns:
        Column name of a per-seed quantity -> its label.
    """
    return {**QUANTITIES, f"claim4_in_k{k_top:g}": f"claim 4: shift towards the untied input matrix at k={k_top:g}",
            f"claim4_out_k{k_top:g}": f"claim 4: shift from the untied output matrix at k={k_top:g}"}


def tokens_per_row(steps: int, batch_size: int, seq_len: int, rows: int) -> float:
    """Training tokens per embedding row: how often each row is seen."""
    for name, v in (("steps", steps), ("batch_size", batch_size), ("seq_len", seq_len), ("rows", rows)):
        if v <= 0:
            raise ValueError(f"{name}: {v} is not allowed; need a positive count")
    return steps * batch_size * seq_len / rows


@dataclass(frozen=True)
class ScalePoint:
    """One model size and training length (``steps`` None: the run's own); ``base``: the run's own point."""

    vocab_size: int
    preset: str
    base: bool = False
    steps: int | None = None

    @property
    def label(self) -> str:
        return f"v{self.vocab_size}-{self.preset}" + (f"-s{self.steps}" if self.steps is not None else "")

    @property
    def width(self) -> int:
        return get_preset(self.preset).hidden


def points(vocab_size: int, preset: str, vocab_sizes: Sequence[int], presets: Sequence[str],
           step_counts: Sequence[int] = (), steps: int | None = None) -> list[ScalePoint]:
    """The run's point, then every other vocabulary, preset and training length, each with the others at the run's.

    Args:
        vocab_size, preset: the run's own.
        vocab_sizes, presets, step_counts: ``scale_vocab_sizes``, ``scale_presets``, ``scale_steps``.
        steps: the run's own training length; needed with ``step_counts``.

    Returns:
        The points, the run's own first; values equal to the run's are not repeated.
    """
    for p in (preset, *presets):
        get_preset(p)
    if step_counts and steps is None:
        raise ValueError(f"steps: needed with scale_steps {list(step_counts)} (the run's own training length)")
    return [ScalePoint(vocab_size, preset, base=True), *(ScalePoint(v, preset) for v in vocab_sizes if v != vocab_size),
            *(ScalePoint(vocab_size, p) for p in presets if p != preset),
            *(ScalePoint(vocab_size, preset, steps=s) for s in step_counts if s != steps)]


def point_config(cfg: TrainConfig, point: ScalePoint) -> TrainConfig:
    """The run's recipe at the point: another length keeps the warmup and scales the eval and checkpoint spacing."""
    out = replace(cfg, preset=point.preset)
    if point.steps is not None and point.steps != cfg.steps:
        ratio = point.steps / cfg.steps
        out = replace(out, steps=point.steps, eval_every=max(1, round(cfg.eval_every * ratio)),
                      checkpoint_every=max(1, round(cfg.checkpoint_every * ratio)))
    return out.validate()


def usable(pts: Sequence[ScalePoint], seeds: Sequence[int]) -> tuple[list[ScalePoint], str]:
    """The points to study and a note: with one seed (no other seed's untied model) only the run's own.

    Args:
        pts, seeds: the points of :func:`points` and the sweep's seeds.

    Returns:
        ``(points, "")``, or ``([run's own point], reason)``.
    """
    if len(pts) > 1 and len(seeds) < 2:
        return list(pts[:1]), (f"scale axis skipped: it needs two or more ablate_seeds (each tied model is compared with "
                               f"another seed's untied model); this sweep has {list(seeds)}")
    return list(pts), ""


def train_points(run: Run, pts: Sequence[ScalePoint], variants: Sequence[Variant], seeds: Sequence[int],
                 cfg: TrainConfig, *, progress: bool = True) -> dict[str, Run]:
    """Train (or reuse) the sweep's models at every point, in ``<run>/scale/<label>/`` with the run's data (another
    vocabulary: a new tokenizer of the same corpus).

    Args:
        run, pts: the run and the points (:func:`usable`).
        variants, seeds, cfg, progress: the sweep's tied variants, seeds, recipe; progress bars.

    Returns:
        Point label -> its run folder.
    """
    out = {}
    for p in pts:
        sub = run if p.base else Run(run.path / "scale" / p.label)
        if not (p.base or sub.config_path.exists()):
            sub = (Run.prepare(sub.path, corpus=run.config["corpus"], vocab_size=p.vocab_size)
                   if p.vocab_size != run.config["vocab_size"] else share_data(run, sub.path, f"the {p.label} models"))
        sweep.run_sweep(sub, variants, seeds, point_config(cfg, p), progress=progress)
        out[p.label] = sub
    return out


def point_table(sub: Run, point: ScalePoint, variants: Sequence[Variant], seeds: Sequence[int],
                warmup: int) -> pd.DataFrame:
    """One row per seed at one scale point: claims 1, 2 and 4, losses and the embedding's share of the parameters.

    Args:
        sub, point: the point's run folder and the point.
        variants, seeds: the tied variants (with k = 1) and two or more seeds.
        warmup: steps splitting claim 2's share (0: none).

    Returns:
        The point's columns, ``seed``, the :data:`QUANTITIES`, ``claim4_in_k<k>`` / ``claim4_out_k<k>``,
        ``val_loss_<variant>``, ``embedding_share_<variant>``, ``loss_<variant>_minus_tied``.
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
        m = sub.metrics(Variant(True), seed).dropna(subset=["output_share"])
        row: dict[str, Any] = {"point": point.label, "vocab_size": point.vocab_size, "preset": point.preset,
                               "width": point.width, "steps": int(rc["steps"]),
                               "tokens_per_row": tokens_per_row(int(rc["steps"]), int(rc["batch_size"]),
                                                                int(rc["seq_len"]), int(sub.config["tokenizer_size"])),
                               "seed": seed,
                               "claim1_gap": float(base.vs_untied_output - base.vs_untied_input),
                               "claim2_share": float(m.output_share.mean()),
                               "claim2_share_warmup": float(m[m.step <= warmup].output_share.mean()) if warmup else math.nan,
                               "claim2_share_after_warmup": float(m[m.step > warmup].output_share.mean())}
        for k in t.index:
            if k != 1.0:
                row[f"claim4_in_k{k:g}"] = float(t.loc[k].vs_untied_input - base.vs_untied_input)
                row[f"claim4_out_k{k:g}"] = float(t.loc[k].vs_untied_output - base.vs_untied_output)
        for v in [*variants, Variant(False)]:
            s = sub.summary(v, seed)
            row[f"val_loss_{v.name}"] = float(s["final_val_loss"])
            row[f"embedding_share_{v.name}"] = s["parameters"]["embedding"] / s["parameters"]["total"]
        row["loss_tied_minus_untied"] = row["val_loss_tied"] - row["val_loss_untied"]
        for v in variants:
            if v.input_factor != 1.0:
                row[f"loss_{v.name}_minus_tied"] = row[f"val_loss_{v.name}"] - row["val_loss_tied"]
        rows.append(row)
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame, *, level: float = LEVEL) -> pd.DataFrame:
    """Mean and t-interval over seeds of every quantity at every point.

    Args:
        table, level: rows of :func:`point_table`; the intervals' level.

    Returns:
        The point's columns, ``quantity``, ``mean``, ``ci_low``, ``ci_high``, ``n_seeds``.
    """
    ids = [c for c in ("point", "vocab_size", "preset", "width", "steps", "tokens_per_row") if c in table.columns]
    cols = [c for c in table.columns if c not in (*ids, "seed")]
    rows = []
    for key, g in table.groupby(ids, sort=False):
        for c in cols:
            vals = g[c].dropna()
            if not vals.empty:
                s = stats.summarise(vals, level=level)
                rows.append({**dict(zip(ids, key, strict=True)), "quantity": c,
                             "mean": s.mean, "ci_low": s.ci_low, "ci_high": s.ci_high, "n_seeds": s.n})
    return pd.DataFrame(rows)


def axis_rows(table: pd.DataFrame, axis: str, base: ScalePoint) -> pd.DataFrame:
    """The rows of points that vary ``axis`` while the others stay at the run's point."""
    if axis not in AXES:
        raise ValueError(f"axis: unknown value {axis!r}; allowed: {', '.join(AXES)}")
    fixed = {"vocab_size": base.vocab_size, "width": base.width}
    own = table.loc[table.point == base.label, "steps"] if "steps" in table.columns else ()
    if len(own):
        fixed["steps"] = int(own.iloc[0])
    fixed.pop("steps" if axis == "tokens_per_row" else axis, None)
    keep = np.ones(len(table), dtype=bool)
    for c, v in fixed.items():
        keep &= (table[c] == v).to_numpy()
    return table[keep]


def measured_axes(table: pd.DataFrame) -> list[str]:
    """Vocabulary and width always (one size says "too few points"), training length where there are several."""
    many = "steps" in table.columns and table["steps"].nunique() > 1
    return [a for a in AXES if a != "tokens_per_row" or many]


def trend(table: pd.DataFrame, quantity: str, axis: str, base: ScalePoint, *, level: float = LEVEL) -> dict[str, Any]:
    """A line fit of a quantity against log2 of the axis: slope, value at :data:`PAPER_SCALE` with the mean's and a
    new run's (``pred_``) intervals, and a ``word``."""
    rows = axis_rows(table, axis, base).dropna(subset=[quantity])
    sizes = sorted(rows[axis].unique())
    out: dict[str, Any] = {"quantity": quantity, "axis": axis, "sizes": [round(s) for s in sizes],
                           "n": int(len(rows))}
    if len(sizes) < 3:
        return {**out, "word": "too few points", **dict.fromkeys(("slope", "ci_low", "ci_high", "at_paper",
                                                                  "at_paper_low", "at_paper_high", "pred_low",
                                                                  "pred_high"), math.nan)}
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
    """:func:`trend` for every quantity on every measured axis.

    Args:
        table, quantities, base, level: rows of :func:`point_table`, the columns fitted, the run's point, the level.

    Returns:
        One row per quantity and axis, the keys of :func:`trend` as columns.
    """
    return pd.DataFrame([trend(table, q, a, base, level=level) for q in quantities for a in measured_axes(table)])
