"""Why the paper's reading (hidden state 1 through translator 0) costs a tied model at row 1: its error over the
package's, e = (W0 - W1) h1 + (b0 - b1) = [(W0 - W1) h0 + (b0 - b1)] + [(W0 - W1)(h1 - h0)], taken apart."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from transformers import PreTrainedModel
from tuned_lens import TunedLens

from tiebias import stats
from tiebias.config.lens import LENS_BATCH_SIZE, LENS_SEQ_LEN, LensSettings
from tiebias.config.variants import Variant
from tiebias.lens.evaluate import kl_bits
from tiebias.lens.lenses import _check_lens, sequences
from tiebias.models.anatomy import check_model
from tiebias.stats import LEVEL

PARTS = ("neither (package reading)", "embedding part", "update part", "both (the paper's reading)")
"""The four readings of row 1: the package's translator 1 plus none, one or both parts of the error."""


def split_error(lens: TunedLens, h0: Tensor, h1: Tensor) -> dict[str, Tensor]:
    """The translated states of row 1 under each of :data:`PARTS`; ``both`` is the paper's reading up to rounding."""
    t0, t1 = lens.layer_translators[0], lens.layer_translators[1]
    d_w = t0.weight - t1.weight
    d_b = (t0.bias - t1.bias) if t0.bias is not None and t1.bias is not None else torch.zeros_like(h0[..., 0:1])
    base = h1 + t1(h1)
    embed = h0 @ d_w.T + d_b
    update = (h1 - h0) @ d_w.T
    return {PARTS[0]: base, PARTS[1]: base + embed, PARTS[2]: base + update, PARTS[3]: base + embed + update}


def row1_parts(model: PreTrainedModel, lens: TunedLens, tokens: Any, *, seq_len: int = LENS_SEQ_LEN,
               max_tokens: int = 8192, batch_size: int = LENS_BATCH_SIZE) -> pd.DataFrame:
    """KL (bits) at row 1 under each of :data:`PARTS`, then the geometry, as means over positions: ``measure``,
    ``value``, ``kind`` ("kl" or "geometry")."""
    check_model(model)
    _check_lens(model, lens)
    if model.config.num_hidden_layers < 2:
        raise ValueError(f"model: {model.config.num_hidden_layers} layer(s); row 1's two readings need 2 or more")
    seqs = sequences(tokens, seq_len, model.config.vocab_size, max_tokens, batch_size)
    sums: dict[str, float] = {}
    count = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(seqs), batch_size):
                out = model(input_ids=seqs[start:start + batch_size].to(model.device), output_hidden_states=True)
                h0, h1 = out.hidden_states[0], out.hidden_states[1]
                for name, state in split_error(lens, h0, h1).items():
                    sums[name] = sums.get(name, 0.0) + float(kl_bits(out.logits, lens.unembed(state)).sum())
                # the first block's update against the embedding, and each translator's |W h + b| / |h|
                upd, n0, n1 = h1 - h0, h0.norm(dim=-1), h1.norm(dim=-1)
                t0, t1 = lens.layer_translators[0], lens.layer_translators[1]
                for name, v in {"update / embedding norm": upd.norm(dim=-1) / n0,
                                "cosine(embedding, update)": torch.nn.functional.cosine_similarity(h0, upd, dim=-1),
                                "translator 0 departure on h0": t0(h0).norm(dim=-1) / n0,
                                "translator 0 departure on h1": t0(h1).norm(dim=-1) / n1,
                                "translator 1 departure on h1": t1(h1).norm(dim=-1) / n1}.items():
                    sums[name] = sums.get(name, 0.0) + float(v.sum())
                count += h0.shape[0] * h0.shape[1]
    finally:
        model.train(was_training)
    return pd.DataFrame([{"measure": k, "value": v / count, "kind": "kl" if k in PARTS else "geometry"}
                         for k, v in sums.items()])


PENALTIES = {"embedding part": PARTS[1], "update part": PARTS[2], "both": PARTS[3]}
"""Each penalty: KL of that reading minus the package reading's, at row 1 (bits)."""


def penalties(parts: pd.DataFrame) -> pd.DataFrame:
    """Per model (``variant``, ``seed`` columns of :func:`row1_parts` tables stacked): the penalty of each part alone,
    of both, and their interaction (both minus the two alone), in bits."""
    kl = parts[parts.kind == "kl"].pivot_table(index=["variant", "seed"], columns="measure", values="value")
    out = pd.DataFrame({name: kl[col] - kl[PARTS[0]] for name, col in PENALTIES.items()})
    out["interaction"] = out["both"] - out["embedding part"] - out["update part"]
    return out.reset_index()


