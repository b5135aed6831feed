"""The lesson plan (TEACHING.md): minute marks laid out from measured run times that fit 90 minutes, every number it
quotes under a notebook printed by that notebook in the class run the walkthrough shows, and `make check-class`'s
verdict against the reference plumbing time."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiebias.config.params import NOTEBOOKS
from tiebias.teach import schedule, walkthrough

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = json.loads((ROOT / "notebooks" / "exercise_numbers.json").read_text())
FIELD = re.compile(r"\{base\.(\w+)(?::([^}]*))?\}")
HEADER = re.compile(r"^\*\*\{plan\.\w+\} · (\d\d)[: ]", re.M)
WORDS = ("status_", "converged", "not_converged_because", "c4_sentence")  # text fields: compared as printed


def by_notebook(template: str) -> dict[str, list[tuple[str, str]]]:
    """The ``{base.NAME:spec}`` fields of each block of the plan whose header names a notebook ("· 01: ...")."""
    starts = [(m.start(), m.group(1)) for m in HEADER.finditer(template)]
    ends = [m.start() for m in re.finditer(r"^\*\*\{plan\.", template, re.M)] + [template.index("## After the lesson")]
    out: dict[str, list[tuple[str, str]]] = {}
    for pos, number in starts:
        end = min(e for e in ends if e > pos)
        name = next(n for n in NOTEBOOKS if n.startswith(number))
        out.setdefault(name, []).extend(FIELD.findall(template[pos:end]))
    return out


def printed(name: str) -> str:
    """What the code cells of a notebook printed and displayed in the walkthrough's class run (their sources and the
    Markdown cells left out: prose and folded answers are not output)."""
    md = (ROOT / "walkthrough" / f"{name}.md").read_text(encoding="utf-8")
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    kinds = {c["id"]: c["cell_type"] for c in nb["cells"]}
    parts = walkthrough.MARKER_RE.split(md)[1:]
    out = []
    for cid, _, text in zip(parts[::3], parts[1::3], parts[2::3], strict=True):
        if kinds.get(cid) == "code":  # the source: a fence, or a folded one (a solution) inside <details>
            text = re.sub(r"^<details><summary>Code \(folded[^<]*</summary>\s*(`{3,})python\n.*?\n\1\s*</details>", "",
                          text.lstrip(), count=1, flags=re.S)
            out.append(re.sub(r"^(`{3,})python\n.*?\n\1\n", "", text.lstrip(), count=1, flags=re.S))
    return re.sub(r"\s+", " ", "\n".join(out))


def test_every_number_the_plan_quotes_is_printed_by_the_notebook_it_refers_to() -> None:
    """Each field of a notebook's block in the plan, formatted as the plan formats it, is in that notebook's executed
    output in the walkthrough (the class run the plan is filled from): a student finds it on screen."""
    template = (ROOT / "lib" / "tiebias" / "teach" / "lesson.md").read_text()
    fields = by_notebook(template)
    assert set(fields) == set(NOTEBOOKS), fields.keys()
    base = NUMBERS["base"]
    missing = []
    for name, items in fields.items():
        shown = printed(name)
        for field, spec in items:
            if field.startswith("time_"):
                continue  # a run time: the study measures it, no cell prints it
            text = re.sub(r"\s+", " ", format(base[field], spec))
            found = text.lower() in shown.lower() if field.startswith(WORDS) else text in shown
            if not found:
                missing.append(f"{name}: {{base.{field}:{spec}}} = {text!r}")
    assert not missing, "numbers the plan quotes that the notebook does not print:\n" + "\n".join(missing)


def test_the_check_sees_a_number_that_is_not_printed() -> None:
    """The comparison above is not vacuous: the halves of 01 were only in a folded answer before 01 printed them."""
    assert "Output share over the first half" in printed("01_train")
    assert f"{NUMBERS['base']['share_first_half']:.1%}" in printed("01_train")
    assert "def output_path_grad" not in printed("01_train") and "**Predict first.**" not in printed("01_train")


def test_the_plan_fits_90_minutes_and_no_notebook_starts_during_other_work() -> None:
    """Checked against the class run's measured times: the blocks add up to 90 minutes back to back, each notebook
    starts in a block of its own once the one before it has finished and ends before the block that needs it,
    nothing starts in the coding exercise, and the plan quotes the marks."""
    seconds = {k: float(v) for k, v in schedule.load_timing()["class_seconds"].items()}
    marks = schedule.layout(seconds)
    spans = [tuple(map(int, marks[b.key].split("-"))) for b in schedule.BLOCKS]
    assert spans[0][0] == 0 and spans[-1][1] == schedule.LESSON_MINUTES
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))  # back to back, no overlap
    assert not any(b.starts for b in schedule.BLOCKS if b.exercise)
    order = [b.starts for b in schedule.BLOCKS if b.starts]
    assert order == list(NOTEBOOKS) and all(b.needs == order[order.index(b.starts) - 1] for b in schedule.BLOCKS
                                            if b.starts and b.starts != order[0])  # the previous one has finished
    assert schedule.check(seconds, 1.0) == []
    teaching = (ROOT / "TEACHING.md").read_text()
    for b in schedule.BLOCKS:
        assert f"**{marks[b.key]} · " in teaching, b.key


def test_the_timing_file_is_the_class_run_the_plan_and_walkthrough_show() -> None:
    """One measurement: the stored class times are the walkthrough's and the plan's (rounded to the second)."""
    index = (ROOT / "walkthrough" / "README.md").read_text()
    for name in NOTEBOOKS:
        secs = round(float(schedule.load_timing()["class_seconds"][name]))
        assert NUMBERS["base"][f"time_{name}"] == secs and f"| {secs} s |" in index, name


def test_a_plan_that_does_not_fit_is_refused_and_a_slow_machine_is_named() -> None:
    fine = {"01_train": 75.0, "02_align": 13.0, "03_lens": 47.0, "04_ablate": 50.0}
    with pytest.raises(ValueError, match=r"^seconds: 03_lens would take about 30.0 min, but the plan gives it minutes "):
        schedule.layout({**fine, "03_lens": 1800.0})
    with pytest.raises(ValueError, match="^seconds: no run time for 04_ablate"):
        schedule.layout({k: v for k, v in fine.items() if k != "04_ablate"})
    assert schedule.check(fine, 1.0) == []
    late = schedule.check(fine, 17.0)
    assert [x.split()[0] for x in late] == ["01_train", "03_lens", "04_ablate"], late


def test_check_class_gives_a_verdict_against_the_reference_plumbing_time(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The plumbing time beside the reference measured with the class run, the class time predicted for this
    machine, the disk and download sizes, and a verdict: ready at the reference speed, not ready far slower."""
    spec = importlib.util.spec_from_file_location("check_class", ROOT / "scripts" / "check_class.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "folder_bytes", lambda path: 2_100_000_000)
    monkeypatch.setattr(mod.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    ref = float(schedule.load_timing()["plumbing_seconds"])
    for factor, ready in ((1.0, True), (12.0, False)):
        clock = iter([0.0, ref * factor])
        monkeypatch.setattr(mod.time, "perf_counter", lambda clock=clock: next(clock))
        assert mod.main() == (0 if ready else 1)
        out = capsys.readouterr().out
        assert f"plumbing run: {ref * factor:.0f} s here, {ref:.0f} s on the machine that measured" in out
        predicted = sum(schedule.load_timing()["class_seconds"].values()) * factor / 60
        assert f"class run predicted here: {predicted:.1f} min" in out
        assert "disk: the environment takes 2.1 GB here" in out and "downloads" in out
        assert ("VERDICT: ready" in out) is ready and ("too slow for the plan's minute marks" in out) is not ready


def test_time_class_refuses_an_existing_run_folder(tmp_path: Path) -> None:
    (ROOT / "runs").mkdir(exist_ok=True)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "time_class.py"), "--run-dir", str(ROOT / "notebooks")],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "--run-dir: " in p.stderr and "exists" in p.stderr

