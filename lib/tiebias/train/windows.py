"""Claim 2 taken apart: the output path's mean share per training window (relative to the run's warmup) under each
way of measuring it (:data:`METRICS`: the kit's exact weight-gradient split, or the paper's proxy that takes the input
path on the lookup's output, with L2, squared L2 or L1 norms), and on one model's weights at several batch sizes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import torch
from transformers import PreTrainedModel

from tiebias import stats
from tiebias.stats import LEVEL
from tiebias.train.gradients import GradientProvenance
from tiebias.train.steploop import batch_for_step

METRICS = {
    "exact l2": ("input_norm", "output_norm", 1),
    "exact squared l2": ("input_norm", "output_norm", 2),
    "exact l1": ("input_l1", "output_l1", 1),
    "proxy l2": ("proxy_input_norm", "output_norm", 1),
    "proxy squared l2": ("proxy_input_norm", "output_norm", 2),
    "proxy l1": ("proxy_input_l1", "output_l1", 1),
}
"""Each metric: (input column, output column, power): share = out^p / (in^p + out^p) per step, then the mean."""
PAPER_METRIC = {"exact l2": "l2", "exact squared l2": "squared_l2", "exact l1": "l1",
                "proxy l2": "l2", "proxy squared l2": "squared_l2", "proxy l1": "l1"}
"""The paper's log's norm matching each metric (its input column is always the proxy)."""
WINDOWS = ("first 100 steps", "warmup", "first 1000 steps", "after warmup")


def window_bounds(steps: int, warmup: int) -> dict[str, tuple[int, int]]:
    """Each window's first and last step (1-based, inclusive); empty windows are left out."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: {steps!r} is not allowed; need an integer > 0")
    if not isinstance(warmup, int) or not 0 <= warmup < steps:
        raise ValueError(f"warmup: {warmup!r} is not allowed with steps={steps}; need an integer 0 <= warmup < steps")
    out = {"first 100 steps": (1, min(100, steps)), "warmup": (1, warmup), "first 1000 steps": (1, min(1000, steps)),
           "after warmup": (warmup + 1, steps)}
    return {k: v for k, v in out.items() if v[0] <= v[1]}


def step_shares(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per-step shares under every metric whose columns the log has (a log written before the proxy existed has
    only the exact L2 ones); a column of NaN for the others."""
    out = pd.DataFrame({"step": metrics.step})
    for name, (col_in, col_out, power) in METRICS.items():
        if col_in not in metrics or col_out not in metrics:
            out[name] = math.nan
            continue
        a, b = metrics[col_in].astype(float) ** power, metrics[col_out].astype(float) ** power
        out[name] = b / (a + b)
    return out


def window_shares(logs: Mapping[str, pd.DataFrame], steps: int, warmup: int, *, level: float = LEVEL) -> pd.DataFrame:
    """Per window and metric: each model's mean share over the window's steps (``share_<key>``) and a t-interval over
    the models (``mean``, ``ci_low``, ``ci_high``, ``n_seeds``).

    Args:
        logs: model key -> its training log.
        steps, warmup: the recipe's steps, which place the windows.
        level: the intervals' confidence level.

    Returns:
        One row per window and metric.
    """
    if not logs:
        raise ValueError("logs: no model's metrics given")
    bounds = window_bounds(steps, warmup)
    per_model = {key: step_shares(m) for key, m in logs.items()}
    rows = []
    for window, (lo, hi) in bounds.items():
        for metric in METRICS:
            vals = {key: float(s[(s.step >= lo) & (s.step <= hi)][metric].mean()) for key, s in per_model.items()}
            finite = [v for v in vals.values() if math.isfinite(v)]
            if finite:
                sm = stats.summarise(finite, level=level)
                mean, low, high = sm.mean, sm.ci_low, sm.ci_high
            else:
                mean = low = high = math.nan
            rows.append({"window": window, "first_step": lo, "last_step": hi, "metric": metric, "mean": mean,
                         "ci_low": low, "ci_high": high, "n_seeds": len(finite),
                         **{f"share_{key}": v for key, v in vals.items()}})
    return pd.DataFrame(rows)


def with_paper(table: pd.DataFrame, paper: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """The window table with a ``paper`` column from the paper's log (norm -> {window: share}; its "first 1000 steps"
    are its warmup).

    Args:
        table: the :func:`window_shares` table.
        paper: the paper's log, norm -> {window: share}.

    Returns:
        A copy with a ``paper`` column.
    """
    same = {"first 1000 steps": "warmup"}
    out = table.copy()
    out["paper"] = [paper[PAPER_METRIC[m]].get(same.get(w, w), math.nan) for w, m in zip(out.window, out.metric,
                                                                                        strict=True)]
    return out


def record_details(table: pd.DataFrame) -> dict[str, Any]:
    """The per-window shares for the claim-2 record: {metric: {window: mean}}, rounded, non-finite ones left out.

    Args:
        table: the :func:`window_shares` table.

    Returns:
        ``{metric: {window: mean}}``.
    """
    return {m: {r.window: round(float(r.mean), 4) for r in g.itertuples() if math.isfinite(r.mean)}
            for m, g in table.groupby("metric", sort=False)}


def shown(table: pd.DataFrame, steps: int) -> pd.DataFrame:
    """A window table for display: in a run under 1000 steps, ``first 1000 steps`` is labelled as the whole run.

    Args:
        table: a window table.
        steps: the run's training steps.

    Returns:
        The table to display.
    """
    if steps >= 1000:
        return table
    return table.assign(window=table.window.replace("first 1000 steps", f"whole run ({steps} steps; the paper's first 1000)"))


def halves(logs: Mapping[str, pd.DataFrame]) -> tuple[float, float]:
    """The exact output share (pooled over the models' logged steps) over the first and the second half of training."""
    flow = pd.concat(list(logs.values()))
    half = flow.step.max() // 2
    return float(flow[flow.step <= half].output_share.mean()), float(flow[flow.step > half].output_share.mean())


def shares_at_tokens(model: PreTrainedModel, ids: torch.Tensor, seq_len: int, batch_sizes: Sequence[int], *,
                     batches: int = 4, seed: int = 0) -> pd.DataFrame:
    """A tied model's output share under each metric on the same weights at several batch sizes (batch ``b`` drawn as
    step ``b`` of ``seed``): the proxy shrinks with the tokens one measurement sees, the exact split less."""
    if not batch_sizes or any(b < 1 for b in batch_sizes) or batches < 1:
        raise ValueError(f"batch_sizes: {list(batch_sizes)} and batches: {batches}; need one or more of each, each >= 1")
    rows = []
    for bs in batch_sizes:
        for b in range(batches):
            x = batch_for_step(ids, b, seed, bs, seq_len)
            model.zero_grad(set_to_none=True)
            with GradientProvenance(model) as gp:
                model(input_ids=x, labels=x).loss.backward()
                st = gp.pop()
            model.zero_grad(set_to_none=True)
            if st is None:
                raise ValueError("model: no gradient reached its embedding; is it a causal LM with a tied embedding?")
            shares = step_shares(pd.DataFrame([{"step": b, **st.as_dict()}])).iloc[0]
            rows.append({"batch_size": bs, "tokens": bs * seq_len, "batch": b, **{m: float(shares[m]) for m in METRICS}})
    return pd.DataFrame(rows)


