"""Claims 2 and 4 taken apart, and the scale axis: the paper's proxy metric, the window shares, the ingredients of
claim 4's shift and the trends against size; each new table in the shared smoke study."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tiebias import stats
from tiebias.ablate import ingredients, scale
from tiebias.config import profiles
from tiebias.config.params import TrainConfig, recorded_recipe
from tiebias.models.build import build
from tiebias.paper import FIG4_LOG_WINDOWS
from tiebias.train import windows
from tiebias.train.checkpoints import TRAIN_FIELDS, kept_log
from tiebias.train.gradients import GradientProvenance


def _hand_grads(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradient on the embedding lookup's output, and the input path's weight gradient, computed by hand."""
    w = model.get_input_embeddings().weight
    emb = w[ids].detach().requires_grad_(True)
    loss = model(inputs_embeds=emb, labels=ids).loss
    (g_emb,) = torch.autograd.grad(loss, emb)
    g_w = torch.zeros_like(w).index_add_(0, ids.flatten(), g_emb.reshape(-1, w.shape[1]))
    return g_emb, g_w


def test_proxy_is_the_norm_of_the_embedding_output_gradient_and_differs_where_a_token_repeats() -> None:
    torch.manual_seed(0)
    model = build("tiny", vocab_size=64, seed=0)
    ids = torch.tensor([[5, 9, 5, 5, 17, 9, 33, 2]])  # token 5 three times, 9 twice
    g_emb, g_w = _hand_grads(model, ids)
    with GradientProvenance(model) as prov:
        model(input_ids=ids, labels=ids).loss.backward()
        st = prov.pop()
    proxy = float(torch.linalg.vector_norm(g_emb))
    exact = float(torch.linalg.vector_norm(g_w))
    # the same arithmetic done twice (different summation order): agree to float32 rounding
    assert st.proxy_input_norm == pytest.approx(proxy, rel=1e-4)
    assert st.proxy_input_l1 == pytest.approx(float(g_emb.abs().sum()), rel=1e-4)
    assert st.input_norm == pytest.approx(exact, rel=1e-4)
    assert st.input_l1 == pytest.approx(float(g_w.abs().sum()), rel=1e-4)
    # the known difference: |sum of a repeated token's position gradients|^2 replaces the sum of their squares
    flat = g_emb.reshape(-1, g_emb.shape[-1])
    cross = sum(float(flat[i] @ flat[j]) for i in range(8) for j in range(8)
                if i != j and ids.flatten()[i] == ids.flatten()[j])
    assert exact**2 - proxy**2 == pytest.approx(cross, rel=1e-3, abs=1e-9)
    assert abs(exact - proxy) > 1e-3 * exact  # a repeated token makes the two measurably different


def test_proxy_equals_the_exact_norm_when_no_token_repeats() -> None:
    model = build("tiny", vocab_size=64, seed=1)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    g_emb, _ = _hand_grads(model, ids)
    with GradientProvenance(model) as prov:
        model(input_ids=ids, labels=ids).loss.backward()
        st = prov.pop()
    assert st.proxy_input_norm == pytest.approx(st.input_norm, rel=1e-4)


def test_proxy_scales_with_the_input_factor() -> None:
    ids = torch.tensor([[5, 9, 5, 5, 17, 9, 33, 2]])
    out = []
    for k in (1.0, 5.0):
        model = build("tiny", vocab_size=64, seed=0)
        with GradientProvenance(model, input_factor=k) as prov:
            model(input_ids=ids, labels=ids).loss.backward()
            out.append(prov.pop())
    assert out[1].proxy_input_norm == pytest.approx(5 * out[0].proxy_input_norm, rel=1e-5)
    assert out[1].input_norm == pytest.approx(5 * out[0].input_norm, rel=1e-5)


def _synthetic_log(steps: int, warmup: int, early: float, late: float) -> pd.DataFrame:
    """A metrics log whose output share is ``early`` during warmup and ``late`` after (L2; in = 1)."""
    step = np.arange(1, steps + 1)
    share = np.where(step <= warmup, early, late)
    out = share / (1 - share)
    return pd.DataFrame({"step": step, "input_norm": 1.0, "output_norm": out, "output_share": share,
                         "input_l1": 1.0, "output_l1": out, "proxy_input_norm": 2.0, "proxy_input_l1": 2.0})


