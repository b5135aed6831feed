import pandas as pd
import pytest

from tiebias import lens_study
from tiebias.runs import Run

RECIPE = dict(steps=6, tokens_per_step=256, seq_len=32)


def test_kl_table_gap_and_claim(two_seed_run: Run) -> None:
    df = lens_study.kl_table(two_seed_run, ["tied", "untied"], [0, 1], eval_tokens=256, progress=False, **RECIPE)
    n_layers = 2  # tiny preset
    assert len(df) == 2 * 2 * (n_layers + 1)
    last = df[df.layer == n_layers]
    assert last.kl_tuned_bits.abs().max() < 1e-3 and last.kl_logit_bits.abs().max() < 1e-3
    assert (lens_study.lens_dir(two_seed_run, "tied", 0) / "params.pt").exists()
    g = lens_study.gap_table(df)
    assert list(g.layer) == [0, 1, 2] and (g.n_seeds == 2).all()
    wide = df.pivot_table(index=["layer", "seed"], columns="variant", values="kl_tuned_bits")
    assert g.gap.iloc[0] == pytest.approx((wide.tied - wide.untied).loc[0].mean())
    c = lens_study.claim3(g)
    assert c["early_layers"] == [0, 1] and c["value"] == pytest.approx(g[g.layer <= 1].gap.mean())


def test_lens_reused_when_recipe_matches(two_seed_run: Run) -> None:
    lens_study.ensure_lens(two_seed_run, "tied", 1, progress=False, **RECIPE)
    p = lens_study.lens_dir(two_seed_run, "tied", 1) / "params.pt"
    t = p.stat().st_mtime_ns
    lens_study.ensure_lens(two_seed_run, "tied", 1, progress=False, **RECIPE)
    assert p.stat().st_mtime_ns == t
    lens_study.ensure_lens(two_seed_run, "tied", 1, progress=False, **{**RECIPE, "steps": 7})
    assert p.stat().st_mtime_ns != t


def test_gap_needs_both_variants() -> None:
    df = pd.DataFrame({"variant": ["tied"], "seed": [0], "layer": [0], "kl_tuned_bits": [1.0]})
    with pytest.raises(ValueError, match="need both 'tied' and 'untied'"):
        lens_study.gap_table(df)
    assert lens_study.early_layers(6) == [0, 1, 2] and lens_study.early_layers(2) == [0, 1]


def test_external_models_by_path(two_seed_run: Run) -> None:
    models = lens_study.load_sources({"tied": two_seed_run.model_path("tied", 0),
                                      "untied": two_seed_run.model_path("untied", 0)})
    df, lenses = lens_study.kl_table_models(models, None, eval_tokens=256, progress=False, **RECIPE)
    assert set(df.variant) == {"tied", "untied"} and set(lenses) == {"tied", "untied"}
    assert df[df.layer == df.layer.max()].kl_tuned_bits.abs().max() < 1e-3
    with pytest.raises(ValueError, match="untied_source: missing"):
        lens_study.load_sources({"untied": None})


def test_depth_run_shares_data_and_differs_only_in_preset(two_seed_run: Run, tiny_config) -> None:
    from dataclasses import replace

    sub = lens_study.depth_run(two_seed_run, "mini", [0], replace(tiny_config, steps=8), progress=False)
    assert sub.path == two_seed_run.path / "depth" / "mini"
    assert sub.config == two_seed_run.config
    assert sub.load_model("tied", 0).config.num_hidden_layers == 4
    assert sub.summary("untied", 0)["steps"] == 8
    df = lens_study.kl_table(sub, ["tied", "untied"], [0], eval_tokens=256, progress=False, **RECIPE)
    g = lens_study.relative_depth(lens_study.gap_table(df))
    assert g.depth.max() == 1.0 and len(g) == 5
    with pytest.raises(ValueError, match="preset: unknown value"):
        lens_study.depth_run(two_seed_run, "huge", [0], tiny_config)
