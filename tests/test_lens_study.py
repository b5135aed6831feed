import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tiebias.config import profiles
from tiebias.config.lens import LensSettings
from tiebias.config.params import coerce
from tiebias.lens import evaluate as lens_eval
from tiebias.lens import fit as lens_fit
from tiebias.lens import ladder as lens_ladder
from tiebias.lens import lenses as tl
from tiebias.lens import tables as lens_study
from tiebias.models import sources
from tiebias.run.folder import Run
from tiebias.train.sweeps import train_depth_models
from tiebias.verdicts import claims, records

LENS = LensSettings(steps=6, tokens_per_step=256, seq_len=32, eval_tokens=256)
NOTEBOOK_03 = Path(__file__).resolve().parent.parent / "notebooks" / "03_lens.ipynb"


def test_train_lens_ladders_gap_and_claim(two_seed_run: Run) -> None:
    df = lens_ladder.train_lens_ladders(two_seed_run, ["tied", "untied"], [0, 1], LENS, progress=False)
    n_layers = 2  # tiny preset
    assert len(df) == 2 * 2 * (n_layers + 1)
    last = df[df.layer == n_layers]
    assert last.kl_tuned_bits.abs().max() < 1e-3 and last.kl_logit_bits.abs().max() < 1e-3
    assert (two_seed_run.lens_dir("tied", 0) / "params.pt").exists()
    g = lens_study.gaps(df)
    assert list(g.layer) == [0, 1, 2] and (g.n_seeds == 2).all()
    wide = df.pivot_table(index=["layer", "seed"], columns="variant", values="kl_tuned_bits")
    assert g.gap.iloc[0] == pytest.approx((wide.tied - wide.untied).loc[0].mean())


def test_lens_reused_when_recipe_matches(two_seed_run: Run) -> None:
    lens_ladder.ensure_lens(two_seed_run, "tied", 1, LENS, progress=False)
    p = lens_ladder.rung_dir(two_seed_run.lens_dir("tied", 1), "cpu", 1) / "params.pt"
    t = p.stat().st_mtime_ns
    lens_ladder.ensure_lens(two_seed_run, "tied", 1, LENS, progress=False)
    assert p.stat().st_mtime_ns == t
    lens_ladder.ensure_lens(two_seed_run, "tied", 1, LENS.replace(steps=7), progress=False)
    assert p.stat().st_mtime_ns != t


def test_gap_needs_both_variants() -> None:
    df = pd.DataFrame({"variant": ["tied"], "seed": [0], "layer": [0], "kl_tuned_bits": [1.0]})
    with pytest.raises(ValueError, match="need both 'tied' and 'untied'"):
        lens_study.gaps(df)
    assert lens_study.early_layers(6) == [0, 1, 2] and lens_study.early_layers(2) == [0, 1]


def test_external_models_by_path(two_seed_run: Run) -> None:
    models = sources.load_models({"tied": two_seed_run.model_path("tied", 0),
                                      "untied": two_seed_run.model_path("untied", 0)})
    df, lenses = lens_ladder.train_pair_lens_ladders(models, None, LENS, progress=False,
                                                     folder=two_seed_run.path / "external")
    assert set(df.variant) == {"tied", "untied"} and set(lenses) == {"tied", "untied"}
    assert df[df.layer == df.layer.max()].kl_tuned_bits.abs().max() < 1e-3
    with pytest.raises(ValueError, match="untied_source: missing"):
        sources.load_models({"untied": None})


def test_depth_models_share_data_and_differ_only_in_preset(two_seed_run: Run, tiny_config) -> None:
    from dataclasses import replace

    sub = train_depth_models(two_seed_run, "mini", [0], replace(tiny_config, steps=8), progress=False)
    assert sub.path == two_seed_run.path / "depth" / "mini"
    assert sub.config == two_seed_run.config
    assert sub.load_model("tied", 0).config.num_hidden_layers == 4
    assert sub.summary("untied", 0)["steps"] == 8
    df = lens_ladder.train_lens_ladders(sub, ["tied", "untied"], [0], LENS, progress=False)
    assert lens_study.gaps(df).layer.max() == 4  # 4 blocks and the embedding output
    with pytest.raises(ValueError, match="preset: unknown value"):
        train_depth_models(two_seed_run, "huge", [0], tiny_config)