def test_window_shares_of_a_synthetic_log_with_known_values() -> None:
    log = _synthetic_log(300, 20, 0.9, 0.6)
    t = windows.window_shares({"a": log, "b": log}, 300, 20).set_index(["window", "metric"])
    assert t.loc[("warmup", "exact l2"), "mean"] == pytest.approx(0.9)
    assert t.loc[("after warmup", "exact l2"), "mean"] == pytest.approx(0.6)
    assert t.loc[("first 100 steps", "exact l2"), "mean"] == pytest.approx((20 * 0.9 + 80 * 0.6) / 100)
    # a run shorter than the paper's: "first 1000 steps" is the whole run
    assert tuple(t.loc[("first 1000 steps", "exact l2"), ["first_step", "last_step"]]) == (1, 300)
    assert t.loc[("first 1000 steps", "exact l2"), "mean"] == pytest.approx((20 * 0.9 + 280 * 0.6) / 300)
    r = 0.9 / 0.1  # out/in during warmup
    assert t.loc[("warmup", "exact squared l2"), "mean"] == pytest.approx(r**2 / (1 + r**2))
    assert t.loc[("warmup", "proxy l2"), "mean"] == pytest.approx(r / (2 + r))


def test_window_bounds_follow_the_runs_own_warmup() -> None:
    assert windows.window_bounds(300, 20) == {"first 100 steps": (1, 100), "warmup": (1, 20),
                                              "first 1000 steps": (1, 300), "after warmup": (21, 300)}
    assert "warmup" not in windows.window_bounds(50, 0)
    for steps, warmup in ((0, 0), (10, 10), (10, -1)):
        with pytest.raises(ValueError, match="steps|warmup"):
            windows.window_bounds(steps, warmup)


def test_a_log_without_the_proxy_gives_nan_for_it_not_an_error() -> None:
    log = _synthetic_log(40, 6, 0.8, 0.7).drop(columns=["proxy_input_norm", "proxy_input_l1"])
    t = windows.window_shares({"a": log}, 40, 6).set_index(["window", "metric"])
    assert math.isnan(t.loc[("warmup", "proxy l2"), "mean"])
    assert t.loc[("warmup", "exact l2"), "mean"] == pytest.approx(0.8)


def test_the_windows_interval_holds_the_papers_share_where_the_log_puts_it() -> None:
    """The table 01 reads its sentences from: the paper's 70% lies in the warmup window's interval of the exact
    split (the smoke study's table has the paper's own log beside each row)."""
    log = _synthetic_log(300, 20, 0.7, 0.62)
    noisy = {f"s{i}": log.assign(output_norm=log.output_norm * (1 + 0.05 * (i - 1))) for i in range(3)}
    t = windows.window_shares(noisy, 300, 20).set_index(["window", "metric"])
    assert t.loc[("warmup", "exact l2"), "ci_low"] <= 0.70 <= t.loc[("warmup", "exact l2"), "ci_high"]
    assert not t.loc[("after warmup", "exact l2"), "ci_low"] <= 0.70 <= t.loc[("after warmup", "exact l2"), "ci_high"]


def test_a_log_from_before_the_new_columns_resumes_with_them_empty(tmp_path: Path) -> None:
    old = TRAIN_FIELDS[:13]
    p = tmp_path / "m.csv"
    p.write_text(",".join(old) + "\n" + "".join(f"{s}," + ",".join(["1"] * 12) + "\n" for s in (1, 2, 3)))
    kept, notes = kept_log(p, TRAIN_FIELDS, 2, [1, 2], "tied-s0")
    assert [line.count(",") for line in kept] == [len(TRAIN_FIELDS) - 1] * 2
    assert any("proxy_input_norm" in n for n in notes)


def test_new_recipe_keys_are_recorded_only_when_changed() -> None:
    assert "optimizer" not in recorded_recipe(TrainConfig())  # a model trained before they existed still matches
    assert recorded_recipe(TrainConfig(optimizer="sgd"))["optimizer"] == "sgd"
    assert recorded_recipe(TrainConfig(decay_embeddings=False))["decay_embeddings"] is False
    with pytest.raises(ValueError, match="optimizer: unknown value 'adam'"):
        TrainConfig(optimizer="adam").validate()


def test_ingredient_recipes_change_one_thing() -> None:
    cfg = TrainConfig()
    assert ingredients.recipe("warmup10", cfg).warmup_steps == round(0.1 * cfg.steps)
    assert ingredients.recipe("no_embedding_decay", cfg).decay_embeddings is False
    sgd = ingredients.recipe("sgd", cfg)
    assert (sgd.optimizer, sgd.lr) == ("sgd", ingredients.SGD_LR)
    assert ingredients.recipe("warmup10", cfg).steps == cfg.steps


