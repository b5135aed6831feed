"""Figure 2's absolute level against the bigram baseline: a layer-0 lens reads only the current token, so at best it is
a bigram predictor of the model's output, with KL about (CE(bigram) - CE(model)) / ln 2 were the output the truth."""

from __future__ import annotations

import math

import pandas as pd

from tiebias.config.lens import lens_seq_len
from tiebias.data import bigram
from tiebias.data.tokens import unigram_loss
from tiebias.lens import tables
from tiebias.run.folder import Run

TABLE = "lens_bigram_bound"  # metrics/<TABLE>.csv
COLUMNS = ["variant", "seed", "kl_layer0_bits", "bigram_gain_bits", "ce_model_nats", "ce_bigram_nats",
           "ce_unigram_nats", "ce_lens0_nats", "alpha", "seq_len", "n_tokens"]


def windows(run: Run) -> tuple[int, int]:
    """(lens sequence length, evaluation tokens) of the run's lens evaluation, from its study record."""
    study = run.config.get("study")
    if not isinstance(study, dict) or "seq_len" not in study or "lens_eval_tokens" not in study:
        raise ValueError(f"run: {run.path} records no study with seq_len and lens_eval_tokens in config.json; run "
                         "01_train and 03_lens on it first")
    return lens_seq_len(int(study["seq_len"])), int(study["lens_eval_tokens"])


def bound_table(run: Run, kl: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per model: its layer-0 tuned-lens KL beside how far its test loss is below the bigram baseline's.

    Args: run: the run (the training split fits the bigram, the test split is scored); kl: the per-layer lens table
        (None: the run's ``lens_per_layer``); package reading, first recipe, largest budget, each model's last step.
    Returns: :data:`COLUMNS`: cross-entropies in nats per predicted token on the lens's test windows, the gain
        (CE(bigram) - CE(model)) / ln 2 in bits, the bigram's ``alpha``, the window length and the tokens scored.
    """
    if kl is None:
        path = run.table_path("lens_per_layer")
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing; run 03_lens on {run.path} first")
        kl = pd.read_csv(path)
    kl = tables.at_budget(tables.at_protocol(kl, "package"))
    seq_len, eval_tokens = windows(run)
    test = run.tokens("test")
    model = bigram.fit(run.tokens("train"), len(run.frequencies()))
    ce_bigram = model.loss(test, seq_len, eval_tokens)
    _, targets = bigram.pairs(bigram.as_ids(test, model.vocab_size, "test"), seq_len, eval_tokens)
    ce_unigram = unigram_loss(run.frequencies(), targets)
    rows = []
    for (variant, seed), g in kl.groupby(["variant", "seed"], sort=True):
        g = g[g.step == g.step.max()]
        first = g[g.layer == 0].iloc[0]
        n_tokens = int(first.n_tokens) if "n_tokens" in g else (eval_tokens // seq_len) * seq_len
        if n_tokens != targets.size // (seq_len - 1) * seq_len:
            raise ValueError(f"kl: the lens table of {variant}-s{seed} scored {n_tokens} tokens, the study's windows "
                             f"({eval_tokens} tokens in windows of {seq_len}) give {targets.size // (seq_len - 1) * seq_len}: "
                             "the table is not from this run's current lens settings; rerun 03_lens")
        ce_model = float(first.ce_model_nats)
        rows.append({"variant": variant, "seed": int(seed), "kl_layer0_bits": float(first.kl_tuned_bits),
                     "bigram_gain_bits": (ce_bigram - ce_model) / math.log(2), "ce_model_nats": ce_model,
                     "ce_bigram_nats": ce_bigram, "ce_unigram_nats": ce_unigram,
                     "ce_lens0_nats": float(first.ce_tuned_nats), "alpha": model.alpha, "seq_len": seq_len,
                     "n_tokens": n_tokens})
    return pd.DataFrame(rows, columns=COLUMNS)
