"""The rule above the four claims: a plumbing profile, or models not below the unigram baseline, make every
verdict "not meaningful" (summary record, printed text, report page)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tiebias.data import tokens
from tiebias.output import report
from tiebias.run.folder import Run
from tiebias.verdicts import claims, evidence, records
from tiebias.verdicts.status import NOT_MEANINGFUL

UNIGRAM = 6.0
HAIR = 1e-3
"""A loss difference far below anything a training change moves (tens of millinats to nats), yet strictly below."""


def _fake_models(run: Run, losses: dict[str, float | None]) -> None:
    """Finished-model markers with the given final validation losses (the rule reads nothing else)."""
    for key, loss in losses.items():
        d = run.models_dir / key
        d.mkdir(parents=True, exist_ok=True)
        (d / "complete.json").write_text(json.dumps({"complete": True, "key": key, "final_val_loss": loss}))


def _unigram(run: Run) -> float:
    return tokens.unigram_loss(run.frequencies(), run.tokens("validation"))


def _verdict() -> claims.Verdict:
    return claims.Verdict("claim2_gradient_flow", value=0.8, threshold=0.5, unit="output share",
                          statement="output path carried 80%", text="Claim 2 holds in this run.")


def test_a_hair_below_the_baseline_beats_it() -> None:
    assert evidence.short_of({"tied-s0": UNIGRAM - HAIR, "untied-s0": UNIGRAM - 1.0}, UNIGRAM, "unigram") is None


@pytest.mark.parametrize("loss", [UNIGRAM, UNIGRAM + HAIR, 9.0, math.nan, None])
def test_a_model_at_or_above_the_baseline_is_named(loss: float | None) -> None:
    why = evidence.short_of({"tied-s0": UNIGRAM - 1.0, "untied-s1": loss}, UNIGRAM, "unigram")
    assert why is not None and why.startswith("1 of 2 models do not beat the unigram baseline of 6.000 nats")
    assert "untied-s1" in why and "tied-s0" not in why.replace("untied-s1", "")
    assert ("missing" if loss is None else f"{loss:.3f}") in why


def test_run_rule_reads_the_models_and_the_profile(fresh_run: Run, tmp_path: Path) -> None:
    assert evidence.not_meaningful(Run(tmp_path / "pair")) is None  # no study record: an external pair's folder
    u = _unigram(fresh_run)
    _fake_models(fresh_run, {"tied-s0": u - HAIR, "untied-s0": u - 0.5})
    assert evidence.not_meaningful(fresh_run) is None
    fresh_run.update_config(study={"profile": "class"})
    assert evidence.not_meaningful(fresh_run) is None
    _fake_models(fresh_run, {"untied-s0": u + HAIR})
    assert "untied-s0" in evidence.not_meaningful(fresh_run)
    _fake_models(fresh_run, {"untied-s0": u - 0.5})
    fresh_run.update_config(study={"profile": "smoke"})  # models that learned do not make a plumbing run evidence
    assert "'smoke' profile is a plumbing check" in evidence.not_meaningful(fresh_run)
    fresh_run.update_config(study={"profile": "lib/tiebias/profiles/smoke.toml"})  # the same profile by its path
    assert "'smoke' profile is a plumbing check" in evidence.not_meaningful(fresh_run)


def test_record_in_a_smoke_run_says_not_meaningful_everywhere(fresh_run: Run) -> None:
    fresh_run.update_config(study={"profile": "smoke"})
    v = _verdict()
    e = claims.record(fresh_run, v)
    assert e["status"] == v.status == NOT_MEANINGFUL and "plumbing check" in e["not_meaningful"]
    assert e["details"]["reading"] == "holds" and e["above_threshold"] is True  # the comparison and reading stay
    assert e["verdict"] is None  # not evidence: neither yes nor no, the status says why
    assert v.text.startswith("NOT MEANINGFUL: these numbers cannot be read as evidence") and v.text.endswith("holds in this run.")
    claims.record(fresh_run, v)  # recorded again (a rerun cell): one banner, the rule's reading kept
    assert v.text.count("NOT MEANINGFUL") == 1 and v.details["reading"] == "holds"
    stored = json.loads(fresh_run.result_path("claim2_gradient_flow").read_text())
    assert stored["status"] == NOT_MEANINGFUL and stored["details"]["reading"] == "holds" and stored["verdict"] is None
    summary = json.loads(report.write_summary(fresh_run).read_text())
    assert summary["claims"]["claim2_gradient_flow"]["status"] == NOT_MEANINGFUL
    assert summary["claims"]["claim2_gradient_flow"]["verdict"] is None
    page = report.write_report(fresh_run).read_text()
    assert "<i>not meaningful</i>" in page and "<b>holds</b>" not in page
    assert "cannot be read as evidence" in page and "plumbing check" in page


def test_record_in_a_run_that_learned_keeps_the_verdict(fresh_run: Run) -> None:
    fresh_run.update_config(study={"profile": "class"})
    _fake_models(fresh_run, {"tied-s0": _unigram(fresh_run) - HAIR})
    v = _verdict()
    e = claims.record(fresh_run, v)
    assert e["status"] == "holds" and v.status is None and "not_meaningful" not in e
    assert e["verdict"] is True and e["above_threshold"] is True
    assert v.text == "Claim 2 holds in this run."
    page = report.write_report(fresh_run).read_text()
    assert "<b>holds</b>" in page and "cannot be read as evidence" not in page


def test_a_value_that_cannot_exist_keeps_its_own_null_reason(fresh_run: Run) -> None:
    e = records.record(fresh_run, records.Headline("claim4_causality", value=math.nan, threshold=1.0, statement="s", status=claims.ONE_SEED_STATUS), not_meaningful="a plumbing run")
    stored = json.loads(fresh_run.result_path("claim4_causality").read_text())
    assert e["status"] == stored["status"] == NOT_MEANINGFUL and stored["value"] is None
    assert stored["null_reasons"]["value"] == claims.ONE_SEED_STATUS
    with pytest.raises(ValueError, match="^not_meaningful: ''"):
        records.record(fresh_run, records.Headline("claim4_causality", value=1.5, threshold=1.0, statement="s"), not_meaningful="")


@pytest.mark.parametrize(("loss", "short"), [(4.0 - HAIR, False), (4.0, True), (4.5, True), (math.nan, True)])
def test_a_layerwise_claim_needs_models_below_the_bigram_baseline(loss: float, short: bool) -> None:
    why = evidence.short_of({"tied-s0": 3.0, "untied-s0": loss}, 4.0, "bigram")
    assert (why is not None) is short
    if short:
        assert why.startswith("1 of 2 models do not beat the bigram baseline of 4.000 nats") and "untied-s0" in why


def test_between_the_baselines_only_claim_3_is_not_evidence(fresh_run: Run) -> None:
    fresh_run.update_config(study={"profile": "class", "seq_len": 32, "eval_tokens": 512})
    u, b = _unigram(fresh_run), evidence.validation_bigram(fresh_run)
    assert b < u  # text has context: a count bigram beats the unigram on the same data
    _fake_models(fresh_run, {"tied-s0": (u + b) / 2, "untied-s0": b - HAIR})
    assert evidence.not_meaningful(fresh_run) is None
    assert evidence.not_meaningful(fresh_run, "claim2_gradient_flow") is None
    for claim in evidence.LAYERWISE:
        why = evidence.not_meaningful(fresh_run, claim)
        assert why is not None and "bigram baseline" in why and "tied-s0" in why.replace("untied-s0", "")
    v = claims.Verdict("claim3_tuned_lens", value=0.3, threshold=0.0, unit="bits", statement="gap", text="Claim 3 holds.")
    assert claims.record(fresh_run, v)["status"] == NOT_MEANINGFUL and v.text.startswith("NOT MEANINGFUL")
    _fake_models(fresh_run, {"tied-s0": b - HAIR})
    assert evidence.not_meaningful(fresh_run, "claim3_tuned_lens") is None
    page = report.write_report(fresh_run).read_text()
    assert "Did the models learn?" in page and "bigram baseline (one token of context" in page and f"{b:.3f}" in page


def test_a_claim_is_judged_by_the_models_it_is_computed_from(fresh_run: Run) -> None:
    fresh_run.update_config(study={"profile": "class", "seq_len": 32, "eval_tokens": 512})
    u, b = _unigram(fresh_run), evidence.validation_bigram(fresh_run)
    _fake_models(fresh_run, {"tied-s0": b - HAIR, "untied-s0": b - HAIR, "tied_in5-s0": u + HAIR})  # 04's learned nothing
    for key in ("tied-s0", "untied-s0", "tied_in5-s0"):
        (fresh_run.models_dir / key / "model.safetensors").write_bytes(key.encode())  # weights for the records' sha256
    three = claims.Verdict("claim3_tuned_lens", value=0.3, threshold=0.0, unit="bits", statement="gap",
                           text="Claim 3 holds.", models=["tied-s0", "untied-s0"])
    e = claims.record(fresh_run, three)
    assert e["status"] == "holds" and "not_meaningful" not in e and three.text == "Claim 3 holds."
    four = claims.Verdict("claim4_causality", value=1.5, threshold=1.0, statement="k moves the matrix",
                          text="Claim 4 holds.", models=["tied-s0", "tied_in5-s0", "untied-s0"])
    e = claims.record(fresh_run, four)
    assert e["status"] == NOT_MEANINGFUL and e["not_meaningful"].startswith("1 of 3 models do not beat the unigram")
    assert "tied_in5-s0" in e["not_meaningful"] and four.text.startswith("NOT MEANINGFUL")