def test_ingredients_summary_from_synthetic_shifts() -> None:
    rows = []
    for seed, noise in enumerate((-0.004, 0.0, 0.004)):
        rows.append({"ingredient": "big", "k": 5.0, "seed": seed, "vs_untied_input": 0.08 + noise,
                     "vs_untied_output": -0.2 + noise})
        rows.append({"ingredient": "small", "k": 5.0, "seed": seed, "vs_untied_input": 0.006 + noise,
                     "vs_untied_output": -0.015 + noise})
    summ = ingredients.summary(pd.DataFrame(rows)).set_index("ingredient")
    assert summ.loc["small", "matches_paper"] and not summ.loc["big", "matches_paper"]
    assert summ.loc["big", "vs_untied_input"] == pytest.approx(0.08)


def test_bad_new_parameters_are_refused_by_name_before_anything_is_written(tmp_path: Path) -> None:
    rd = tmp_path / "run"
    for key, value, match in (("ablate_ingredients", ["adamw"], "ablate_ingredients"),
                              ("scale_vocab_sizes", [100], "scale_vocab_sizes"),
                              ("scale_vocab_sizes", [1024, 1024], "scale_vocab_sizes"),
                              ("scale_presets", ["huge"], "scale_presets")):
        with pytest.raises(ValueError, match=match):
            profiles.resolve("smoke", rd, **{key: value})
    with pytest.raises(ValueError, match="ablate_ingredients: unknown value 'adam'"):
        ingredients.check(["adam"], [1.0, 5.0], [0, 1])
    assert not rd.exists()


def test_ingredients_a_sweep_cannot_measure_are_skipped_with_a_note() -> None:
    assert ingredients.check(["sgd"], [1.0, 5.0], [0, 1]) == (["sgd"], "")
    names, note = ingredients.check(["sgd"], [1.0, 20.0], [0, 1])
    assert names == [] and "need 1 and 5 in ablate_factors" in note and "[1.0, 20.0]" in note
    names, note = ingredients.check(["sgd"], [1.0, 5.0], [0])
    assert names == [] and "two or more ablate_seeds" in note


def test_scale_points_and_trends() -> None:
    pts = scale.points(4096, "small", [1024, 4096, 16384], ["small-w64", "small"])
    assert [p.label for p in pts] == ["v4096-small", "v1024-small", "v16384-small", "v4096-small-w64"]
    assert pts[0].base and pts[3].width == 64
    rng = np.random.default_rng(0)
    rows = [{"point": f"v{v}", "vocab_size": v, "width": 128, "seed": s,
             "q": 0.1 * math.log2(v) + rng.normal(0, 0.01)} for v in (1024, 4096, 16384) for s in range(3)]
    t = pd.DataFrame(rows)
    tr = scale.trend(t, "q", "vocab_size", pts[0])
    assert tr["word"] == "rises" and tr["ci_low"] < 0.1 < tr["ci_high"]
    assert tr["at_paper"] == pytest.approx(0.1 * math.log2(50280), abs=0.1)
    assert scale.trend(t, "q", "width", pts[0])["word"] == "too few points"
    assert tr["mean"] > 0  # rising and positive: its size grows (04 says so in words)
    neg = scale.trend(t.assign(q=-t.q), "q", "vocab_size", pts[0])
    assert neg["word"] == "falls" and neg["mean"] < 0  # falling and negative: its size grows too
    share = scale.trend(t.assign(claim2_share=t.q), "claim2_share", "vocab_size", pts[0])
    assert not 0 <= share["at_paper"] <= 1  # a share's line beyond [0, 1]: 04 says it cannot hold that far


def test_line_at_matches_a_least_squares_fit() -> None:
    x, y = np.array([0.0, 1, 2, 3, 4]), np.array([1.0, 2.9, 5.2, 7.1, 8.8])
    fit, low, high = stats.line_at(x, y, 10.0)
    b, a = np.polyfit(x, y, 1)
    assert fit == pytest.approx(a + 10 * b) and low < fit < high
    exact = stats.line_at(x, 2 * x + 1, 10.0)
    assert exact[0] == pytest.approx(21) and exact[2] - exact[1] == pytest.approx(0, abs=1e-9)


def test_line_at_prediction_interval_adds_one_runs_residual_variance() -> None:
    from scipy.stats import t as student_t

    x, y = np.array([0.0, 1, 2, 3, 4]), np.array([1.0, 2.9, 5.2, 7.1, 8.8])
    fit, low, high = stats.line_at(x, y, 10.0, prediction=True)
    b, a = np.polyfit(x, y, 1)
    s2 = float(((y - (a + b * x)) ** 2).sum()) / 3
    half = student_t.ppf(0.975, 3) * math.sqrt(s2 * (1 + 1 / 5 + (10 - 2) ** 2 / 10))
    assert fit == pytest.approx(a + 10 * b) and high - fit == pytest.approx(half, rel=1e-9)
    _, ci_low, _ = stats.line_at(x, y, 10.0)
    assert low < ci_low  # one run's prediction is wider than the fitted mean's interval
    tr = scale.trend(pd.DataFrame({"vocab_size": [1024, 2048, 4096, 8192] * 2, "width": 128, "q": [0.1, 0.2, 0.3, 0.45,
                                   0.12, 0.19, 0.31, 0.4]}), "q", "vocab_size",
                     scale.points(4096, "small", [4096], ["small"])[0])
    assert tr["pred_low"] < tr["at_paper_low"] < tr["at_paper"] < tr["at_paper_high"] < tr["pred_high"]


