"""The reproduction report: a row for every number the paper reports, each cause computed from the run's tables."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from tiebias import paper
from tiebias.output.reproduction_page import write_reproduction
from tiebias.run.folder import Run
from tiebias.verdicts import reproduction as R


def _paper_keys() -> set[str]:
    """Every number in tiebias.paper, walked here independently of the module under test."""
    keys = set()

    def walk(path: list[str], x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk([*path, str(k)], v)
        elif isinstance(x, (int, float, tuple)) and not isinstance(x, bool):
            keys.add("/".join(path))

    for name, value in vars(paper).items():
        if name.isupper() and isinstance(value, dict):
            walk([name], value)
    return keys


def _windows(path: Path, shares: dict[tuple[str, str], list[float]]) -> None:
    rows = [{"window": w, "metric": m, **{f"share_tied-s{i}": v for i, v in enumerate(vals)}}
            for (w, m), vals in shares.items()]
    pd.DataFrame(rows).to_csv(path / "metrics" / "claim2_windows.csv", index=False)


def _row(rep: R.Reproduction, key: str) -> R.Row:
    return next(r for r in rep.rows if r.key == key)


def test_every_paper_number_has_a_row_with_a_cause_from_the_vocabulary(fresh_run: Run) -> None:
    rep = R.build(fresh_run)
    keys = {r.key for r in rep.rows}
    assert _paper_keys() <= keys, sorted(_paper_keys() - keys)
    assert {r.cause for r in rep.rows} <= set(R.CAUSES)
    # nothing measured in a folder without notebooks: no number agrees or is explained by chance; the paper's own
    # inconsistencies are the paper's numbers against each other, whatever the run holds
    own = [r for r in rep.rows if r.key.startswith("INCONSISTENCIES/")]
    assert {r.cause for r in rep.rows if not r.setting and r not in own} == {"not measured here"}
    assert len(own) == len(paper.INCONSISTENCIES) and {r.cause for r in own} == {"paper inconsistency"}


def test_ours_is_the_t_confidence_interval_of_the_mean() -> None:
    e = R.Estimate.of([1.0, 2.0, 3.0], "x")
    half = student_t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert e.value == pytest.approx(2.0) and e.high - e.value == pytest.approx(half, rel=1e-9)
    ci = R.Estimate.from_ci(2.0, 2 - half, 2 + half, 3, "x")  # a mean's CI is kept as it is
    assert ci.high - ci.value == pytest.approx(half)
    assert not R.Estimate.of([1.0], "x").contains(1.0)  # one seed has no interval: nothing "agrees" with it
    assert R.judge(1.0, R.Estimate.of([1.0], "x"))[0] == "inconclusive at n seeds"


M = R.MARGINS["cosine"]


def test_judge_agrees_only_by_equivalence_within_the_margin() -> None:
    wide = R.Estimate(0.014, -0.87, 0.785, 2, "identity map")  # the class run's case: a range nearly the whole axis
    assert R.judge(0.014, wide)[0] == "inconclusive at n seeds"
    assert R.judge(0.014, wide, spread=(-0.9, 0.9))[0] == "inconclusive at n seeds"  # the paper's pairs: context only
    narrow = R.Estimate(0.30, 0.30 - M / 4, 0.30 + M / 4, 3, "ours")
    cause, why = R.judge(0.30 + M / 2, narrow)
    assert cause == "agrees" and f"+-{M:.3g}" in why
    assert R.judge(0.30 + M, narrow)[0] == "inconclusive at n seeds"  # the interval reaches beyond the margin
    assert R.judge(0.30 + 2 * M, narrow)[0] == "unexplained"  # wholly beyond it: a difference, nothing explains it
    with pytest.raises(ValueError, match="kind: unknown value 'pints'"):
        R.judge(0.3, narrow, kind="pints")


def test_a_change_smaller_than_our_noise_is_undetectable_and_not_explained() -> None:
    shift = R.Estimate(0.0, -0.02, 0.02, 3, "shift")
    assert R.judge(0.006, shift, noise=True, kind="cosine change")[0] == "undetectable at our noise"
    assert R.judge(0.006, shift, kind="cosine change")[0] == "inconclusive at n seeds"  # only a reported change
    assert "undetectable at our noise" not in R.EXPLAINED and "inconclusive at n seeds" not in R.EXPLAINED


def _cand(value: float, half: float, cause: str, name: str, change: R.Estimate | None = None) -> R.Candidate:
    return R.Candidate(R.Estimate(value, value - half, value + half, 3, name), cause, name, change)


def test_a_candidate_with_the_same_mean_as_ours_never_wins() -> None:
    """The no-weight-decay case: its range held the paper's -0.015, its mean is ours."""
    ours = R.Estimate(-0.059, -0.064, -0.054, 3, "kit")
    same = _cand(-0.056, 0.045, "protocol", "no weight decay")
    assert R.judge(-0.015, ours, [same], kind="cosine change")[0] == "unexplained"
    paired = _cand(-0.056, 0.045, "protocol", "no weight decay", R.Estimate(0.003, -0.004, 0.010, 3, "paired"))
    cause, why = R.judge(-0.015, ours, [paired], kind="cosine change")
    assert cause == "unexplained" and "not clear of 0" in why