def compare(parts: pd.DataFrame, a: str = "tied", b: str = "untied", *, level: float = LEVEL) -> pd.DataFrame:
    """Each measure and penalty for ``a`` and ``b`` and their paired difference over seeds with its t-interval.

    Args: parts: stacked :func:`run_row1_parts` tables; a, b: the variants, paired by seed; level: of the intervals.
    Returns: per measure (``penalty: <name>`` for the penalties): ``measure``, ``<a>``, ``<b>``, ``difference``,
        ``ci_low``, ``ci_high`` (NaN below two seeds), ``n_seeds``.
    """
    wide = parts.pivot_table(index=["variant", "seed"], columns="measure", values="value")
    pen = penalties(parts).set_index(["variant", "seed"])
    wide = wide.join(pen.add_prefix("penalty: "))
    rows = []
    for col in wide.columns:
        x, y = wide.loc[a, col], wide.loc[b, col]
        d = (x - y).dropna()
        s = stats.summarise(d.to_numpy(), level=level) if len(d) > 1 else None
        rows.append({"measure": col, a: float(x.mean()), b: float(y.mean()), "difference": float(d.mean()),
                     "ci_low": s.ci_low if s else math.nan, "ci_high": s.ci_high if s else math.nan, "n_seeds": len(d)})
    return pd.DataFrame(rows)


def k_trend(penalty_by_k: pd.DataFrame, *, level: float = LEVEL) -> dict[str, Any]:
    """The row-1 penalty against log2 k: the fitted slope per doubling and whether it falls, rises or shows no trend.

    Args: penalty_by_k: the :func:`penalty_by_k` table; level: of the slope's interval.
    Returns: ``slope``, ``ci_low``, ``ci_high``, ``word`` (``falls``, ``rises``, ``no trend``, ``too few points``), ``n``.
    """
    x = np.log2(penalty_by_k.k.to_numpy(dtype=float))
    y = penalty_by_k.penalty.to_numpy(dtype=float)
    if len(set(x)) < 2 or len(y) < 3:
        return {"slope": math.nan, "ci_low": math.nan, "ci_high": math.nan, "word": "too few points", "n": len(y)}
    s = stats.slope(x, y, level=level)
    word = "falls" if s.ci_high < 0 else "rises" if s.ci_low > 0 else "no trend"
    return {"slope": s.slope, "ci_low": s.ci_low, "ci_high": s.ci_high, "word": word, "n": s.n}


def run_row1_parts(run: Any, variants: list[str], seeds: list[int], lens: LensSettings, *,
                   progress: bool = True) -> pd.DataFrame:
    """:func:`row1_parts` of each finished model of a run, read with its verdict lens on the test split.

    Args: run: the run; variants, seeds: the models (unfinished ones skipped; none finished: ValueError);
        lens: the settings (:func:`tiebias.lens.ladder.ensure_lens`); progress: progress bars.
    Returns: the rows of every model stacked: ``measure``, ``value``, ``kind``, ``variant``, ``seed``.
    """
    from tiebias.lens.ladder import ensure_lens

    frames = []
    for v in variants:
        for s in seeds:
            if not run.is_complete(v, s):
                continue
            model, tuned = ensure_lens(run, v, s, lens, progress=progress)
            df = row1_parts(model, tuned, run.tokens("test"), seq_len=lens.seq_len, max_tokens=lens.eval_tokens)
            frames.append(df.assign(variant=str(v), seed=int(s)))
    if not frames:
        raise ValueError(f"variants {variants}, seeds {seeds}: no finished model to read; run 01_train first")
    return pd.concat(frames, ignore_index=True)


def penalty_by_k(run: Any, variants: Sequence[Variant], seeds: list[int], lens: LensSettings) -> pd.DataFrame:
    """The row-1 penalties of a sweep's tied models with an unscaled output path, beside their input factor ``k``.

    Args: run: the sweep's run; variants: its variants (two or more factors k needed); seeds: the seeds read;
        lens: as in :func:`run_row1_parts`.
    Returns: per model, by ``k`` then ``seed``: ``variant``, ``seed``, each of :data:`PENALTIES`, ``interaction``,
        ``k``, ``penalty`` (the paper's reading's).
    """
    tied = [v for v in variants if v.tied and v.output_factor == 1.0]
    if len({v.input_factor for v in tied}) < 2:
        raise ValueError(f"variants: {[v.name for v in variants]} hold fewer than two tied models with different "
                         "input factors k; the penalty against k needs two or more (ablate_factors, e.g. [1, 5])")
    pen = penalties(run_row1_parts(run, [v.name for v in tied], seeds, lens))
    pen["k"] = pen.variant.map({v.name: v.input_factor for v in tied})
    return pen.assign(penalty=pen["both"]).sort_values(["k", "seed"], ignore_index=True)


__all__ = ["PARTS", "PENALTIES", "compare", "k_trend", "penalties", "penalty_by_k", "row1_parts", "run_row1_parts",
           "split_error"]
