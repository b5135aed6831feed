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
    # nothing measured in a folder without notebooks: no number agrees or is explained by chance
    assert {r.cause for r in rep.rows if not r.setting} == {"not measured here"}


def test_one_run_range_is_the_t_prediction_interval() -> None:
    e = R.Estimate.of([1.0, 2.0, 3.0], "x")
    half = student_t.ppf(0.975, 2) * 1.0 * math.sqrt(1 + 1 / 3)
    assert e.value == pytest.approx(2.0) and e.high - e.value == pytest.approx(half, rel=1e-9)
    ci = R.Estimate.from_ci(2.0, 2 - half / 2, 2 + half / 2, 3, "x")  # a mean's CI half-width times sqrt(n + 1)
    assert ci.high - ci.value == pytest.approx(half)
    assert not R.Estimate.of([1.0], "x").contains(1.0)  # one seed has no range: nothing "agrees" with it


def test_judge_names_each_cause_by_its_rule() -> None:
    ours = R.Estimate(0.30, 0.28, 0.32, 3, "ours")
    assert R.judge(0.31, ours)[0] == "agrees"
    assert R.judge(0.50, ours, spread=(0.25, 0.6))[0] == "agrees"
    cand = R.Candidate(R.Estimate(0.5, 0.45, 0.55, 3, "c"), "window", "another window")
    assert R.judge(0.52, ours, [cand])[0] == "window"
    partial = R.Candidate(R.Estimate(0.45, 0.44, 0.46, 3, "c"), "protocol", "the proxy")
    cause, why = R.judge(0.50, ours, [partial])
    assert cause == "protocol" and "75%" in why and "rest is unexplained" in why
    towards = R.Trend("vocab", "rises", 0.02, 0.01, 0.03, 0.45)
    away = R.Trend("vocab", "falls", -0.02, -0.03, -0.01, 0.1)
    flat = R.Trend("vocab", "no trend", 0.02, -0.01, 0.05, 0.45)
    assert R.judge(0.50, ours, trends=[towards])[0] == "scale"
    assert R.judge(0.50, ours, trends=[away, flat])[0] == "unexplained"
    assert R.judge(0.004, R.Estimate(0.06, -0.01, 0.13, 3, "shift"), noise=True)[0] == "agrees"
    far = R.Estimate(0.2, 0.15, 0.25, 3, "s")  # one run's noise +-0.05
    assert R.judge(0.1, far, noise=True)[0] == "unexplained"
    assert R.judge(0.04, far, noise=True)[0] == "seed noise"
    assert R.judge(0.04, far)[0] == "unexplained"  # only a change the paper reports is judged against noise


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
    with pytest.raises(DamagedFileError, match="claim2_windows.csv: not a readable table"):
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