def test_a_candidate_counts_only_towards_the_paper_and_the_closer_one_wins() -> None:
    ours = R.Estimate(0.575, 0.565, 0.585, 3, "ours")
    no_closer = _cand(0.816, 0.01, "window", "another window")  # the class run's 0.70 row: no closer than ours
    assert R.judge(0.70, ours, [no_closer], kind="share")[0] == "unexplained"
    away = _cand(0.45, 0.01, "protocol", "the proxy")
    assert R.judge(0.70, ours, [away], kind="share")[0] == "unexplained"
    far, near = _cand(0.66, 0.01, "protocol", "the proxy"), _cand(0.69, 0.02, "window", "the warmup")
    for order in ([far, near], [near, far]):
        cause, why = R.judge(0.70, ours, order, kind="share")
        assert cause == "window" and "runners-up: the proxy" in why
    cause, why = R.judge(0.70, ours, [far], kind="share")  # 68% of the way, interval misses: the rest is unexplained
    assert cause == "protocol" and "68% [" in why and "rest is unexplained" in why
    short = _cand(0.61, 0.01, "protocol", "the proxy")  # 28% of the way
    assert R.judge(0.70, ours, [short], kind="share")[0] == "unexplained"


def test_scale_needs_a_prediction_interval_holding_the_paper_from_four_sizes() -> None:
    ours = R.Estimate(0.30, 0.29, 0.31, 3, "ours")
    kw = {"axis": "vocabulary", "word": "rises", "slope": 0.02, "low": 0.01, "high": 0.03, "at_paper": 0.45}
    holds = R.Trend(**kw, n_sizes=4, pred_low=0.40, pred_high=0.60)
    misses = R.Trend(**kw, n_sizes=5, pred_low=0.35, pred_high=0.45)
    three = R.Trend(**kw, n_sizes=3, pred_low=0.40, pred_high=0.60)
    no_prediction = R.Trend(**kw, n_sizes=4)  # a table written before the prediction interval
    assert R.judge(0.50, ours, trends=[holds])[0] == "scale"
    for t in (misses, three, no_prediction):
        cause, why = R.judge(0.50, ours, trends=[t])
        assert cause == "unexplained" and "a direction, not a cause" in why


def test_paper_inconsistency_comes_from_the_papers_own_values() -> None:
    ours = R.Estimate(0.80, 0.79, 0.81, 3, "ours")
    assert R.judge(0.83, ours, kind="share", paper_other=(0.70, "its quoted share"))[0] == "paper inconsistency"
    assert R.judge(0.83, ours, kind="share", paper_other=(0.82, "its quoted share"))[0] == "agrees"