def test_an_interrupted_depth_folder_is_rebuilt_whole(two_seed_run: Run, tiny_config) -> None:
    from dataclasses import replace

    half = two_seed_run.depth_dir("tiny")
    (half / "tokens").mkdir(parents=True)
    (half / "tokens" / "train.npy").write_bytes(b"cut short")  # a copy stopped midway: no config.json
    sub = train_depth_models(two_seed_run, "tiny", [0], replace(tiny_config, steps=4), progress=False)
    assert sub.tokens("train").equal(two_seed_run.tokens("train")) and sub.config == two_seed_run.config
    assert (sub.path / ".tiebias-run.json").is_file() and not (sub.path.parent / ".tiny.tmp").exists()


# --------------------------------------------------------------------------- ladder


def _params(state_dict: dict) -> dict:
    return {k: v.clone() for k, v in state_dict.items()}


def test_ladder_resumes_after_interruption(two_seed_run: Run, tmp_path: Path, monkeypatch) -> None:
    model = two_seed_run.load_model("untied", 0)
    tokens = two_seed_run.tokens("validation")
    lens = LensSettings(steps=4, tokens_per_step=64, seq_len=32)
    kw = dict(progress=False)
    whole = lens_ladder.train_ladder(model, tokens, tmp_path / "whole", lens.replace(budgets=(1, 2, 3)), **kw)

    real = lens_fit.train_lens
    calls: list[int] = []

    def steps_of(args, kwargs) -> int:
        """The steps of one train_lens call (its LensFit, positional or by name)."""
        return (args[2] if len(args) > 2 else kwargs["fit"]).steps

    def killed_in_rung_2(*args, **kwargs):
        calls.append(steps_of(args, kwargs))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(lens_fit, "train_lens", killed_in_rung_2)
    with pytest.raises(KeyboardInterrupt):
        lens_ladder.train_ladder(model, tokens, tmp_path / "cut", lens.replace(budgets=(1, 2, 3)), **kw)
    first = lens_ladder.rung_dir(tmp_path / "cut", "cpu", 1)
    assert (first / "trainer.pt").is_file() and not lens_ladder.rung_dir(tmp_path / "cut", "cpu", 2).exists()
    calls.clear()
    monkeypatch.setattr(lens_fit, "train_lens", lambda *a, **k: (calls.append(steps_of(a, k)), real(*a, **k))[1])
    resumed = lens_ladder.train_ladder(model, tokens, tmp_path / "cut", lens.replace(budgets=(1, 2, 3)), **kw)
    assert calls == [4, 4]  # rung 1 is not retrained; rungs 2 and 3 are 4 new steps each
    for b in (1, 2, 3):
        a, r = whole[b].state_dict(), resumed[b].state_dict()
        assert all(torch.equal(a[k], r[k]) for k in a), f"rung {b} differs after resuming"
    assert not any(torch.equal(whole[1].state_dict()[k], whole[3].state_dict()[k])
                   for k in whole[1].state_dict() if k.startswith("layer_translators"))
    # only the top rung keeps the trainer state; a finished ladder trains nothing
    assert not (first / "trainer.pt").exists()
    assert (lens_ladder.rung_dir(tmp_path / "cut", "cpu", 3) / "trainer.pt").is_file()
    calls.clear()
    lens_ladder.train_ladder(model, tokens, tmp_path / "cut", lens.replace(budgets=(1, 2, 3)), **kw)
    assert calls == []
    # a longer ladder continues from the top rung
    lens_ladder.train_ladder(model, tokens, tmp_path / "cut", lens.replace(budgets=(1, 2, 3, 5)), **kw)
    assert calls == [8]
    # another ladder shares the first rung only
    calls.clear()
    lens_ladder.train_ladder(model, tokens, tmp_path / "cut", lens.replace(budgets=(1, 4)), **kw)
    assert calls == [4, 12]


