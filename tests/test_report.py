import json

import pytest

from tiebias.output import report
from tiebias.run.folder import Run
from tiebias.verdicts import claims, records


def test_record_computes_verdict_and_rejects_bad_input(fresh_run: Run) -> None:
    e = records.record(fresh_run, records.Headline("claim2_gradient_flow", value=0.8, threshold=0.5, statement="s", spread=0.01))
    assert e["verdict"] is True and e["above_threshold"] is True and e["status"] == "holds"
    e = records.record(fresh_run, records.Headline("claim3_tuned_lens", value=-0.2, threshold=0.1, statement="s", noise_floor=float("nan")))
    assert e["verdict"] is False and e["above_threshold"] is False and e["noise_floor"] is None
    with pytest.raises(ValueError, match="claim: unknown value 'claim9'"):
        records.record(fresh_run, records.Headline("claim9", value=1, threshold=0, statement="s"))
    with pytest.raises(ValueError, match="value: nan"):
        records.record(fresh_run, records.Headline("claim1_alignment", value=float("nan"), threshold=0, statement="s"))
    assert set(records.results(fresh_run)) == {"claim2_gradient_flow", "claim3_tuned_lens"}


def test_summary_and_report_files(fresh_run: Run) -> None:
    records.record(fresh_run, records.Headline("claim1_alignment", value=0.3, threshold=0.1, statement="tied looks like output", paper={"OLMo": 0.719}))
    path = report.write_summary(fresh_run, {"01_train": 12.0})
    data = json.loads(path.read_text())
    assert data["claims"]["claim1_alignment"]["verdict"] is True
    assert data["claims"]["claim1_alignment"]["above_threshold"] is True
    assert data["timings_seconds"] == {"01_train": 12.0}
    report.write_summary(fresh_run, {"02_align": 3.0})  # timings accumulate across partial reruns
    assert json.loads(path.read_text())["timings_seconds"] == {"01_train": 12.0, "02_align": 3.0}
    html = report.write_report(fresh_run).read_text()
    assert "tied looks like output" in html and "not run" in html and "<b>holds</b>" in html
    assert "Notebooks: 01_train (12 s) · 02_align (3 s)</p>" in html  # the study's times, no executed copies here


def test_status_words_the_verdict_and_is_checked(fresh_run: Run) -> None:
    e = records.record(fresh_run, records.Headline("claim2_gradient_flow", value=0.8, threshold=0.5, statement="s"))
    assert e["status"] == "holds"
    e = records.record(fresh_run, records.Headline("claim3_tuned_lens", value=0.3, threshold=0.1, statement="s", status="not converged"))
    # neither yes nor no: the verdict is null beside the status that says why; the bare comparison is kept
    assert e["status"] == "not converged" and e["verdict"] is None and e["above_threshold"] is True
    stored = records.results(fresh_run)["claim3_tuned_lens"]
    assert stored["verdict"] is None and stored["above_threshold"] is True
    before = (fresh_run.path / "results" / "claim3_tuned_lens.json").read_bytes()
    for bad in ("", "  ", 3):
        with pytest.raises(ValueError, match="^status: "):
            records.record(fresh_run, records.Headline("claim3_tuned_lens", value=0.3, threshold=0.1, statement="s", status=bad))
    assert (fresh_run.path / "results" / "claim3_tuned_lens.json").read_bytes() == before
    page = report.write_report(fresh_run).read_text()
    assert "<b>not converged</b>" in page and "<b>holds</b>" in page


def test_names_from_the_run_folder_are_text_in_the_report(fresh_run: Run) -> None:
    """A notebook's file name, a paper value's key, the profile and preset come from the run folder: shown, never
    markup."""
    from urllib.parse import unquote

    import nbformat
    from _rendered import tags
    from nbformat.v4 import new_markdown_cell, new_notebook

    stem = 'x" onmouseover="alert(1)" <img src=y onerror=alert(2)>'
    fresh_run.notebooks_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=[new_markdown_cell("# t")]), fresh_run.notebooks_dir / f"{stem}.ipynb")
    fresh_run.update_config(study={"profile": "<b onclick=alert(4)>p</b>", "preset": "<script>alert(5)</script>"})
    records.record(fresh_run, records.Headline("claim1_alignment", value=0.3, threshold=0.1, statement="s", paper={"<script>alert(3)</script>": 0.7}))
    page = report.write_report(fresh_run).read_text()
    found = tags(page)
    assert [t for t, a in found if t in ("script", "img") or any(k.startswith("on") for k in a)] == []
    links = [a["href"] for t, a in found if t == "a"]
    assert [unquote(h) for h in links] == [f"report/{stem}.html"] and (fresh_run.report_dir / f"{stem}.html").is_file()
    assert "&lt;script&gt;alert(3)&lt;/script&gt;: 0.7" in page and "<b>&lt;b onclick=alert(4)&gt;p&lt;/b&gt;</b>" in page