def test_counts_group_rows_that_repeat_one_of_our_numbers() -> None:
    e = R.Estimate(0.3, 0.2, 0.4, 2, "ours")
    rows = [R.Row(f"TABLE5/{fam}/x", "Table 5", "q", 0.5, e, e, "unexplained", "", group="ours 0.3")
            for fam in ("a", "b", "c")]
    rows.append(R.Row("TABLE1/a/x", "Table 1", "q", 0.5, e, e, "agrees", "", group="other"))
    rep = R.Reproduction(rows, [], None, None)
    assert rep.comparisons == 2 and rep.causes["unexplained"] == 1 and rep.causes["agrees"] == 1
    assert rep.with_two_causes == 0


def test_a_comparison_with_two_causes_is_counted_under_each_and_said_so() -> None:
    """One number of ours that agrees with one model pair and differs from another counts under both causes; the
    report says how many such comparisons there are, so that counts adding up to more than the comparisons add up."""
    e = R.Estimate(0.544, 0.541, 0.548, 3, "ours")
    rows = [R.Row("TABLE1/a/x", "Table 1", "q", 0.507, e, e, "agrees", "", group="ours 0.544"),
            R.Row("TABLE1/b/x", "Table 1", "q", 0.669, e, e, "reference point", "", group="ours 0.544"),
            R.Row("TABLE5/a/x", "Table 5", "q", 0.5, e, e, "unexplained", "", group="other")]
    rep = R.Reproduction(rows, [], None, None)
    assert rep.comparisons == 2 and rep.with_two_causes == 1 and sum(rep.causes.values()) == 3


def test_a_windows_table_with_a_known_disagreement_gets_its_computed_cause(fresh_run: Run) -> None:
    """The paper's first 100 steps (all inside its warmup) read 90%: ours over the same steps do not, its proxy over
    our warmup does: the cause is the window. Moving that one input changes the row."""
    fresh_run.metrics_dir.mkdir(exist_ok=True)
    shares = {("first 100 steps", "exact l2"): [0.69, 0.70, 0.71], ("first 100 steps", "proxy l2"): [0.75, 0.76, 0.77],
              ("warmup", "exact l2"): [0.86, 0.87, 0.88], ("warmup", "proxy l2"): [0.89, 0.90, 0.91]}
    _windows(fresh_run.path, shares)
    key = "FIG4_LOG_WINDOWS/l2/first 100 steps"
    row = _row(R.build(fresh_run), key)
    assert row.cause == "window" and "proxy l2 over our warmup" in row.why
    assert row.kit.value == pytest.approx(0.70) and row.paper == paper.FIG4_LOG_WINDOWS["l2"]["first 100 steps"]
    shares[("warmup", "proxy l2")] = [0.60, 0.61, 0.62]
    shares[("warmup", "exact l2")] = [0.60, 0.61, 0.62]
    _windows(fresh_run.path, shares)
    assert _row(R.build(fresh_run), key).cause == "unexplained"
    shares[("first 100 steps", "exact l2")] = [0.89, 0.90, 0.91]
    _windows(fresh_run.path, shares)
    assert _row(R.build(fresh_run), key).cause == "agrees"


