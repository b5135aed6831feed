"""Claim 3 under both lens protocols: the lens_protocols parameter, the ladder table's protocol rows, the
four-reading decomposition, and the second claim-3 record."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tiebias.config import choices, profiles
from tiebias.config.choices import LENS_PROTOCOLS
from tiebias.config.lens import LensSettings
from tiebias.config.params import PARAMS, coerce
from tiebias.lens import evaluate as lens_eval
from tiebias.lens import ladder as lens_ladder
from tiebias.lens import lenses as tl
from tiebias.lens import readings as lens_readings
from tiebias.lens import tables as lens_study
from tiebias.output import report
from tiebias.output.plotting import lens as lplot
from tiebias.run.folder import Run
from tiebias.verdicts import claims, records

LENS = LensSettings(steps=6, tokens_per_step=256, seq_len=32, eval_tokens=256)  # as tests/test_lens_study.py: the
# same cached lenses
BOTH = ["package", "reference"]
LENS_PARAMS = {"lens_steps": 2, "lens_tokens_per_step": 128, "lens_eval_tokens": 128, "lens_depth_presets": []}
METRICS = ["kl_tuned_bits", "kl_logit_bits", "ce_tuned_nats", "ce_logit_nats", "ce_model_nats"]


def test_schema_protocols_are_the_evaluation_protocols(tmp_path: Path) -> None:
    assert LENS_PROTOCOLS == choices.LENS_PROTOCOLS == tuple(BOTH)
    with pytest.raises(ValueError, match=f"^protocol: 'paper' is not allowed; allowed: {', '.join(LENS_PROTOCOLS)}$"):
        lens_eval.evaluate(None, None, protocol="paper")  # type: ignore[arg-type]  # the evaluation's own check
    assert coerce("lens_protocols", "package,reference") == BOTH
    # by default (a profile that does not set them) every lens is read both ways
    assert PARAMS["lens_protocols"].default == BOTH
    text = "".join(line for line in (profiles.PROFILE_DIR / "default.toml").read_text().splitlines(keepends=True)
                   if not line.startswith("lens_protocols"))
    (tmp_path / "mine.toml").write_text(text)
    params = profiles.resolve(tmp_path / "mine.toml", tmp_path / "run", **LENS_PARAMS)
    assert params["lens_protocols"] == BOTH and LensSettings.from_params(params).protocols == tuple(BOTH)


@pytest.mark.parametrize(("value", "why"), [
    (["paper"], "'package' or 'reference'"), (["package", "package"], "repeated"), ([], "one or more"),
    ("package,bogus", "'package' or 'reference'"), (3, "'package' or 'reference'"),
])
def test_bad_lens_protocols_are_named(value: object, why: str) -> None:
    with pytest.raises(ValueError, match="^lens_protocols: ") as e:
        coerce("lens_protocols", value)
    assert why in str(e.value)
    with pytest.raises(ValueError, match="^lens_protocols: "):
        profiles.resolve("default", "/tmp/x", **LENS_PARAMS, lens_protocols=value)
    with pytest.raises(ValueError, match="^lens_protocols: "):
        LensSettings(protocols=value)  # type: ignore[arg-type]


def test_bad_protocols_refused_before_anything_is_written(two_seed_run: Run, tmp_path: Path) -> None:
    model = two_seed_run.load_model("tied", 0)
    folder = tmp_path / "lens"
    with pytest.raises(ValueError, match="^lens_protocols: .*'paper'"):
        lens_ladder.train_model_lens_ladders(model, two_seed_run.tokens("validation"), two_seed_run.tokens("test"),
                                             folder, LENS.replace(protocols=["package", "paper"]), progress=False)
    assert not folder.exists()


def test_train_model_lens_ladders_reads_every_lens_both_ways_and_keeps_the_package_rows(two_seed_run: Run, tmp_path: Path) -> None:
    model = two_seed_run.load_model("tied", 0)
    val, test = two_seed_run.tokens("validation"), two_seed_run.tokens("test")
    lens = LENS.replace(budgets=(1, 2))
    both = lens_ladder.train_model_lens_ladders(model, val, test, tmp_path / "both", lens.replace(protocols=BOTH),
                                                progress=False)
    plain = lens_ladder.train_model_lens_ladders(model, val, test, tmp_path / "plain", lens,
                                                 progress=False)  # no protocols given: package only
    assert list(dict.fromkeys(both.protocol)) == BOTH and set(plain.protocol) == {"package"}
    pkg = lens_study.at_protocol(both, "package")
    assert len(pkg) == len(plain) and (pkg.columns == plain.columns).all()
    np.testing.assert_array_equal(pkg[METRICS].to_numpy(), plain[METRICS].to_numpy())  # same lens, same numbers
    # each protocol's rows are lens_eval.evaluate's reading of that rung's lens
    lens = tl.load_lens(model, lens_ladder.rung_dir(tmp_path / "both", "cpu", 2))
    for protocol in BOTH:
        want = lens_eval.evaluate(model, test, lens, seq_len=32, max_tokens=256, per_sequence=True, protocol=protocol)
        got = both[(both.protocol == protocol) & (both.budget == 2)].reset_index(drop=True)
        for col in METRICS:
            np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=1e-6, atol=1e-8)
    ref = lens_study.at_protocol(both, "reference")
    assert not np.allclose(ref.kl_tuned_bits, pkg.kl_tuned_bits)  # the readings differ
    # the package reading keeps its cache file name (runs made before protocols are not evaluated again)
    rung = lens_ladder.rung_dir(tmp_path / "both", "cpu", 1)
    assert (rung / "eval_256x32.csv").is_file() and (rung / "eval_256x32_reference.csv").is_file()
    assert lens_ladder.eval_name(256, 32, "package") == "eval_256x32.csv"
    # per_layer keeps the protocols apart
    assert len(lens_study.per_layer(both)) == 2 * len(lens_study.per_layer(plain))


def test_at_protocol() -> None:
    import pandas as pd

    df = pd.DataFrame({"protocol": ["package", "reference"], "x": [1, 2]})
    assert lens_study.at_protocol(df, "reference").x.tolist() == [2]
    with pytest.raises(ValueError, match="^protocol: 'other' not in the table"):
        lens_study.at_protocol(df, "other")
    old = df.drop(columns="protocol")
    assert lens_study.at_protocol(old).equals(old)
    with pytest.raises(ValueError, match="^protocol: 'reference'"):
        lens_study.at_protocol(old, "reference")


@pytest.fixture(scope="module")
def readings_tables(two_seed_run: Run):
    """The verdict ladder and a (shortened) reference-budget ladder of the two-seed run, both protocols."""
    lens = LENS.replace(protocols=BOTH)
    kw = dict(progress=False, per_sequence=True)
    seq = lens_ladder.train_lens_ladders(two_seed_run, ["tied", "untied"], [0, 1], lens, **kw)
    ref_budget = lens.replace(**lens_readings.REFERENCE_BUDGET_LADDER)
    assert (ref_budget.recipes, ref_budget.budgets, ref_budget.steps) == (("package",), (1,), 100)
    ref = lens_ladder.train_lens_ladders(two_seed_run, ["tied", "untied"], [0, 1],
                                         ref_budget.replace(steps=3),  # 100 steps in a study
                                         subdir=lens_ladder.REFERENCE_BUDGET, **kw)
    return seq, ref


def test_decomposition_has_four_finite_readings(readings_tables, two_seed_run: Run) -> None:
    seq, ref = readings_tables
    assert set(ref.recipe) == {"package"} and set(ref.lens_steps) == {3}
    assert (two_seed_run.lens_dir("tied", 0) / lens_ladder.REFERENCE_BUDGET / "package-x1" / "params.pt").is_file()
    # the extra ladder reads its main ladder's logit-lens evaluations (same model, tokens and protocol): none of its own
    for v in ("tied", "untied"):
        assert not list((two_seed_run.lens_dir(v, 0) / lens_ladder.REFERENCE_BUDGET).rglob("logit_*"))
    keys = ["variant", "seed", "protocol", "sequence", "layer"]
    both = seq[[*keys, "kl_logit_bits", "ce_logit_nats"]].merge(ref[[*keys, "kl_logit_bits", "ce_logit_nats"]], on=keys)
    assert len(both) == len(ref)
    for col in ("kl_logit_bits", "ce_logit_nats"):
        np.testing.assert_array_equal(both[f"{col}_x"].to_numpy(), both[f"{col}_y"].to_numpy())
    table, layers = lens_readings.decomposition(seq, ref)
    assert table.reading.tolist() == ["a", "b", "c", "d"]
    assert table.protocol.tolist() == ["package", "reference", "package", "reference"]
    assert table.lens_steps.tolist() == [6, 6, 3, 3]
    for col in ("gap", "ci_low", "ci_high", "tied_l0", "untied_l0", "tied_l1", "untied_l1"):
        assert np.isfinite(table[col]).all(), col
    # (a) is the package verdict's gap; (b) the reference verdict's
    assert table.gap.iloc[0] == pytest.approx(claims.claim3(seq).value)
    assert table.gap.iloc[1] == pytest.approx(claims.claim3(seq, protocol="reference").value)
    assert set(layers.reading) == {"a", "b", "c", "d"} and len(layers) == 4 * 3
    assert (table.paper_gap_l0.iloc[0], table.paper_gap_l1.iloc[0]) == pytest.approx((1.85, 2.97))
    fig = lplot.readings(layers, table)
    assert len(fig.data) == 4 * 2 and "(d)" in fig.layout.annotations[3].text


def test_second_claim3_record_beside_the_first(readings_tables, fresh_run: Run) -> None:
    seq, _ = readings_tables
    v_pkg = claims.claim3(seq)
    assert v_pkg.claim == "claim3_tuned_lens"
    same = claims.claim3(lens_study.at_protocol(seq, "package"))  # filtered explicitly: the same verdict
    assert (same.value, same.threshold, same.text) == (v_pkg.value, v_pkg.threshold, v_pkg.text)
    v_ref = claims.claim3(seq, protocol="reference")
    assert v_ref.claim == "claim3_tuned_lens_reference" and v_ref.details["protocol"] == "reference"
    assert math.isfinite(v_ref.value) and v_ref.value != v_pkg.value
    assert v_ref.text.startswith("Lenses read with the 'reference' protocol")
    for v in (v_pkg, v_ref):
        claims.record(fresh_run, v)
    stored = records.results(fresh_run)
    assert {"claim3_tuned_lens", "claim3_tuned_lens_reference"} <= set(stored)
    assert stored["claim3_tuned_lens_reference"]["value"] == pytest.approx(v_ref.value)
    with pytest.raises(ValueError, match="^protocol: 'paper' is not allowed"):
        claims.claim3(seq, protocol="paper")
    assert "claim3_tuned_lens_reference" in records.CLAIMS and records.NOTEBOOK_OF["claim3_tuned_lens_reference"] == "03_lens"


def test_report_lists_both_readings_and_says_which_the_paper_uses(fresh_run: Run) -> None:
    records.record(fresh_run, records.Headline("claim3_tuned_lens_reference", value=0.3, threshold=0.1, statement="s",
                                               unit="bits"))
    page = report.write_report(fresh_run).read_text()
    assert "(Figure 2) come from the paper's reading" in page
    assert "hidden state i through translator i - 1" in page and "not run" in page  # the other claims: not yet


def test_external_pair_gets_both_protocols_and_the_four_readings(two_seed_run: Run) -> None:
    from tiebias.models import sources

    models = sources.load_models({"tied": two_seed_run.model_path("tied", 0),
                                  "untied": two_seed_run.model_path("untied", 0)})
    lens = LENS.replace(protocols=BOTH)
    kw = dict(progress=False, per_sequence=True, folder=two_seed_run.path / "external")
    seq, _ = lens_ladder.train_pair_lens_ladders(models, None, lens, **kw)
    ref_lens = lens.replace(**lens_readings.REFERENCE_BUDGET_LADDER).replace(steps=3)
    ref, lenses = lens_ladder.train_pair_lens_ladders(models, None, ref_lens,
                                                      subdir=lens_ladder.REFERENCE_BUDGET, **kw)
    assert list(dict.fromkeys(seq.protocol)) == BOTH and set(ref.lens_steps) == {3} and set(lenses) == {"tied", "untied"}
    assert not list((two_seed_run.path / "external").rglob(f"{lens_ladder.REFERENCE_BUDGET}/logit_*"))  # the main ladder's
    table, _ = lens_readings.decomposition(seq, ref, paired=False)  # one pair: bootstrap over sequences
    assert len(table) == 4 and np.isfinite(table[["gap", "ci_low", "ci_high"]].to_numpy()).all()
    assert table.method.str.startswith("one pair").all()