def test_claim4_is_stated_once_with_its_map_and_the_other_maps_reading(fresh_run: Run) -> None:
    """The verdict's map carries it; the other map's reading stands beside it in the statement (summary.json and the
    report) and in the printed text, with no second verdict line."""
    import pandas as pd

    rows = [{"method": m, "step": 40, "k": k, "seed": seed, "vs_untied_input": 0.5 + (0.1 if m == "orthogonal" else 0)
             * (k > 1) + 0.001 * seed, "vs_untied_output": 0.5 - 0.1 * (k > 1) - 0.001 * seed}
            for m in ("orthogonal", "linear") for k in (1.0, 5.0) for seed in (0, 1)]
    v = claims.claim4(pd.DataFrame(rows), ["orthogonal", "linear"], "cross")
    assert v.statement.startswith("orthogonal map (the verdict's): k 1->5")
    assert v.statement.endswith("; linear map's reading: does not hold")
    assert v.text.count("Claim 4 (") == 1 and "judged under the orthogonal map: HOLDS" in v.text.replace("holds", "HOLDS")
    assert "under the linear map it" in v.text
    claims.record(fresh_run, v)
    page = report.write_report(fresh_run).read_text()
    assert "linear map&#39;s reading: does not hold" in page


def test_a_notebook_that_does_not_convert_leaves_no_scratch_folder(fresh_run, tmp_path, monkeypatch) -> None:
    from tiebias.run.files import DamagedFileError

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    fresh_run.notebooks_dir.mkdir(parents=True, exist_ok=True)
    (fresh_run.notebooks_dir / "01_train.ipynb").write_text("{not a notebook")
    with pytest.raises(DamagedFileError, match="01_train.ipynb: does not convert to HTML"):
        report.write_report(fresh_run)
    assert list((tmp_path / "tmp").iterdir()) == []


class _Kernel:
    """What the cell-time hooks use of an IPython kernel: its event manager, whose events are triggered here as a
    kernel triggers them around each cell (no shell is started: it would change this process's hooks and history)."""

    def __init__(self) -> None:
        from IPython.core.events import EventManager, available_events

        self.events = EventManager(self, available_events)

    def run_cell(self, code: str, namespace: dict) -> None:
        self.events.trigger("pre_run_cell", None)
        exec(code, namespace)
        self.events.trigger("post_run_cell", None)


@pytest.fixture
def kernel(monkeypatch):
    """A kernel a person started in JupyterLab (not one the study command started) as IPython's current shell."""
    import IPython

    from tiebias.config.environment import STUDY_ENV
    from tiebias.run import history

    monkeypatch.delenv(STUDY_ENV, raising=False)
    k = _Kernel()
    monkeypatch.setattr(IPython, "get_ipython", lambda: k)
    yield k
    history._HOOKS.clear()


def test_notebooks_run_in_jupyterlab_are_named_with_their_times(fresh_run: Run, kernel, monkeypatch) -> None:
    """A notebook run cell by cell in a JupyterLab kernel: from its parameter check on, its cells' run time is recorded
    in the run folder, and the summary, the reproduction page and report.html written afterwards (as 04's last cell
    does) name it and its time. Before, they said "none executed" and "No timings recorded"."""
    from tiebias.config.environment import STUDY_ENV
    from tiebias.config.paths import notebooks_dir
    from tiebias.output.reproduction_page import write_reproduction
    from tiebias.run import history

    nb = json.loads((notebooks_dir() / "01_train.ipynb").read_text())
    parameters = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    namespace: dict = {}
    for cell in ("".join(parameters["source"]) + f"\nprofile = 'smoke'\nrun_dir = {str(fresh_run.path)!r}",
                 "from tiebias.config import profiles\nfrom tiebias.output import notebook\nnotebook.setup()\n"
                 "P = profiles.resolve_notebook('01_train', globals())",  # as every notebook's setup cell
                 "import time\ntime.sleep(1.2)", "x = 1"):
        kernel.run_cell(cell, namespace)
    times = json.loads(fresh_run.kernel_times_path.read_text())
    assert set(times) == {"01_train"} and times["01_train"]["cells"] == 3, times  # from the parameter check on
    assert 1.2 <= times["01_train"]["seconds"] < 60, times
    summary = json.loads(report.write_summary(fresh_run).read_text())
    assert summary["timings_seconds"]["01_train"] == times["01_train"]["seconds"]
    assert "01_train" in summary["peak_memory_mib"]
    page = report.write_report(fresh_run).read_text()
    assert "none executed" not in page and f"01_train ({times['01_train']['seconds']:.0f} s, run in JupyterLab)" in page
    md = write_reproduction(fresh_run).read_text()
    assert "No timings recorded" not in md and "| 01\\_train | 1 s |" in md, md[md.find("## Compute"):][:600]
    monkeypatch.setenv(STUDY_ENV, "1")  # a kernel the study command started: the study times its notebooks itself
    assert history.record_cells("02_align", fresh_run.path) is False


def test_recorded_times_from_a_damaged_or_hostile_file_are_left_out(fresh_run: Run) -> None:
    from tiebias.run import history

    fresh_run.kernel_times_path.write_text("{not json")
    assert history.timings(fresh_run) == ({}, {})
    fresh_run.kernel_times_path.write_text(json.dumps({"01_train": {"seconds": -1}, "02_align": {"seconds": "9"},
                                                       "03_lens": {"seconds": 4.0, "peak_memory_mib": True}}))
    assert history.timings(fresh_run) == ({"03_lens": 4.0}, {})