def test_train_lens_ladders_layout_and_rungs(two_seed_run: Run) -> None:
    seq = lens_ladder.train_lens_ladders(two_seed_run, ["tied", "untied"], [0],
                                         LENS.replace(budgets=(1, 2), recipes=("cpu", "package")), progress=False,
                                         per_sequence=True)
    assert set(seq.recipe) == {"cpu", "package"} and set(seq.budget) == {1, 2}
    assert set(seq.lens_steps) == {6, 12} and seq.sequence.nunique() == 256 // 32
    folder = two_seed_run.lens_dir("tied", 0)
    top = json.loads((folder / "recipe.json").read_text())
    assert top["recipe"] == "cpu" and top["budget"] == 2
    model = two_seed_run.load_model("tied", 0)
    same = tl.load_lens(model, folder).state_dict()
    rung = tl.load_lens(model, lens_ladder.rung_dir(folder, "cpu", 2)).state_dict()
    assert all(torch.equal(same[k], rung[k]) for k in same)
    kl = lens_study.per_layer(seq)
    # the aggregated table equals evaluate's per-layer table for that rung
    ref = lens_eval.evaluate(model, two_seed_run.tokens("test"),
                             tl.load_lens(model, lens_ladder.rung_dir(folder, "package", 1)), seq_len=32, max_tokens=256)
    got = kl[(kl.variant == "tied") & (kl.recipe == "package") & (kl.budget == 1)].reset_index(drop=True)
    for col in ("kl_tuned_bits", "kl_logit_bits", "ce_tuned_nats", "ce_logit_nats", "ce_model_nats", "n_tokens"):
        np.testing.assert_allclose(got[col].to_numpy(), ref[col].to_numpy(), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="several rows per"):
        lens_study.gaps(kl)
    one = lens_study.at_budget(kl)
    assert set(one.recipe) == {"cpu"} and set(one.budget) == {2}
    assert len(lens_study.gaps(one)) == 3


def test_ladder_and_parameter_validation(two_seed_run: Run) -> None:
    assert coerce("lens_budgets", [1, 2, 4]) == [1, 2, 4] and LensSettings(budgets=[1, 2, 4]).budgets == (1, 2, 4)
    assert coerce("lens_budgets", "1,2,4") == [1, 2, 4] and coerce("lens_budgets", "[1, 4]") == [1, 4]
    assert LensSettings(budgets="1,2,4").budgets == (1, 2, 4) and LensSettings(budgets="[1, 4]").budgets == (1, 4)
    for bad in ([2, 1], [1, 1], [0, 1], [-1], [], [1.5, 2], "x"):
        with pytest.raises(ValueError, match="lens_budgets"):
            coerce("lens_budgets", bad)
        with pytest.raises(ValueError, match="^lens_budgets"):
            LensSettings(budgets=bad)
    assert coerce("lens_recipes", "cpu,package") == ["cpu", "package"]
    assert LensSettings(recipes="cpu,package").recipes == ("cpu", "package")
    for bad in (["adamw"], ["cpu", "cpu"], []):
        with pytest.raises(ValueError, match="lens_recipes"):
            coerce("lens_recipes", bad)
        with pytest.raises(ValueError, match="^lens_recipes"):
            LensSettings(recipes=bad)
    assert coerce("lens_checkpoints", []) == [] and coerce("lens_checkpoints", "128,256") == [128, 256]
    with pytest.raises(ValueError, match="lens_checkpoints"):
        coerce("lens_checkpoints", [256, 128])
    # notebook 03's parameters: resolved (each value checked against the schema), then made LensSettings
    good = dict(lens_steps=10, lens_tokens_per_step=64, lens_eval_tokens=64, lens_budgets=[1, 2],
                lens_recipes=["cpu"], lens_checkpoints=[], lens_depth_presets=[], seq_len=32)
    assert LensSettings.from_params(good).budgets == (1, 2)
    assert profiles.resolve("smoke", "/tmp/x", **good)["lens_budgets"] == [1, 2]
    with pytest.raises(ValueError, match="^lens_steps: 0"):
        LensSettings.from_params({**good, "lens_steps": 0})
    with pytest.raises(ValueError, match="^lens_steps: 0"):
        profiles.resolve("smoke", "/tmp/x", **{**good, "lens_steps": 0})
    with pytest.raises(ValueError, match="^lens_depth_presets: .*'bogus'"):
        profiles.resolve("smoke", "/tmp/x", **{**good, "lens_depth_presets": ["small-deep", "bogus"]})
    with pytest.raises(ValueError, match="^lens_depth_presets: .*repeated"):
        profiles.resolve("smoke", "/tmp/x", **{**good, "lens_depth_presets": "mini,mini"})
    assert profiles.resolve("smoke", "/tmp/x", **{**good, "lens_depth_presets": "mini,small-16"})[
        "lens_depth_presets"] == ["mini", "small-16"]
    with pytest.raises(ValueError, match="^lens_budgets"):
        LensSettings.from_params({**good, "lens_budgets": [4, 2]})
    with pytest.raises(ValueError, match="^lens_budgets"):
        profiles.resolve("smoke", "/tmp/x", **{**good, "lens_budgets": [4, 2]})
    with pytest.raises(ValueError, match="^lens_steps: 0"):
        LensSettings(steps=0, tokens_per_step=64, seq_len=32)
    model = two_seed_run.load_model("tied", 0)
    with pytest.raises(ValueError, match="^lens: expected a tiebias.config.lens.LensSettings, got dict"):
        lens_ladder.train_ladder(model, two_seed_run.tokens("validation"), "/nonexistent",
                                 {"steps": 0, "tokens_per_step": 64, "seq_len": 32})  # type: ignore[arg-type]
    assert not Path("/nonexistent").exists()


