"""Notebook 02's tables: Table 1 with seeds and noise floors, drift over checkpoints, neighbours. A tied and an untied
model of one seed share their initial input matrix, so the cross-seed pairs are the headline."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from tiebias import stats
from tiebias.align import embeddings, maps, token_stats, tokenizers
from tiebias.align.embeddings import Embeddings
from tiebias.align.neighbours import check_knn_k, knn_overlap
from tiebias.models.anatomy import TyingError
from tiebias.run import inventory
from tiebias.run.folder import Run
from tiebias.train import divergence
from tiebias.train.checkpoints import require_initial

# (label, source model kind, source matrix, target model kind, target matrix)
COMPARISONS = [
    ("untied input -> untied output", "untied", "input", "untied", "output"),
    ("untied output -> tied", "untied", "output", "tied", "input"),
    ("untied input -> tied", "untied", "input", "tied", "input"),
]
NOISE_FLOOR = [
    ("tied -> tied (noise floor)", "tied", "input", "tied", "input"),
    ("untied input -> untied input (noise floor)", "untied", "input", "untied", "input"),
    ("untied output -> untied output (noise floor)", "untied", "output", "untied", "output"),
]


def load_models(run: Run, seeds: Sequence[int] | None = None, step: int | None = None) -> dict[int, dict[str, Embeddings]]:
    """A run's finished tied and untied models' embeddings per seed; diverged models are refused.

    Args:
        run: the run holding the models.
        seeds: the seeds (None: every seed, all finished).
        step: the checkpoint to read (None: the final models).

    Returns:
        Seed -> {"tied": Embeddings, "untied": Embeddings}, the shape :func:`table1` takes.
    """
    if seeds is None:
        seeds = inventory.require_complete(run, ("tied", "untied"))
    if not seeds:
        raise ValueError(f"run: {run.path} has no seed with both a complete 'tied' and 'untied' model; "
                         f"models present: {', '.join(run.models().key) or 'none'} (train them with 01_train)")
    run.tokenizer()  # a missing or damaged tokenizer/ is named with how to restore it
    out = {}
    for s in seeds:
        for v in ("tied", "untied"):
            if not run.is_complete(v, s):
                raise ValueError(f"seeds: seed {s} has no complete {v!r} model in {run.path}")
        divergence.check_models(run, [("tied", s), ("untied", s)], "an alignment")
        out[s] = {v: embeddings.from_run(run, v, s, step) for v in ("tied", "untied")}
    return out


def load_sources(tied_source: Any, untied_source: Any, *, tied_tokenizer: Any = None,
                 untied_tokenizer: Any = None) -> dict[int, dict[str, Embeddings]]:
    """One tied / untied pair from any two HF models (folders, hub ids or loaded models), only their embeddings read;
    folders and hub ids are checked from their configs first, so a swapped pair is refused early.

    Args:
        tied_source, untied_source: each side's folder, hub id or loaded model.
        tied_tokenizer, untied_tokenizer: each side's tokenizer (None: found beside the model).

    Returns:
        ``{0: {"tied": Embeddings, "untied": Embeddings}}``.
    """
    from transformers import PreTrainedModel

    from tiebias.models import sources

    named = {k: v for k, v in (("tied", tied_source), ("untied", untied_source)) if not isinstance(v, PreTrainedModel)}
    if named:
        sources.check_sources(named, need="embeddings")
    got = {}
    for label, source, tokenizer in (("tied", tied_source, tied_tokenizer),
                                     ("untied", untied_source, untied_tokenizer)):
        try:
            got[label] = embeddings.extract(source, tokenizer)
        except TyingError as exc:
            raise sources.not_as_configured(exc, f"{label}_source: {exc.where!r}") from None
    if not got["tied"].tied:
        raise ValueError(f"tied_source: {got['tied'].source!r} is an untied model; the tied side needs one shared "
                         "matrix")
    if got["untied"].tied:
        raise ValueError(f"untied_source: {got['untied'].source!r} is a tied model; the untied side needs its own input "
                         "and output matrices")
    return {0: got}


def table1(models: dict[int, dict[str, Embeddings]], methods: Sequence[str] = maps.METHODS, *,
           heldout_folds: int = 0, knn_k: int | None = 10, noise_floor: bool = True,
           keep_scores: bool = False) -> pd.DataFrame:
    """Table 1: the source mapped onto the target on their shared tokens, mean cosine per method (``identity`` NaN
    when the widths differ), held-out columns, ``knn@<k>`` (Table 5) and noise-floor rows.

    Args:
        models: seed -> tied and untied embeddings.
        methods: the maps scored.
        heldout_folds: 0, or k >= 2 for held-out columns.
        knn_k: the KNN@k column's k (None: none).
        noise_floor: add the noise-floor rows.
        keep_scores: add per-token scores.

    Returns:
        One row per comparison, pairing (``within model``, ``same seed``, ``cross seed``) and seeds.
    """
    check_knn_k(knn_k)
    methods = list(dict.fromkeys(methods))
    seeds = sorted(models)
    if not seeds:
        raise ValueError("models: empty; give at least one seed's {'tied': ..., 'untied': ...} (see load_models)")
    rows = []
    specs = [(c, False) for c in COMPARISONS] + ([(c, True) for c in NOISE_FLOOR] if noise_floor else [])
    for (label, ka, wa, kb, wb), same_kind in specs:
        if label.startswith("untied input -> untied output"):
            pairs = [(s, s, "within model") for s in seeds]
        else:  # two seeds of one kind once (noise floors), of two kinds both ways
            cross = (itertools.combinations if same_kind else itertools.permutations)(seeds, 2)
            pairs = ([] if same_kind else [(s, s, "same seed") for s in seeds]) + [(a, b, "cross seed") for a, b in cross]
        for sa, sb, pairing in pairs:
            a, b = models[sa][ka], models[sb][kb]
            ia, ib = tokenizers.match_tokens(a.tokens, b.tokens, a.source, b.source)
            check_knn_k(knn_k, int(ia.numel()))
            S, T = a.matrix(wa), b.matrix(wb)
            if a.tokens != b.tokens:
                S, T = S[ia], T[ib]
            run = [m for m in methods if not (m == "identity" and S.shape[1] != T.shape[1])]
            res = maps.align_all(S, T, run) if run else {}
            out = {"comparison": label, "pairing": pairing, "seed_source": sa, "seed_target": sb,
                   "n_tokens": int(ia.numel()), **{m: res[m].mean if m in res else math.nan for m in methods}}
            if knn_k is not None:
                out[f"knn@{knn_k}"] = knn_overlap(S, T, knn_k)[0]
            fitted = [m for m in methods if m != "identity"]
            if heldout_folds and fitted:
                ho = maps.align_all(S, T, fitted, heldout_folds=heldout_folds)
                out.update({f"{m} (held-out)": ho[m].mean for m in fitted})
            if keep_scores:
                out["per_token"] = {m: r.per_token for m, r in res.items()}
                out["token_ids"] = ia
            rows.append(out)
    return pd.DataFrame(rows)


def token_gap(df: pd.DataFrame, method: str = "orthogonal", *, pairing: str = "same seed", seed_target: int | None = None,
              n_boot: int = 2000, level: float = stats.LEVEL, seed: int = 0) -> stats.BootstrapCI:
    """Paired bootstrap over tokens of one tied model's gap (untied output -> tied) - (untied input -> tied), from
    ``table1(..., keep_scores=True)``."""
    d = df[df.pairing == pairing]
    if seed_target is None:
        seed_target = int(d.seed_target.min())
    rows = {}
    for comp in ("untied output -> tied", "untied input -> tied"):
        r = d[(d.comparison == comp) & (d.seed_target == seed_target)]
        if "per_token" not in r:
            raise ValueError("df: one pair needs per-token scores for the token bootstrap; build the table with "
                             "table1(..., keep_scores=True)")
        rows[comp] = r.iloc[0]
    a, b = rows["untied output -> tied"], rows["untied input -> tied"]
    ids_a, ids_b = a.token_ids.cpu().numpy(), b.token_ids.cpu().numpy()
    _, ia, ib = np.intersect1d(ids_a, ids_b, assume_unique=True, return_indices=True)
    diff = a.per_token[method].double().cpu().numpy()[ia] - b.per_token[method].double().cpu().numpy()[ib]
    return stats.bootstrap_mean(diff, n_boot=n_boot, level=level, seed=seed)


def evolution_table(run: Run, seeds: Sequence[int]) -> pd.DataFrame:
    """Figure 3 analog: drift of the untied input and output (and tied) matrices through the checkpoints, per seed,
    from the step-0 checkpoint every model must still have.

    Args:
        run: the run holding the models.
        seeds: the seeds read.

    Returns:
        Columns ``matrix``, ``seed`` and :func:`tiebias.align.token_stats.evolution`'s, per checkpoint.
    """
    for s in seeds:
        for variant in ("tied", "untied"):
            require_initial(run.checkpoints_dir(variant, s))
            run.check_model_origin(variant, s)
    frames = []
    for s in seeds:
        for variant, which in (("untied", "input"), ("untied", "output"), ("tied", "input")):
            mats = embeddings.checkpoint_matrices(run.model_dir(variant, s), which)
            ev = token_stats.evolution(mats)
            ev.insert(0, "matrix", f"{variant} {which}" if variant == "untied" else "tied")
            ev.insert(1, "seed", s)
            frames.append(ev)
    return pd.concat(frames, ignore_index=True)


def neighbour_table(emb: Embeddings, which: str, token_id: int, k: int = 10) -> pd.DataFrame:
    """The k nearest tokens (cosine, self excluded) of one token in one matrix, as a token/cosine table."""
    m = emb.matrix(which)
    if not 0 <= token_id < m.shape[0]:
        raise ValueError(f"token_id: {token_id} is outside the vocabulary (0..{m.shape[0] - 1})")
    k = check_knn_k(k, m.shape[0], "k")
    x = torch.nn.functional.normalize(m.double(), dim=1)
    sims = x @ x[token_id]
    sims[token_id] = -math.inf
    top = sims.topk(k)
    return pd.DataFrame({"token": [emb.tokens[i] for i in top.indices.tolist()],
                         "cosine": top.values.numpy().round(3)})
