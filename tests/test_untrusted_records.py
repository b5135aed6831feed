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


def test_a_run_that_is_not_evidence_cannot_be_edited_into_a_verdict(fresh_run: Run) -> None:
    """A smoke run's record turned from "not meaningful" into "holds" (value above its threshold, verdict true) is
    refused: the reason the run is not evidence is still beside it."""
    records.record(fresh_run, records.Headline("claim2_gradient_flow", value=0.8, threshold=0.5, statement="s"),
                   not_meaningful="the 'smoke' profile is a plumbing check")
    _edit(fresh_run, "claim2_gradient_flow", status="holds", verdict=True)
    _refused_everywhere(fresh_run, "claim2_gradient_flow", "status 'holds' beside the reason the run is not evidence")


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


def _tables(run: Run) -> None:
    """Small tables of the columns the report reads, with values a run can have."""
    import pandas as pd

    run.metrics_dir.mkdir(exist_ok=True)
    pd.DataFrame([{"comparison": c, "pairing": "cross seed", "seed_source": 0, "seed_target": 1, "orthogonal": o,
                   "linear": o, "identity": 0.1, "knn@10": 0.2}
                  for c, o in (("untied input -> tied", 0.3), ("untied output -> tied", 0.6),
                               ("untied input -> untied output", 0.2))]).to_csv(run.table_path("alignment_table1"),
                                                                                 index=False)
    pd.DataFrame([{"protocol": "package", "step": 10, "budget": 1, "variant": v, "layer": 0, "kl_tuned_bits": kl,
                   "lens_steps": 20, "seed": s} for v, kl in (("tied", 2.0), ("untied", 1.0)) for s in (0, 1)]
                 ).to_csv(run.table_path("lens_per_layer"), index=False)


@pytest.mark.parametrize("table, column, value, words", [
    ("alignment_table1", "orthogonal", 1.34, ["column 'orthogonal', row 1: 1.34 is impossible there"]),
    ("alignment_table1", "orthogonal", 1e308, ["column 'orthogonal', row 1: 1e+308 is impossible there"]),
    ("alignment_table1", "orthogonal", "abc", ["column 'orthogonal', row 1: 'abc' is not a number"]),
    ("lens_per_layer", "kl_tuned_bits", 1e300, ["column 'kl_tuned_bits', row 1: 1e+300 is impossible there"]),
    ("lens_per_layer", "kl_tuned_bits", ..., ["column(s) 'kl_tuned_bits' missing"]),
    ("alignment_table1", "", "header only", ["the table has no rows"]),
    ("alignment_table1", "", "empty", ["not a readable table (EmptyDataError: No columns to parse from file)"]),
    ("lens_per_layer", "", "binary", ["lens_per_layer.csv"]),
])
def test_a_damaged_or_impossible_table_is_refused_naming_file_and_column(fresh_run: Run, table: str, column: str,
                                                                          value: object, words: list) -> None:
    """Defect 15: missing columns, header-only or binary CSVs gave tracebacks; pandas' "No columns to parse from
    file" and "could not convert string to float: 'abc'" named no file; a cosine of 1.34 or 1e308 and a KL of 1e300
    were taken as measured."""
    import pandas as pd

    _tables(fresh_run)
    R.build(fresh_run)  # the tables as written are read
    path = fresh_run.table_path(table)
    t = pd.read_csv(path)
    if value is ...:
        t = t.drop(columns=[column])
    elif column:
        t[column] = t[column].astype(object)
        t.loc[0, column] = value
    if value == "header only":
        path.write_text(",".join(t.columns) + "\n")
    elif value == "empty":
        path.write_text("")
    elif value == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    else:
        t.to_csv(path, index=False)
    for write in (R.build, write_reproduction):
        with pytest.raises(DamagedFileError) as e:
            write(fresh_run)
        msg = str(e.value)
        assert str(path) in msg and all(w in msg for w in words) and "rerun notebook 0" in msg, msg
    assert not (fresh_run.path / "reproduction.md").exists()


def test_a_config_whose_study_is_not_an_object_is_refused_by_name(fresh_run: Run) -> None:
    cfg = json.loads(fresh_run.config_path.read_text())
    fresh_run.config_path.write_text(json.dumps({**cfg, "study": "smoke"}))
    for write in PAGES.values():
        with pytest.raises(DamagedFileError, match=r"config.json: .*'study' is a str, not a JSON object"):
            write(fresh_run)
