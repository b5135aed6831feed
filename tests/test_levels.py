"""The computed inputs for the paper's unexplained levels: Figure 2's layer-0 KL beside the bigram baseline, Table 5's
KNN@10 by frequency bin beside chance and the ceiling, and the cosine levels at every checkpoint; on synthetic
matrices and on the shared smoke study (read only)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from tiebias.align import checkpoint_levels, knn_bins
from tiebias.align.embeddings import Embeddings
from tiebias.data import bigram
from tiebias.lens import bigram_bound
from tiebias.run.folder import Run

SAME_SUM = 1e-9
"""The same per-token numbers averaged in another order (by bin, weighted, against all at once): only rounding apart."""


def _emb(m: torch.Tensor, out: torch.Tensor | None = None) -> Embeddings:
    return Embeddings(m, m if out is None else out, out is None, [str(i) for i in range(m.shape[0])], "synthetic")


def test_knn_bins_of_identical_matrices_are_the_ceiling_and_chance_is_k_over_v_minus_1() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(60, 8, generator=g)
    models = {s: {"tied": _emb(w), "untied": _emb(w, w.clone())} for s in (0, 1)}  # every matrix the same
    counts = np.arange(60)  # token 0 never seen
    t = knn_bins.knn_by_frequency(models, counts, k=5, bins=3)
    assert set(t.bin) == {"unseen", "q1", "q2", "q3"}
    assert (t.overlap == 1.0).all() and (t.ceiling == 1.0).all()
    assert t.chance.iloc[0] == pytest.approx(5 / 59) and t.over_chance.iloc[0] == pytest.approx(59 / 5)
    assert knn_bins.cell(t, "untied input -> tied")["n_tokens"] == 60


def test_knn_bins_of_unrelated_matrices_sit_near_chance_and_keep_the_rare_bin_apart() -> None:
    g = torch.Generator().manual_seed(1)
    tied = {s: torch.randn(400, 16, generator=g) for s in (0, 1)}
    models = {s: {"tied": _emb(tied[s]), "untied": _emb(torch.randn(400, 16, generator=g),
                                                        torch.randn(400, 16, generator=g))} for s in (0, 1)}
    t = knn_bins.knn_by_frequency(models, np.arange(1, 401), k=10, bins=4)
    # 400 tokens x 2 pairs: the mean overlap of unrelated lists lies within a few of its standard errors of chance
    row = knn_bins.cell(t, "untied output -> tied")
    assert abs(row["overlap"] - row["chance"]) < 0.02
    assert list(t[t.comparison == knn_bins.CEILING].pairing) == ["cross seed"] * 4
    with pytest.raises(ValueError, match="^comparison / bin_label: no row for 'x'"):
        knn_bins.cell(t, "x")
    with pytest.raises(ValueError, match="^models / counts: every matrix needs one row per token id"):
        knn_bins.knn_by_frequency(models, np.arange(10))


def test_paper_levels_hold_each_table_at_its_step() -> None:
    p = checkpoint_levels.paper_levels()
    assert (p.who == "paper").all() and np.isfinite(p["mean"]).all()
    t6 = p[(p.source == "Table 6") & (p.quantity == "untied output -> tied")]
    assert t6.step.tolist() == [1000]
    assert p[p.source == "Table 1"].step.isna().all()
    assert set(p[p.source == "Figure 3"].step) == {20000}


def _finite(df: pd.DataFrame, cols: list[str]) -> None:
    bad = df[cols][~np.isfinite(df[cols].to_numpy(dtype=float))]
    assert bad.empty, bad


def test_bigram_bound_on_the_smoke_run(smoke_study) -> None:
    run = Run(smoke_study.path)
    table = bigram_bound.bound_table(run)
    kl = pd.read_csv(run.table_path("lens_per_layer"))
    assert len(table) == kl[["variant", "seed"]].drop_duplicates().shape[0] > 0
    _finite(table, ["kl_layer0_bits", "bigram_gain_bits", "ce_model_nats", "ce_bigram_nats", "ce_unigram_nats",
                    "ce_lens0_nats", "alpha"])
    seq_len, eval_tokens = bigram_bound.windows(run)
    model = bigram.for_run(run)
    assert table.ce_bigram_nats.iloc[0] == model.loss(run.tokens("test"), seq_len, eval_tokens)
    assert (table.ce_bigram_nats < table.ce_unigram_nats).all()  # text: the previous token tells something
    gain = (table.ce_bigram_nats - table.ce_model_nats) / math.log(2)
    assert np.allclose(table.bigram_gain_bits, gain, rtol=0, atol=SAME_SUM)
    saved = pd.read_csv(run.table_path(bigram_bound.TABLE))  # what notebook 03 wrote
    pd.testing.assert_frame_equal(saved, table, check_exact=False, rtol=SAME_SUM, atol=SAME_SUM)
    assert "bigram baseline" in bigram_bound.describe(table)


def test_knn_by_frequency_on_the_smoke_run(smoke_study) -> None:
    from tiebias.align import comparisons

    run = Run(smoke_study.path)
    t = knn_bins.knn_by_frequency(comparisons.load_models(run), run.frequencies(), k=10)
    _finite(t, ["overlap", "chance", "ceiling", "over_chance"])
    assert set(t.comparison) == set(knn_bins.COMPARISONS)
    t1 = pd.read_csv(run.table_path("alignment_table1"))
    for comp in ("untied output -> tied", "untied input -> tied"):
        whole = t1[(t1.comparison == comp) & (t1.pairing == "cross seed")]["knn@10"].mean()
        assert knn_bins.cell(t, comp)["overlap"] == pytest.approx(whole, abs=SAME_SUM)  # Table 5's cell, by bin
    saved = pd.read_csv(run.table_path(knn_bins.TABLE))  # what notebook 02 wrote
    pd.testing.assert_frame_equal(saved, t, check_exact=False, rtol=SAME_SUM, atol=SAME_SUM)


def test_levels_at_checkpoints_on_the_smoke_run(smoke_study) -> None:
    run = Run(smoke_study.path)
    saved = pd.read_csv(run.table_path(checkpoint_levels.TABLE))  # what notebook 02 wrote
    ours = saved[saved.who == "this run"]
    _finite(ours, ["step", "fraction", "mean"])
    final = ours.step.max()
    t1 = pd.read_csv(run.table_path("alignment_table1"))
    for comp in ("untied output -> tied", "untied input -> tied"):  # the final checkpoint is the final model
        want = t1[(t1.comparison == comp) & (t1.pairing == "cross seed")].orthogonal.mean()
        got = ours[(ours.quantity == comp) & (ours.step == final)]["mean"].iloc[0]
        assert got == pytest.approx(want, abs=SAME_SUM)
    ev = pd.read_csv(run.table_path("alignment_evolution"))
    out = ev[ev.matrix == "untied output"].groupby("step").cos_to_init.mean()
    fig3 = ours[ours.quantity == "untied output: cosine to initialisation"].set_index("step")["mean"]
    assert np.allclose(fig3.to_numpy(), out.reindex(fig3.index).to_numpy(), atol=SAME_SUM)
    row = checkpoint_levels.at_fraction(saved, "untied input -> tied", 0.1)
    assert abs(row.fraction - 0.1) == min(abs(ours[ours.quantity == "untied input -> tied"].fraction - 0.1))