def test_the_smoke_study_writes_every_new_table_finite(smoke_study) -> None:
    m = smoke_study.path / "metrics"
    w = pd.read_csv(m / "claim2_windows.csv")
    assert set(w.window) == {"first 100 steps", "warmup", "first 1000 steps", "after warmup"}
    assert set(w.metric) == set(windows.METRICS)
    assert np.isfinite(w[["mean", "paper"]].to_numpy()).all()
    paper = w.set_index(["window", "metric"]).paper  # the paper's log beside each row: same window, same norm
    assert paper[("warmup", "proxy l2")] == paper[("warmup", "exact l2")] == FIG4_LOG_WINDOWS["l2"]["warmup"]
    assert paper[("first 1000 steps", "exact squared l2")] == FIG4_LOG_WINDOWS["squared_l2"]["warmup"]
    assert paper[("after warmup", "proxy l1")] == FIG4_LOG_WINDOWS["l1"]["after warmup"]
    ing = pd.read_csv(m / "claim4_ingredients.csv")
    assert {"kit (another seed's untied model)", "same-seed untied model"} <= set(ing.ingredient)
    assert np.isfinite(ing[["vs_untied_input", "vs_untied_output", "vs_untied_input_ci_low"]].to_numpy()).all()
    pts = pd.read_csv(m / "scale_points.csv")
    assert set(pts.width) == {16, 32, 64}
    assert np.isfinite(pts.drop(columns=["point", "preset"]).to_numpy(float)).all()
    tr = pd.read_csv(m / "scale_trends.csv")
    assert np.isfinite(tr[tr.axis == "width"][["slope", "ci_low", "ci_high", "at_paper"]].to_numpy()).all()
    claims = json.loads((smoke_study.path / "summary.json").read_text())["claims"]
    assert set(claims["claim2_gradient_flow"]["details"]["windows"]) == set(windows.METRICS)
    assert "k=5" in claims["claim4_causality"]["details"]["ingredients"]["kit (another seed's untied model)"]


def test_the_scale_axis_needs_two_seeds_and_says_so() -> None:
    pts = scale.points(1024, "tiny", [512], [])
    assert scale.usable(pts, [0, 1]) == (pts, "")
    kept, note = scale.usable(pts, [3])
    assert kept == pts[:1] and "two or more ablate_seeds" in note


def test_the_papers_metric_stands_beside_its_log_window_by_window() -> None:
    log = _synthetic_log(300, 20, 0.9, 0.6)
    t = windows.window_shares({"a": log, "b": log}, 300, 20).set_index(["window", "metric"])
    r = 9.0 / 2
    assert t.loc[("warmup", "proxy l2"), "mean"] == pytest.approx(r / (1 + r))
    after = 0.6 - (0.6 / 0.4) / (2 + 0.6 / 0.4)
    assert t.loc[("after warmup", "exact l2"), "mean"] - t.loc[("after warmup", "proxy l2"), "mean"] == pytest.approx(after, abs=5e-4)


def test_an_ingredient_trains_its_two_tied_models_and_reads_them_against_the_runs_untied(two_seed_run, tmp_path) -> None:
    import shutil
    from dataclasses import replace

    from conftest import TINY

    from tiebias.run.folder import Run

    run = Run(tmp_path / "run")
    shutil.copytree(two_seed_run.path, run.path)
    cfg = replace(TrainConfig(**TINY), steps=8)
    subs = ingredients.train_ingredients(run, ["no_embedding_decay"], [0, 1], cfg, progress=False)
    sub = subs["no_embedding_decay"]
    assert sub.path == run.path / "ingredients" / "no_embedding_decay"
    recorded = json.loads(sub.train_config_path("tied_in5", 0).read_text())
    assert recorded["decay_embeddings"] is False and recorded["steps"] == 8
    assert not sub.model_dir("untied", 0).exists()  # the reference is the run's own untied model
    shifts = ingredients.shifts_from_ingredients(run, subs, [0, 1])
    assert len(shifts) == 2 and np.isfinite(shifts[["vs_untied_input", "vs_untied_output", "val_loss_k5"]]).all().all()
