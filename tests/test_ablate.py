import math
from dataclasses import replace

import pytest

from tiebias import stats
from tiebias.ablate import sweep as ablate
from tiebias.config.variants import Variant
from tiebias.run.folder import Run
from tiebias.verdicts import claims, records


@pytest.mark.parametrize("bad,msg", [
    ([0], "0 is not allowed"), ([-2], "-2 is not allowed"), ([float("nan")], "nan"), (["x"], "'x' is not a number"),
    ([], "empty"), ([1, 1], "a factor is repeated"), (None, "not a list"), ([True], "not a number"),
])
def test_bad_factors(bad, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        ablate.check_factors(bad, "ablate_factors")


def test_the_sweep_and_the_schema_share_the_factor_rule() -> None:
    from tiebias.config import profiles
    from tiebias.config.training import DOSE_RESPONSE_FACTORS

    assert ablate.check_factors([5]) == [5.0]  # the library may sweep one factor
    with pytest.raises(ValueError, match=r"^ablate_factors: \[5\] is not allowed; need at least 2 factors") as sweep:
        ablate.check_factors([5], "ablate_factors", DOSE_RESPONSE_FACTORS)  # a dose-response needs two, as 04's
    with pytest.raises(ValueError, match=r"^ablate_factors: \[5\] is not allowed; ") as schema:
        profiles.resolve("smoke", "/tmp/never", ablate_factors=[5])
    assert str(sweep.value) == str(schema.value)


def test_factors_and_variants() -> None:
    assert ablate.check_factors([5, 1, 2]) == [1.0, 2.0, 5.0]
    vs = ablate.sweep_variants([1, 5])
    assert [v.name for v in vs] == ["tied", "tied_in5"]
    assert [v.name for v in ablate.sweep_variants([2], inverse_output=True)] == ["tied_in2_out0.5"]


def test_sweep_end_to_end(fresh_run: Run, tiny_config) -> None:
    cfg = replace(tiny_config, steps=8, checkpoint_every=4)
    variants = ablate.sweep_variants([1, 10])
    plan = ablate.plan(fresh_run, variants, [0, 1], cfg)
    assert len(plan) == 6 and plan.attrs["to_train"] == 6 and plan.attrs["estimated_seconds"] > 0
    with pytest.warns(UserWarning, match="over the budget"):
        ablate.plan(fresh_run, variants, [0, 1], cfg, budget_minutes=1e-6)
    ablate.run_sweep(fresh_run, variants, [0, 1], cfg, progress=False)
    assert ablate.plan(fresh_run, variants, [0, 1], cfg).attrs["to_train"] == 0
    # factors are recorded with every model and its metrics
    assert fresh_run.summary("tied_in10", 1)["variant"] == "tied_in10"
    assert (fresh_run.metrics("tied_in10", 1).input_factor == 10).all()
    steps = ablate.common_steps(fresh_run, variants, [0, 1])
    assert steps == [0, 1, 2, 4, 8]
    table = ablate.alignment_table(fresh_run, variants, [0, 1], steps=[0, None])
    assert set(table.k) == {1.0, 10.0} and set(table.step) == {0, 8} and len(table) == 2 * 2 * 2 * 2
    assert table[["vs_untied_input", "vs_untied_output"]].abs().le(1 + 1e-5).all().all()
    # at step 0 every tied model equals the untied input matrix: orthogonal cosine 1
    s0 = table[(table.step == 0)]
    assert s0.vs_untied_input.min() > 0.999
    cross = ablate.alignment_table(fresh_run, variants, [0, 1], steps=[0], reference="cross")
    assert (cross.reference_seed != cross.seed).all() and cross.vs_untied_input.max() < 0.99
    with pytest.raises(ValueError, match="reference: 'cross' needs at least two seeds"):
        ablate.alignment_table(fresh_run, variants, [0], reference="cross")
    summ = stats.over_seeds(table, ["vs_untied_input"], ["k", "step", "method"])
    assert (summ[("vs_untied_input", "n")] == 2).all()
    verdict = claims.dose_response(table, "orthogonal")
    assert verdict["step"] == 8 and verdict["seeds"] == 2
    assert isinstance(verdict["claim4_holds"], bool)
    ppl = ablate.perplexities(fresh_run, variants, [0], seq_len=cfg.seq_len, max_tokens=512)
    assert len(ppl) == 3 and (ppl.validation_ppl > 1).all() and math.isnan(ppl[~ppl.tied].k.iloc[0])
    shares = ablate.gradient_shares(fresh_run, variants, [0, 1])
    assert shares.groupby("k").output_share.mean().is_monotonic_decreasing


def test_verdict_needs_two_factors(fresh_run: Run) -> None:
    import pandas as pd

    t = pd.DataFrame({"k": [1.0, 1.0], "seed": [0, 1], "step": [4, 4], "method": ["orthogonal"] * 2,
                      "vs_untied_input": [0.1, 0.2], "vs_untied_output": [0.3, 0.4]})
    with pytest.raises(ValueError, match="at least two different k"):
        claims.dose_response(t)
    assert Variant.parse("tied_in1") == Variant(True)


def _dose_table(seeds: int, rise: float, fall: float, sd: float = 0.01):
    """An ablation table with k = 1, 5: the input cosine rises by ``rise``, the output cosine falls by ``fall``;
    seeds spread symmetrically with standard deviation about ``sd``."""
    import numpy as np
    import pandas as pd

    offs = np.linspace(-1, 1, seeds) * sd * (1.0 if seeds > 1 else 0.0)
    if seeds > 1:
        offs = offs / offs.std(ddof=1) * sd
    rows = [{"k": k, "seed": s, "step": 10, "method": "orthogonal",
             "vs_untied_input": 0.2 + (rise if k > 1 else 0.0) + offs[s],
             "vs_untied_output": 0.5 - (fall if k > 1 else 0.0) - offs[s]}
            for k in (1.0, 5.0) for s in range(seeds)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seeds", [2, 3])
@pytest.mark.parametrize("mult,holds", [(1.2, True), (0.8, False), (-1.0, False)])
def test_claim4_rule_same_in_text_and_record(tmp_path, seeds, mult, holds) -> None:
    """Several seeds: the change in units of 2 seed sd decides, just above / below 1; text and record agree."""
    sd = 0.01
    table = _dose_table(seeds, rise=mult * 2 * sd, fall=3 * 2 * sd, sd=sd)
    v = claims.claim4(table, ["orthogonal"], "same")
    assert v.value == pytest.approx(mult, rel=1e-6) and v.threshold == 1.0
    assert v.holds is holds and v.status == ("holds" if holds else "does not hold")
    assert ("HOLDS in this run" in v.text) is holds and ("does NOT hold in this run" in v.text) is (not holds)
    run = Run(tmp_path / "r")
    entry = claims.record(run, v)
    assert entry["verdict"] is holds and entry["above_threshold"] is holds and entry["status"] == v.status


@pytest.mark.parametrize("rise", [0.05, -0.05])
def test_claim4_one_seed_cannot_be_judged_in_text_and_record(tmp_path, rise) -> None:
    """One seed: no noise to compare with, so neither 'holds' nor 'does not hold', whatever the change's sign."""
    import json

    v = claims.claim4(_dose_table(1, rise=rise, fall=0.05), ["orthogonal"], "same")
    assert math.isnan(v.value) and not v.holds and v.status == claims.ONE_SEED_STATUS
    assert "HOLD" not in v.text and "CANNOT BE JUDGED" in v.text
    run = Run(tmp_path / "r")
    entry = claims.record(run, v)
    assert entry["verdict"] is None and entry["status"] == claims.ONE_SEED_STATUS and entry["value"] is None
    stored = json.loads(run.result_path("claim4_causality").read_text())
    assert stored["value"] is None and stored["null_reasons"]["value"] == claims.ONE_SEED_STATUS
    assert stored["verdict"] is None and stored["above_threshold"] is None


def test_record_refuses_nan_without_a_status(tmp_path) -> None:

    with pytest.raises(ValueError, match="value: nan is not a finite number"):
        records.record(Run(tmp_path / "r"), records.Headline("claim4_causality", value=float("nan"), threshold=1.0, statement="x"))