def test_report_files_escape_text_from_the_run_folder(fresh_run: Run) -> None:
    fresh_run.metrics_dir.mkdir(exist_ok=True)
    bad = "<script>alert(1)</script>|`x`"
    shifts = {R.KIT: ((0.05, 0.03, 0.07), (-0.05, -0.07, -0.03)),  # the paper's +0.006 / -0.015 outside
              bad: ((0.006, 0.0, 0.012), (-0.015, -0.02, -0.01))}  # an ingredient whose range holds them: named
    pd.DataFrame([{"ingredient": name, "k": 5.0, "n_seeds": 3, **{f"{c}{s}": v for c, vals in (
        ("vs_untied_input", ins), ("vs_untied_output", outs)) for s, v in zip(("", "_ci_low", "_ci_high"), vals, strict=True)}}
        for name, (ins, outs) in shifts.items()]).to_csv(fresh_run.table_path("claim4_ingredients"), index=False)
    md = write_reproduction(fresh_run).read_text()
    page = (fresh_run.path / "reproduction.html").read_text()
    data = json.loads((fresh_run.path / "reproduction.json").read_text())
    assert "<script>" not in md and "<script>" not in page and "&lt;script&gt;" in page
    assert any(bad in r["why"] for r in data["rows"])  # the JSON keeps the text as it is
    assert set(data["causes_vocabulary"]) == set(R.CAUSES) and data["environment"]["packages"]["torch"]


def test_cli_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "tiebias", "reproduction", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 2 and "run: " in p.stderr and "not a run folder" in p.stderr


def test_the_smoke_study_writes_a_report_whose_every_row_says_not_meaningful(smoke_study, tmp_path: Path) -> None:
    data = json.loads((smoke_study.path / "reproduction.json").read_text())
    assert data["not_meaningful"] and data["rows"]
    assert all(r["why"].startswith("not meaningful") and not r["meaningful"] for r in data["rows"])
    assert _paper_keys() <= {r["key"] for r in data["rows"]}
    assert {c["kit"] for c in data["claims"]} == {c["paper_protocol"] for c in data["claims"]} == {"not meaningful"}
    assert "Not meaningful" in (smoke_study.path / "reproduction.md").read_text()
    assert 'href="reproduction.html"' in (smoke_study.path / "report.html").read_text()
    assert set(data["compute"]["wall_seconds"]) == {"01_train", "02_align", "03_lens", "04_ablate"}
    assert all(np.isfinite(v) and v > 0 for v in data["compute"]["peak_memory_mib"].values())
    # the rows come from the run's tables: rerun the report on a copy with one table changed, the row changes
    run = Run(shutil.copytree(smoke_study.path, tmp_path / "copy"))
    key = "TABLE2_STEP10K/1.0/vs untied input"
    before = next(r for r in data["rows"] if r["key"] == key)
    t = pd.read_csv(run.table_path("ablation_alignment"))
    t["vs_untied_input"] = 0.216
    t.to_csv(run.table_path("ablation_alignment"), index=False)
    after = next(r for r in R.build(run).rows if r.key == key)
    assert after.kit.value == pytest.approx(0.216) and after.kit.value != pytest.approx(before["kit"]["value"])


