import pytest

from tiebias import stats
from tiebias.align import comparisons
from tiebias.run.folder import Run
from tiebias.verdicts import claims


def test_table1_rows_pairings_and_claim(two_seed_run: Run) -> None:
    models = comparisons.load_models(two_seed_run)
    assert sorted(models) == [0, 1]
    df = comparisons.table1(models, heldout_folds=3, knn_k=5)
    got = set(zip(df.comparison, df.pairing, strict=True))
    assert ("untied input -> tied", "cross seed") in got and ("untied input -> tied", "same seed") in got
    assert ("tied -> tied (noise floor)", "cross seed") in got
    assert len(df[df.pairing == "cross seed"]) == 2 + 2 + 3  # ordered pairs for tied rows, unordered floors
    # same seed, step 8: the tied and untied input matrices began equal and have barely moved
    same = df[(df.comparison == "untied input -> tied") & (df.pairing == "same seed")]
    cross = df[(df.comparison == "untied input -> tied") & (df.pairing == "cross seed")]
    assert same.orthogonal.mean() > cross.orthogonal.mean() + 0.3
    assert (df["linear (held-out)"] <= df.linear + 1e-9).mean() > 0.8
    c = claims.alignment_gap(df)
    assert c["pairing"] == "cross seed" and c["n"] == 2
    assert c["gap"] == pytest.approx(c["out_to_tied"] - c["in_to_tied"])
    s = stats.over_seeds(df, ["orthogonal", "linear (held-out)", "knn@5"], ["comparison", "pairing"])
    assert s.loc[("untied output -> tied", "cross seed"), ("orthogonal", "n")] == 2


def test_evolution_and_neighbours(two_seed_run: Run) -> None:
    ev = comparisons.evolution_table(two_seed_run, [0])
    assert ev.groupby("matrix").step.min().eq(0).all()
    assert ev[ev.step == 0].cos_to_init.min() > 0.9999
    models = comparisons.load_models(two_seed_run, [0])
    nb = comparisons.neighbour_table(models[0]["tied"], "input", 5, k=4)
    assert len(nb) == 4 and models[0]["tied"].tokens[5] not in nb.token.tolist()
    with pytest.raises(ValueError, match="token_id"):
        comparisons.neighbour_table(models[0]["tied"], "input", 10**6)


def test_missing_models_and_wrong_sides(two_seed_run: Run, tmp_path) -> None:
    with pytest.raises(ValueError, match="no seed with both"):
        comparisons.load_models(Run(tmp_path / "empty"))
    with pytest.raises(ValueError, match="seeds: seed 7 has no complete 'tied' model"):
        comparisons.load_models(two_seed_run, [7])
    tied = two_seed_run.model_path("tied", 0)
    untied = two_seed_run.model_path("untied", 0)
    pair = comparisons.load_sources(tied, untied)
    assert pair[0]["tied"].tied and not pair[0]["untied"].tied
    with pytest.raises(ValueError, match="tied_source"):
        comparisons.load_sources(untied, untied)
    with pytest.raises(ValueError, match="untied"):
        comparisons.load_sources(tied, tied)
