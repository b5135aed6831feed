"""The exposure axis (``exposure`` profile, ``scale_steps``): training length separated from size, and tokens seen per
embedding row as a column of every scale point."""

import importlib.util
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tiebias.ablate import scale, sweep
from tiebias.config import profiles
from tiebias.models.build import build
from tiebias.train.gradients import GradientProvenance
from tiebias.train.trainer import batch_for_step

_spec = importlib.util.spec_from_file_location("proxy_tokens", Path(__file__).parents[1] / "scripts" / "proxy_tokens.py")
proxy_tokens = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proxy_tokens)


def test_the_exposure_profile_trains_the_class_model_at_four_lengths(tmp_path) -> None:
    P = profiles.resolve("exposure", tmp_path / "run", notebooks=["04_ablate"])
    pts = scale.points(P["vocab_size"], P["preset"], P["scale_vocab_sizes"], P["scale_presets"], P["scale_steps"],
                       P["steps"])
    assert [p.label for p in pts] == ["v1024-mini", "v1024-mini-s75", "v1024-mini-s150", "v1024-mini-s600"]
    assert pts[0].base and {p.width for p in pts} == {64} and {p.vocab_size for p in pts} == {1024}
    assert [v.name for v in sweep.sweep_variants(P["ablate_factors"])] == ["tied", "tied_in5"]
    assert P["ablate_seeds"] == [0, 1, 2]
    cfg = profiles.train_config(P)
    cfgs = [scale.point_config(cfg, p) for p in pts]
    assert [c.steps for c in cfgs] == [300, 75, 150, 600]
    assert {c.warmup_steps for c in cfgs} == {cfg.warmup_steps}  # only the length changes
    assert {c.steps // c.checkpoint_every for c in cfgs} == {cfg.steps // cfg.checkpoint_every}
    assert {c.steps // c.eval_every for c in cfgs} == {cfg.steps // cfg.eval_every}
    assert {(c.preset, c.batch_size, c.seq_len, c.lr) for c in cfgs} == {(cfg.preset, cfg.batch_size, cfg.seq_len, cfg.lr)}
    # 16 sequences of 128 tokens per step over 1,024 rows: 2 tokens per row per step
    assert [scale.tokens_per_row(c.steps, c.batch_size, c.seq_len, P["vocab_size"]) for c in cfgs] == [600, 150, 300, 1200]


def test_tokens_per_row_and_bad_lengths_are_refused(tmp_path) -> None:
    assert scale.tokens_per_row(300, 16, 128, 16384) == pytest.approx(37.5)
    with pytest.raises(ValueError, match="rows: 0"):
        scale.tokens_per_row(300, 16, 128, 0)
    with pytest.raises(ValueError, match="scale_steps"):
        profiles.resolve("exposure", tmp_path / "run", notebooks=["04_ablate"], scale_steps=[0, 1200])
    with pytest.raises(ValueError, match="steps: needed"):
        scale.points(1024, "mini", [], [], [1200])
    # the run's own length is not repeated as a point
    assert [p.label for p in scale.points(1024, "mini", [], [], [300, 600], 300)] == ["v1024-mini", "v1024-mini-s600"]


def test_the_length_axis_is_fitted_against_tokens_per_row_and_kept_off_the_size_axes() -> None:
    base = scale.ScalePoint(1024, "mini", base=True)
    rng = np.random.default_rng(0)
    rows = []
    for label, v, w, steps in (("v1024-mini", 1024, 64, 300), ("v1024-mini-s1200", 1024, 64, 1200),
                               ("v1024-mini-s2400", 1024, 64, 2400), ("v4096-mini", 4096, 64, 300),
                               ("v16384-mini", 16384, 64, 300)):
        tpr = scale.tokens_per_row(steps, 16, 128, v)
        for s in range(3):
            rows.append({"point": label, "vocab_size": v, "width": w, "steps": steps, "tokens_per_row": tpr, "seed": s,
                         "q": 0.1 * math.log2(tpr) + rng.normal(0, 0.01)})
    t = pd.DataFrame(rows)
    assert scale.measured_axes(t) == ["vocab_size", "width", "tokens_per_row"]
    assert scale.measured_axes(t[t.steps == 300]) == ["vocab_size", "width"]
    assert set(scale.axis_rows(t, "tokens_per_row", base).steps) == {300, 1200, 2400}
    assert set(scale.axis_rows(t, "vocab_size", base).steps) == {300}  # the longer runs are not vocabulary points
    tr = scale.trend(t, "q", "tokens_per_row", base)
    assert tr["sizes"] == [600, 2400, 4800] and tr["word"] == "rises"
    assert tr["at_paper"] == pytest.approx(0.1 * math.log2(scale.PAPER_TOKENS_PER_ROW), abs=0.1)
    assert scale.AXES[tr["axis"]] == "training length (tokens seen per row)"
    voc = scale.trend(t, "q", "vocab_size", base)
    assert voc["sizes"] == [1024, 4096, 16384] and voc["word"] == "falls"  # fewer tokens per row at a larger vocabulary
    s = scale.summary(t)
    assert {"steps", "tokens_per_row"} <= set(s.columns) and set(s.quantity) == {"q"}
    assert s.groupby("point").tokens_per_row.first()["v1024-mini-s2400"] == 4800


def test_point_table_reads_each_points_length_and_tokens_per_row(fresh_run, tiny_config, one_thread) -> None:
    cfg = replace(tiny_config, steps=4, warmup_steps=1, eval_every=2, checkpoint_every=2)
    pts = scale.points(fresh_run.config["vocab_size"], cfg.preset, [], [], [8], cfg.steps)
    variants = sweep.sweep_variants([1, 5])
    runs = scale.train_points(fresh_run, pts, variants, [0, 1], cfg, progress=False)
    table = pd.concat([scale.point_table(runs[p.label], p, variants, [0, 1], cfg.warmup_steps) for p in pts],
                      ignore_index=True)
    rows = fresh_run.config["tokenizer_size"]
    assert table.steps.tolist() == [4, 4, 8, 8]
    assert table.tokens_per_row.tolist() == pytest.approx([s * cfg.batch_size * cfg.seq_len / rows
                                                           for s in (4, 4, 8, 8)])
    assert runs[pts[1].label].summary("tied_in5", 1)["steps"] == 8
    assert np.isfinite(table[["claim1_gap", "claim2_share", "claim4_in_k5", "claim4_out_k5"]].to_numpy()).all()


def test_shares_at_tokens_measures_the_same_weights_at_each_batch_size(prepared_run, one_thread) -> None:
    model = build("tiny", vocab_size=prepared_run.config["tokenizer_size"], seed=0)
    ids = prepared_run.tokens("validation")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    t = proxy_tokens.shares_at_tokens(model, ids, 32, [2, 8], batches=2, seed=3)
    assert t.batch_size.tolist() == [2, 2, 8, 8] and t.tokens.tolist() == [64, 64, 256, 256]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # only measured
    # the last row recomputed on its own: batch 1 of seed 3 at 8 sequences
    x = batch_for_step(ids, 1, 3, 8, 32)
    with GradientProvenance(model) as gp:
        model(input_ids=x, labels=x).loss.backward()
        st = gp.pop()
    # the same arithmetic twice on one thread: a wrong batch or metric moves a share by far more than 1e-4
    assert t.iloc[3]["exact l2"] == pytest.approx(st.output_share, rel=1e-4)
    assert t.iloc[3]["proxy l2"] == pytest.approx(st.output_norm / (st.output_norm + st.proxy_input_norm), rel=1e-4)
    assert t.iloc[1]["exact l2"] != pytest.approx(t.iloc[3]["exact l2"], rel=1e-4)  # another batch is another draw
    with pytest.raises(ValueError, match="batch_sizes"):
        proxy_tokens.shares_at_tokens(model, ids, 32, [], batches=2)