def test_04_leaves_the_pages_to_the_study_and_writes_them_in_jupyterlab(smoke_study, monkeypatch) -> None:
    from tiebias.config.environment import STUDY_ENV, in_study

    executed = json.loads((smoke_study.path / "notebooks" / "04_ablate.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "The study command writes summary.json" in printed  # the study wrote them once, after 04
    monkeypatch.delenv(STUDY_ENV, raising=False)
    assert not in_study()  # a kernel JupyterLab starts: 04's last cell writes them (run by nbval on the smoke run)
    monkeypatch.setenv(STUDY_ENV, "1")
    assert in_study()


def test_a_damaged_table_is_named_and_nothing_is_written(fresh_run: Run) -> None:
    from tiebias.run.files import DamagedFileError

    fresh_run.metrics_dir.mkdir(exist_ok=True)
    fresh_run.table_path("claim2_windows").write_text("")  # a write cut short
    with pytest.raises(DamagedFileError, match=r"claim2_windows\.csv: .*not a readable table.*rerun notebook 01_train"):
        write_reproduction(fresh_run)
    assert not (fresh_run.path / "reproduction.md").exists() and not (fresh_run.path / "reproduction.json").exists()


def test_a_run_with_another_knn_k_leaves_table_5_not_measured(fresh_run: Run) -> None:
    """KNN@50 is not the paper's KNN@10: the rows say so instead of failing on the missing column."""
    fresh_run.metrics_dir.mkdir(exist_ok=True)
    rows = [{"comparison": c, "pairing": "cross seed", "seed_source": 0, "seed_target": 1, "knn@50": 0.2,
             "orthogonal": 0.5, "linear": 0.6, "identity": 0.1}
            for c in ("untied input -> tied", "untied output -> tied", "untied input -> untied output")]
    pd.DataFrame(rows).to_csv(fresh_run.table_path("alignment_table1"), index=False)
    t5 = [r for r in R.build(fresh_run).rows if r.source == "Table 5"]
    assert t5 and all(r.cause == "not measured here" and "knn@50" in r.why and "k = 10" in r.why for r in t5)


def test_an_interval_that_cannot_be_computed_is_cannot_be_judged_never_re_or_not_re(fresh_run: Run) -> None:
    """Defect 8: one seed of 04 (no interval of the k = 5 shift) read [¬Re] under the paper's protocol beside a
    record saying "cannot be judged"; a NaN in one of two seeds' proxy shares flipped claim 2 to [¬Re]."""
    from tiebias.verdicts import claims, records

    fresh_run.metrics_dir.mkdir(exist_ok=True)
    nan = float("nan")
    pd.DataFrame([{"ingredient": R.KIT, "k": 5.0, "n_seeds": 1, "vs_untied_input": 0.05, "vs_untied_input_ci_low": nan,
                   "vs_untied_input_ci_high": nan, "vs_untied_output": -0.05, "vs_untied_output_ci_low": nan,
                   "vs_untied_output_ci_high": nan}]).to_csv(fresh_run.table_path("claim4_ingredients"), index=False)
    records.record(fresh_run, records.Headline("claim4_causality", value=nan, threshold=1.0, statement="one seed",
                                               status=claims.ONE_SEED_STATUS))
    for proxy in ([0.9, nan], [0.9]):
        _windows(fresh_run.path, {("warmup", "proxy l2"): proxy, ("warmup", "exact l2"): [0.8] * len(proxy)})
        lines = {c["claim"][0]: c for c in R.claim_lines(R.Evidence.load(fresh_run))}
        assert lines["4"]["kit"] == claims.ONE_SEED_STATUS
        for n in "24":
            assert lines[n]["paper_protocol"].startswith("cannot be judged ("), (proxy, lines[n])
    md = write_reproduction(fresh_run).read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and ("imbalance |" in line or "causality |" in line)]
    assert len(rows) == 2 and not any("Re]" in r for r in rows) and all("cannot be judged (" in r for r in rows)
    _windows(fresh_run.path, {("warmup", "proxy l2"): [0.9, 0.91], ("warmup", "exact l2"): [0.8, 0.8]})
    assert R.claim_lines(R.Evidence.load(fresh_run))[1]["paper_protocol"] == "[Re]"  # an interval: judged


def test_the_median_ratio_is_judged_per_tied_model_with_the_proxy_as_candidate(fresh_run: Run) -> None:
    """Ours was one number pooled over seeds (no interval: nothing could be said); each tied model's log gives one."""
    fresh_run.metrics_dir.mkdir(exist_ok=True)
    steps = np.arange(1, 11)
    for seed, (exact, proxy) in enumerate(((1.2, 4.2), (1.3, 4.4))):
        pd.DataFrame({"step": steps, "output_norm": 1.0, "input_norm": 1 / exact, "proxy_input_norm": 1 / proxy}) \
            .to_csv(fresh_run.table_path(f"tied-s{seed}"), index=False)
    rec = {"claim2_gradient_flow": {"details": {"median_out_in_ratio": 1.25, "first_n": 10},
                                    "models": {"tied-s0": "x", "tied-s1": "y"}}}
    row = _row(R.Reproduction(R.figure4_rows(R.Evidence(fresh_run, rec, {})), [], None, None),
               "FIG4_OUTPUT_SHARE/median_out_in_ratio")
    assert row.kit.n == 2 and row.kit.value == pytest.approx(1.25) and row.kit.low < 1.25 < row.kit.high
    assert row.cause == "protocol" and "proxy input norm" in row.why and row.paper_protocol.value == pytest.approx(4.3)
    rec["claim2_gradient_flow"]["models"] = {"../metrics/tied-s0": "x", "tied-s1": "y"}  # a path, not a model name
    row = _row(R.Reproduction(R.figure4_rows(R.Evidence(fresh_run, rec, {})), [], None, None),
               "FIG4_OUTPUT_SHARE/median_out_in_ratio")
    assert row.kit.n == 1 and "pooled" in row.kit.label  # the record's own value; no file outside metrics/ is read


def _scale_run(path: Path, recipe: dict, trends: bool) -> Run:
    """A folder standing for a run: its config, a tied model's train_config.json and (``trends``) a scale_trends table
    with one fitted line for claim 1's gap."""
    run = Run(path)
    (path / "models" / "tied-s0").mkdir(parents=True, exist_ok=True)
    (path / "models" / "tied-s0" / "train_config.json").write_text(json.dumps(recipe))
    if not run.config_path.exists():
        run.config_path.write_text(json.dumps({"corpus": "shakespeare", "study": {"profile": "scale"}}))
    if trends:
        (path / "metrics").mkdir(exist_ok=True)
        pd.DataFrame([{"quantity": "claim1_gap", "axis": "width", "sizes": "[64, 128, 256]", "n": 6, "word": "falls",
                       "slope": -0.02, "ci_low": -0.03, "ci_high": -0.01, "at_paper": 0.1, "pred_low": 0.0,
                       "pred_high": 0.2}]).to_csv(run.table_path("scale_trends"), index=False)
    return run


def test_scale_accepts_only_a_scale_run_of_the_same_corpus_and_recipe(fresh_run: Run, tmp_path: Path) -> None:
    """Defect 10: a smoke run of another preset given as --scale was used unmarked; a scale run without trends was
    ignored silently and the run's own trends dropped."""
    recipe = {"corpus_fingerprint": "abc", "family": "llama", "steps": 300, "batch_size": 16, "seq_len": 128,
              "lr": 3e-3, "warmup_steps": 20, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0,
              "min_lr_ratio": 0.1, "preset": "mini", "vocab_size": 1024}
    run = _scale_run(fresh_run.path, recipe, trends=True)
    other = _scale_run(tmp_path / "smoke", {**recipe, "steps": 40, "batch_size": 8, "preset": "tiny"}, trends=True)
    with pytest.raises(ValueError, match=r"--scale: .*smoke is not a scale run of this run's corpus and recipe "
                                         r"\(steps 40 there, 300 here; batch_size 8 there, 16 here\)"):
        R.build(run, other)
    p = subprocess.run([sys.executable, "-m", "tiebias", "reproduction", str(run.path), "--scale", str(other.path)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "is not a scale run of this run's corpus and recipe" in p.stderr, p.stderr
    assert not (run.path / "reproduction.md").exists()
    bare = _scale_run(tmp_path / "bare", {**recipe, "preset": "small", "vocab_size": 4096}, trends=False)
    ev = R.Evidence.load(run, bare)
    assert f"--scale {bare.path} has no scale trends" in ev.scale_source
    assert [t.axis for t in ev.trends("claim1_gap")] == [f"width (scale run {run.path})"]  # its own, kept
    assert "has no scale trends" in write_reproduction(run, bare).read_text()
    scale = _scale_run(tmp_path / "scale", {**recipe, "preset": "small", "vocab_size": 4096}, trends=True)
    ev = R.Evidence.load(run, scale)
    assert [t.axis for t in ev.trends("claim1_gap")] == [f"width (scale run {run.path})",
                                                         f"width (scale run {scale.path})"]
    assert str(scale.path) in ev.scale_source