# --------------------------------------------------------------------------- statistics


def _synthetic(gaps_by_budget: dict[int, float], seeds=(0, 1, 2), n_seq: int = 40, layers: int = 3,
               noise: float = 0.05, recipe: str = "cpu") -> pd.DataFrame:
    """Per-sequence table whose early-layer gap at each budget is known; seed offsets give a seed spread.

    The per-sequence noise depends on (seed, variant, layer) only, so rungs differ by their gap alone.
    """
    rows = []
    for budget, gap in gaps_by_budget.items():
        for seed in seeds:
            offset = (seed - 1) * noise
            for v in ("tied", "untied"):
                for layer in range(layers + 1):
                    base = 2.0 / (layer + 1) if layer < layers else 0.0
                    extra = (gap + offset) if v == "tied" and layer < layers else 0.0
                    rng = np.random.default_rng([seed, v == "tied", layer])
                    vals = base + extra + rng.normal(0, 0.01, n_seq) * (layer < layers)
                    for s, x in enumerate(vals):
                        rows.append({"variant": v, "seed": seed, "step": 10, "recipe": recipe, "budget": budget,
                                     "lens_steps": budget * 10, "sequence": s, "layer": layer, "kl_tuned_bits": x,
                                     "kl_logit_bits": x, "ce_tuned_nats": x, "ce_logit_nats": x,
                                     "ce_model_nats": 1.0, "n_tokens": 32})
    return pd.DataFrame(rows)


def test_convergence_rule() -> None:
    lad = pd.DataFrame({"recipe": "cpu", "budget": [1, 2, 4], "gap": [1.0, 0.5, 0.45], "half_width": [0.2, 0.2, 0.1]})
    c = lens_study.convergence(lad)
    assert c["converged"] is True and c["change"] == pytest.approx(-0.05) and c["half_width"] == 0.1
    assert lens_study.convergence(lad.assign(gap=[1.0, 0.5, 0.3]))["converged"] is False
    assert lens_study.convergence(lad.assign(half_width=[0.2, 0.2, math.nan]))["converged"] is False
    assert lens_study.convergence(lad.iloc[:1])["converged"] is None


