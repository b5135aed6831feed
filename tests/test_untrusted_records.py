"""Records and metrics tables are read back as untrusted: a verdict typed in by hand, a damaged record or an
impossible value is refused by every page that reads it, naming the file, the field and what to do."""

from __future__ import annotations

import json

import pytest

from tiebias.output import report
from tiebias.output.reproduction_page import write_reproduction
from tiebias.run.files import DamagedFileError
from tiebias.run.folder import Run
from tiebias.verdicts import records
from tiebias.verdicts import reproduction as R

PAGES = {"summary.json": lambda run: report.write_summary(run), "report.html": lambda run: report.write_report(run),
         "reproduction.md": lambda run: write_reproduction(run)}


def _edit(run: Run, which: str, **changes: object) -> None:
    p = run.result_path(which)
    entry = json.loads(p.read_text())
    for k, v in changes.items():
        if v is ...:
            entry.pop(k)
        else:
            entry[k] = v
    p.write_text(json.dumps(entry))


def _refused_everywhere(run: Run, claim: str, *words: str) -> None:
    """Every page that reads records refuses, naming the file, the field and the notebook to rerun; none is written."""
    for name, write in PAGES.items():
        before = {p.name: p.read_bytes() for p in run.path.glob("*.*") if p.is_file()}
        with pytest.raises(DamagedFileError) as e:
            write(run)
        msg = str(e.value)
        assert str(run.result_path(claim)) in msg and "rerun notebook" in msg, (name, msg)
        assert all(w in msg for w in words), (name, msg)
        assert {p.name: p.read_bytes() for p in run.path.glob("*.*") if p.is_file()} == before, name


def test_a_verdict_edited_by_hand_is_refused_by_every_page(fresh_run: Run) -> None:
    """Defect 9: "holds" beside a value below its threshold was shown as holds / [Re] / verdict true."""
    records.record(fresh_run, records.Headline("claim2_gradient_flow", value=0.3, threshold=0.5, statement="s"))
    records.record(fresh_run, records.Headline("claim3_tuned_lens", value=0.3, threshold=0.1, statement="s",
                                               status="not converged"))
    assert {c["kit"] for c in R.claim_lines(R.Evidence.load(fresh_run))} >= {"[¬Re]"}
    _edit(fresh_run, "claim2_gradient_flow", status="holds", verdict=True)
    _refused_everywhere(fresh_run, "claim2_gradient_flow", "status 'holds' contradicts value 0.3",
                        "'does not hold'")
    _edit(fresh_run, "claim2_gradient_flow", status="does not hold", verdict=True)  # the verdict alone
    _refused_everywhere(fresh_run, "claim2_gradient_flow", "verdict True contradicts status 'does not hold'")
    _edit(fresh_run, "claim2_gradient_flow", verdict=False)
    _edit(fresh_run, "claim3_tuned_lens", verdict=True)  # a verdict beside "not converged"
    _refused_everywhere(fresh_run, "claim3_tuned_lens", "verdict True contradicts status 'not converged'")
    _edit(fresh_run, "claim3_tuned_lens", verdict=None)
    assert json.loads(report.write_summary(fresh_run).read_text())["claims"]["claim2_gradient_flow"]["verdict"] is False


@pytest.mark.parametrize("change, words", [
    ({"statement": ...}, ["field 'statement' is missing"]),
    ({"threshold": ...}, ["field 'threshold' is missing"]),
    ({"status": ...}, ["field 'status' is missing"]),
    ({"status": 3}, ["field 'status' is 3, not a string"]),
    ({"value": "abc"}, ["field 'value' is 'abc'"]),
    ({"value": 1.34}, ["field 'value' is 1.34, outside [0, 1]"]),
    ({"value": None}, ["status 'holds' without a value"]),
    ({"claim": "claim1_alignment"}, ["field 'claim' is 'claim1_alignment'"]),
])
def test_a_damaged_record_is_refused_naming_the_file_and_field(fresh_run: Run, change: dict, words: list) -> None:
    """Defect 15: a record without statement / threshold / status, a non-string status, an impossible value gave
    tracebacks, or "holds" in report.html and "not run" in the reproduction report."""
    records.record(fresh_run, records.Headline("claim2_gradient_flow", value=0.8, threshold=0.5, statement="s"))
    _edit(fresh_run, "claim2_gradient_flow", **change)
    _refused_everywhere(fresh_run, "claim2_gradient_flow", *words)


def test_a_list_as_a_record_is_refused(fresh_run: Run) -> None:
    fresh_run.results_dir.mkdir(parents=True, exist_ok=True)
    fresh_run.result_path("claim1_alignment").write_text("[1, 2]")
    _refused_everywhere(fresh_run, "claim1_alignment", "a claim's record is a JSON object, this file holds a list")
