"""Claim 2 taken apart: the output path's share per training window and per way of measuring the input path.

The paper's "output gradients dominate early in training" rests on one number (about 70% over its first 1,000 steps,
which were its warmup) measured with a proxy: the norm of the gradient on the embedding module's *output* (one vector
per token position) against the output projection's weight gradient. The kit measures the exact split of the weight
gradient. :func:`window_shares` gives the mean share over the same windows, relative to the run's own warmup, under:

- ``exact l2`` (the kit's): ``|g_out| / (|g_in| + |g_out|)`` on the weight gradient;
- ``exact squared l2``: ``|g_out|^2 / (|g_in|^2 + |g_out|^2)``; ``exact l1``: the same with L1 norms;
- ``proxy l2`` (the paper's): the input path's norm taken on the embedding output's gradient instead;
- ``proxy squared l2`` and ``proxy l1``.

The proxy also depends on how many tokens one measurement sees: the loss is a mean over N positions, and the norm of
N per-position gradients that do not add up shrinks about like N^-1/2, while the output path's weight gradient (and
the exact input path, where a row's positions do add up) shrinks less. :func:`shares_at_tokens` measures one model's
weights at several batch sizes, so only the measurement changes.
"""

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
    """Each window's first and last step (1-based, inclusive) in a run of ``steps`` with ``warmup`` warmup steps.

    ``first 1000 steps`` is the whole run when it is shorter; ``warmup`` is empty (left out) without warmup, and
    ``after warmup`` when the warmup is the whole run.
    """
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
    """Mean share per window and metric over the models' logs (one per seed), with a t-interval over them.

    Args:
        logs: model key -> its training log (``step`` and the :data:`METRICS` columns it has); at least one.
        steps, warmup: the recipe's training and warmup steps, which place the windows (:func:`window_bounds`).
        level: confidence level of the t-intervals.

    Returns:
        One row per window and metric: ``window``, ``first_step``, ``last_step``, ``metric``, ``mean``, ``ci_low``,
        ``ci_high``, ``n_seeds`` (models with a finite share) and ``share_<key>`` per model.

    Each model's share is the mean over the window's steps (as the paper averages its log); the interval is over
    models.
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
    """The window table with the paper's log's value beside each row (its "first 1000 steps" are its warmup).

    Args:
        table: the :func:`window_shares` table.
        paper: the paper's log: norm (``l2``, ``squared_l2``, ``l1``, see :data:`PAPER_METRIC`) -> {window: share}.

    Returns:
        A copy of ``table`` with a ``paper`` column (NaN where the log has no such window).
    """
    same = {"first 1000 steps": "warmup"}
    out = table.copy()
    out["paper"] = [paper[PAPER_METRIC[m]].get(same.get(w, w), math.nan) for w, m in zip(out.window, out.metric,
                                                                                        strict=True)]
    return out


def record_details(table: pd.DataFrame) -> dict[str, Any]:
    """The per-window shares for the claim-2 record: {metric: {window: mean}}.

    Args:
        table: the :func:`window_shares` table.

    Returns:
        ``{metric: {window: mean}}``, means rounded to four decimals, non-finite ones left out.
    """
    return {m: {r.window: round(float(r.mean), 4) for r in g.itertuples() if math.isfinite(r.mean)}
            for m, g in table.groupby("metric", sort=False)}


def shown(table: pd.DataFrame, steps: int) -> pd.DataFrame:
    """A window table for display: in a run shorter than 1000 steps the ``first 1000 steps`` window is the whole run,
    and is labelled so (the stored table and the record keep the key the paper's window is matched by).

    Args:
        table: a :func:`window_shares` or :func:`with_paper` table.
        steps: the run's training steps.

    Returns:
        A copy whose ``window`` column reads "whole run (N steps; the paper's first 1000)" there.
    """
    if steps >= 1000:
        return table
    return table.assign(window=table.window.replace("first 1000 steps", f"whole run ({steps} steps; the paper's first 1000)"))


def halves(logs: Mapping[str, pd.DataFrame]) -> tuple[float, float]:
    """The exact output share (mean over the logged steps of every model, pooled) over the first and the second half
    of training: the lesson's "is the share constant?".

    Args:
        logs: model key -> its training log (``step``, ``output_share``).

    Returns:
        (first half, second half); a step belongs to the first half when it is at most half the last step.
    """
    flow = pd.concat(list(logs.values()))
    half = flow.step.max() // 2
    return float(flow[flow.step <= half].output_share.mean()), float(flow[flow.step > half].output_share.mean())


def shares_at_tokens(model: PreTrainedModel, ids: torch.Tensor, seq_len: int, batch_sizes: Sequence[int], *,
                     batches: int = 4, seed: int = 0) -> pd.DataFrame:
    """A tied model's output share, exact and under the paper's proxy, on the same weights at several batch sizes.

    Args:
        model: a tied causal LM (its weights are not changed; its gradients are left zeroed).
        ids: a token stream to draw windows from (:func:`tiebias.train.steploop.batch_for_step`).
        seq_len: tokens per sequence.
        batch_sizes: sequences per measurement, each one or more.
        batches: measurements per batch size (batch ``b`` is drawn as step ``b`` of ``seed``).
        seed: the draw's seed.

    Returns:
        One row per batch size and measurement: ``batch_size``, ``tokens``, ``batch`` and the share under each
        :data:`METRICS` (one backward pass of the mean loss, as a training step's).
    """
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


__all__ = ["METRICS", "PAPER_METRIC", "WINDOWS", "halves", "record_details", "shares_at_tokens", "shown", "step_shares",
           "window_bounds", "window_shares", "with_paper"]