def test_claim3_verdict_on_synthetic_tables() -> None:
    # three seeds with sd 0.05 of the gap: CI half-width about 0.12
    held = claims.claim3(_synthetic({1: 0.55, 2: 0.52, 4: 0.5}))
    assert held.status == "holds" and held.details["converged"] is True and held.details["budget"] == 4
    assert held.value == pytest.approx(0.5, abs=0.01) and held.details["ci_low"] > 0
    assert held.value > held.threshold > 0 and "HOLDS" in held.text
    assert held.details["method"] == "t-interval over 3 seeds"
    moving = claims.claim3(_synthetic({1: 1.5, 2: 1.0, 4: 0.5}))
    assert moving.status == "not converged" and "NOT CONVERGED" in moving.text
    null = claims.claim3(_synthetic({1: 0.0, 2: 0.01, 4: 0.0}))
    assert null.status == "does not hold" and not null.value > null.threshold
    single = claims.claim3(_synthetic({4: 0.5}))
    assert single.details["converged"] is None and "not checked" in single.text and single.status == "holds"
    # the first recipe carries the verdict, the second is reported beside it
    both = pd.concat([_synthetic({1: 0.5, 2: 0.5}), _synthetic({1: 2.0, 2: 2.0}, recipe="package")])
    v = claims.claim3(both)
    assert v.details["recipe"] == "cpu" and v.value == pytest.approx(0.5, abs=0.02) and "'package'" in v.text


def test_one_pair_uses_bootstrap_never_zero() -> None:
    pair = _synthetic({1: 0.3, 2: 0.3}, seeds=(0,))
    v = claims.claim3(pair)
    assert v.n_seeds == 1 and "one pair: no seed noise floor" in v.text
    assert v.threshold > 0 and v.status == "holds"
    flat = _synthetic({1: 0.0, 2: 0.0}, seeds=(0,))
    f = claims.claim3(flat)
    # a gap of pure noise does not "hold" just by being positive
    assert f.status == "does not hold" and f.details["converged"] is True and f.threshold > 0
    g = lens_study.gaps(lens_study.at_budget(pair))
    assert (g.ci_method[:3] == "bootstrap over sequences").all() and g.significant[:3].all()
    assert g.ci_low[3] == pytest.approx(0.0, abs=1e-12)


def test_early_gap_different_depths_uses_relative_depth() -> None:
    t = _synthetic({1: 0.4}, seeds=(0,), layers=3)
    deep = _synthetic({1: 0.4}, seeds=(0,), layers=6)
    pair = pd.concat([t[t.variant == "tied"], deep[deep.variant == "untied"]])
    g = lens_study.early_gap(pair)
    assert g["early_layers"] == {"tied": [0, 1], "untied": [0, 1, 2]}
    assert "relative depth" in g["depth_note"] and g["method"].startswith("one pair")
    with pytest.raises(ValueError, match="per-layer gaps need equal depth"):
        lens_study.gaps(pair)


# --------------------------------------------------------------------------- scale axis


def test_train_checkpoint_lens_ladders_on_checkpoints(two_seed_run: Run) -> None:
    scale, table = lens_ladder.train_checkpoint_lens_ladders(two_seed_run, ["tied", "untied"], [0, 1], [4, 8],
                                                             LENS.replace(budgets=(1, 2)), progress=False)
    assert list(scale.step) == [4, 8] and set(table.step) == {4, 8}
    val = two_seed_run.metrics("tied", 0, "val").set_index("step").val_loss
    want = np.mean([two_seed_run.metrics(v, s, "val").set_index("step").val_loss[4]
                    for v in ("tied", "untied") for s in (0, 1)])
    assert scale.val_loss[0] == pytest.approx(want) and scale.val_step[0] == 4 and val[4] > val[8]
    assert (scale.ci_low <= scale.gap).all() and (scale.gap <= scale.ci_high).all() and (scale.budget == 2).all()
    # checkpoint lenses live next to the checkpoint; the final step is the final model's lens
    assert (two_seed_run.lens_dir("tied", 0, 4) / "cpu-x2" / "params.pt").is_file()
    assert (two_seed_run.lens_dir("tied", 0) / "cpu-x2" / "params.pt").is_file()
    assert not (two_seed_run.model_path("tied", 0, 8) / "lens").exists()
    at4 = lens_study.at_budget(table[table.step == 4])
    assert scale.gap[0] == pytest.approx(lens_study.early_gap(at4)["value"])
    with pytest.raises(ValueError, match="step: no checkpoint 5"):
        lens_ladder.train_checkpoint_lens_ladders(two_seed_run, ["tied"], [0], [5], LENS, progress=False)


# --------------------------------------------------------------------------- notebook helpers and figures


def test_summaries_and_figures(two_seed_run: Run, tmp_path: Path) -> None:
    from tiebias.output.plotting import lens as lplot
    seq = _synthetic({1: 0.6, 2: 0.5})
    kl = lens_study.per_layer(seq)
    cells = lens_study.ladder_layers(kl, layers=(0, 1))
    assert list(cells.index) == [("cpu", 1), ("cpu", 2)] and cells.shape[1] == 4
    tied0 = kl[(kl.budget == 2) & (kl.layer == 0) & (kl.variant == "tied")].kl_tuned_bits
    assert cells.loc[("cpu", 2), (0, "tied")].startswith(f"{tied0.mean():.3g} ± ")
    g = lens_study.gaps(lens_study.at_budget(seq))
    assert g.layer[g.gap > 0].tolist() == [0, 1, 2] and g.layer[g.significant].tolist() == [0, 1, 2]
    assert lens_study.same_depth(seq) and not lens_study.same_depth(seq[~((seq.variant == "tied") & (seq.layer == 3))])
    scale = pd.DataFrame({"step": [4, 8], "val_loss": [6.0, 5.5], "gap": [0.0, 0.3], "ci_low": [-0.1, 0.1],
                          "ci_high": [0.1, 0.5], "half_width": [0.1, 0.2], "n_seeds": [2, 2],
                          "converged": [True, False], "budget": [2, 2]})
    v = claims.claim3(seq)
    cell = next("".join(c["source"]) for c in json.loads(NOTEBOOK_03.read_text())["cells"]
                if "def final_point" in "".join(c["source"]))  # notebook 03's own point of a deeper run
    ns = {"np": np, "claims": claims, "variants": ["tied", "untied"], "SEEDS": [0, 1]}
    exec(textwrap.dedent(cell[cell.index("    def final_point"):cell.index("    extra = ")]), ns)
    pt = ns["final_point"](two_seed_run, seq)
    want = np.mean([two_seed_run.summary(x, s)["final_val_loss"] for x in ("tied", "untied") for s in (0, 1)])
    assert pt["val_loss"] == pytest.approx(want) and pt["gap"] == v.value
    run = Run(tmp_path / "ext")
    entry = claims.record(run, v)
    assert entry["above_threshold"] == (v.value > v.threshold) and entry["details"]["converged"] == v.details["converged"]
    assert entry["status"] == v.status and entry["verdict"] == {"holds": True, "does not hold": False}.get(v.status)
    assert records.results(run)["claim3_tuned_lens"]["statement"] == v.text
    # figures: one panel per layer below the output, a trace per variant; CI bars from the table
    fig = lplot.ladder(kl)
    assert len(fig.data) == 3 * 2 and list(fig.data[0].x) == [10, 20]
    lad = lens_study.ladder_gaps(seq)
    fig = lplot.ladder_gap(lad)
    np.testing.assert_allclose(fig.data[0].error_y.array, lad.ci_high - lad.gap)
    fig = lplot.gap_vs_loss(scale, {"deep": pt})
    assert len(fig.data) == 2 and list(fig.data[0].text) == ["step 4", "step 8"]
    fig = lplot.gap_by_depth({"a": g, "b": g})
    np.testing.assert_allclose(fig.data[0].error_y.arrayminus, np.nan_to_num(g.gap - g.ci_low))


