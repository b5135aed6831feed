"""walkthrough/: in sync with the notebook sources, cell by cell, and rendered the way a repository browser reads."""

import json
import re
import shlex
import shutil
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import pytest
from _rendered import HOSTILE, png_size, rendered, tags, unsafe
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tiebias.config import profiles
from tiebias.config.params import NOTEBOOKS
from tiebias.output.notebook import PLOTLY_MIME
from tiebias.output.plotting import export
from tiebias.teach import walkthrough

ROOT = profiles.repo_root()
FIX = "regenerate it: make walkthrough RUN=runs/class (after python -m tiebias study --profile class)"


def _cells_in_order(md: str, nb: dict) -> None:
    """Each cell's marker, then its text, in the notebook's order (the text of a cell lies between its marker and the next)."""
    parts = walkthrough.MARKER_RE.split(md)[1:]  # id, digest, text, id, digest, text, ...
    cells = [c for c in nb["cells"] if "injected-parameters" not in c["metadata"].get("tags", [])]
    assert [(c["id"], walkthrough.digest(walkthrough._source(c))) for c in cells] == list(zip(parts[::3], parts[1::3],
                                                                                                strict=True))
    for cell, text in zip(cells, parts[2::3], strict=True):
        src = walkthrough._source(cell)
        assert (walkthrough.relink(src) if cell["cell_type"] == "markdown" else src) in text, cell["id"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_walkthrough_follows_the_notebook_sources(name: str) -> None:
    md_path = ROOT / "walkthrough" / f"{name}.md"
    assert md_path.is_file(), f"walkthrough/{name}.md is missing; {FIX}"
    md = md_path.read_text(encoding="utf-8")
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    assert walkthrough.MARKER_RE.findall(md) == walkthrough.source_cells(nb), \
        f"walkthrough/{name}.md shows other cells than notebooks/{name}.ipynb; {FIX}"
    _cells_in_order(md, nb)


def test_walkthrough_index_names_its_profile_and_images_exist() -> None:
    folder = ROOT / "walkthrough"
    index = (folder / "README.md").read_text(encoding="utf-8")
    profile = re.search(r"\*\*Profile: `([^`]+)`\*\*", index)
    assert profile and profile.group(1) in profiles.available()
    assert "make walkthrough RUN=" in index
    linked = set()
    for name in NOTEBOOKS:
        md = (folder / f"{name}.md").read_text(encoding="utf-8")
        assert f"run of the **{profile.group(1)}** profile" in md and f"]({name}.md)" in index
        linked |= set(re.findall(r"\]\((images/[^)]+)\)", md))
    on_disk = {str(p.relative_to(folder)) for p in (folder / "images").rglob("*") if p.is_file()}
    assert linked == on_disk and linked  # every picture shown is there, and no stale picture is left behind
    for rel in linked:
        assert png_size((folder / rel).read_bytes())[0] >= 600


def executed(source: dict) -> dict:
    """A copy of a notebook source as papermill executes it: an injected-parameters cell and outputs."""
    nb = json.loads(json.dumps(source))
    injected = new_code_cell('# Parameters\nprofile = "smoke"\n', metadata={"tags": ["injected-parameters"]})
    nb["cells"].insert(1, dict(injected))
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]), layout={"width": 300, "height": 200}).to_plotly_json()
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    code[-1]["outputs"] = [dict(new_output("stream", name="stdout", text="one\n")),
                           dict(new_output("stream", name="stdout", text="two\rthree\n")),
                           dict(new_output("display_data", {"text/html": "<style>.x{}</style>\n\n<table></table>"})),
                           dict(new_output("display_data", {PLOTLY_MIME: json.loads(json.dumps(fig, default=list))}))]
    return nb


def small_notebook() -> dict:
    nb = new_notebook(cells=[new_markdown_cell("# A title\n\n![a picture](figures/x.png) and [a link](https://x.org)"),
                             new_code_cell("x = 1\nprint('``` fence inside ```')")])
    return json.loads(nbformat.writes(nb))


def test_render_notebook_marks_cells_and_reads_like_the_notebook() -> None:
    src = small_notebook()
    page = walkthrough.render_notebook(executed(src), "01_train")
    md = "\n\n".join(page.blocks)
    assert walkthrough.MARKER_RE.findall(md) == walkthrough.source_cells(src)
    assert "](../notebooks/figures/x.png)" in md and "](https://x.org)" in md  # relative links still resolve
    assert "````python\nx = 1" in md  # a fence longer than the backticks inside
    assert "```text\none\nthree\n```" in md  # one block per stream, a carriage return overwrites its line
    assert "<style>" not in md and "<table></table>" in md
    assert list(page.figures) == ["images/01_train/cell02-1.png"] and "(images/01_train/cell02-1.png)" in md
    assert 'profile = "smoke"' in md and md.count("<!-- cell ") == 2  # the injected cell is shown, not counted


def test_an_executed_notebook_of_another_version_is_refused() -> None:
    src = small_notebook()
    walkthrough.check_executed(executed(src), src, "01_train")
    changed = json.loads(json.dumps(src))
    changed["cells"][1]["source"] = "x = 2"
    with pytest.raises(ValueError, match=r"^01_train: the run's executed notebook has other cells .* cell 1"):
        walkthrough.check_executed(executed(src), changed, "01_train")


def test_write_walkthrough_from_a_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    (run / "notebooks").mkdir(parents=True)
    source = json.loads((ROOT / "notebooks" / "01_train.ipynb").read_text(encoding="utf-8"))
    (run / "notebooks" / "01_train.ipynb").write_text(json.dumps(executed(source)), encoding="utf-8")
    summary = {"profile": "smoke", "config": {"study": {"preset": "tiny", "steps": 40, "seeds": [0, 1]}},
               "claims": {"claim2_gradient_flow": {"description": "d2", "value": 0.87, "unit": "share",
                                                   "status": "holds"}}, "timings_seconds": {"01_train": 26.4}}
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    drawn: list[dict] = []
    monkeypatch.setattr(walkthrough, "figures_to_png", lambda figs, scale: drawn.extend(figs) or [b"png"] * len(figs))
    out = tmp_path / "walk"
    (out / "images" / "old").mkdir(parents=True)
    (out / "stale.md").write_text("x")
    written = walkthrough.write_walkthrough(run, out)
    assert sorted(p.name for p in out.glob("*.md")) == ["01_train.md", "README.md"] and not (out / "images/old").exists()
    assert len(drawn) == 1 and drawn[0]["layout"]["width"] == 300 and out / "README.md" in written
    index = (out / "README.md").read_text()
    assert "**Profile: `smoke`**: the test profile." in index and "| [01_train](01_train.md) |" in index
    assert "| d2 | 0.87 share | **holds** |" in index and "26 s" in index
    _cells_in_order((out / "01_train.md").read_text(), source)
    shutil.rmtree(run / "notebooks")
    with pytest.raises(ValueError, match="^run_dir: .* holds no executed study"):
        walkthrough.write_walkthrough(run, out)


def test_hostile_names_in_a_run_folder_run_nothing_in_the_walkthrough(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A run folder, profile, corpus, preset or claim text with backticks, tags, script links and newlines is shown
    as text in the index and the pages, as markdown-it (raw HTML on) and mistune render them; so is an HTML output."""
    name = "run`<script>alert(1)`` <img src=x onerror=alert(1)> [a](javascript:alert(1))\n# owned |x|"
    assert "/" not in name  # a folder name cannot hold one; the other fields can
    run = tmp_path / name
    (run / "notebooks").mkdir(parents=True)
    source = json.loads((ROOT / "notebooks" / "01_train.ipynb").read_text(encoding="utf-8"))
    nb = executed(source)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    code[1]["outputs"] = [dict(new_output("display_data", {"text/html": "<table><tr><td>ok</td></tr></table>"
                                                                       "<script>alert(3)</script>"
                                                                       '<img src=x onerror="alert(4)">'}))]
    (run / "notebooks" / "01_train.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    summary = {"profile": HOSTILE, "config": {"study": {"preset": HOSTILE, "steps": HOSTILE, "seeds": [0, 1],
                                                        "corpus": HOSTILE}},
               "claims": {"claim2_gradient_flow": {"description": HOSTILE, "value": HOSTILE, "unit": HOSTILE,
                                                   "status": HOSTILE}}, "timings_seconds": {"01_train": 26.4}}
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    monkeypatch.setattr(walkthrough, "figures_to_png", lambda figs, scale: [b"png"] * len(figs))
    out = tmp_path / "walk"
    walkthrough.write_walkthrough(run, out)
    index, page = (out / "README.md").read_text(), (out / "01_train.md").read_text()
    for which, md in (("README.md", index), ("01_train.md", page)):
        for renderer, html in rendered(md).items():
            assert unsafe(html) == [], (which, renderer, unsafe(html))
            assert "<h1>injected" not in html and "<h1>owned" not in html, (which, renderer)
    html = rendered(index)["markdown-it"]
    assert [t for t, _ in tags(html)].count("h1") == 1 and "onerror=alert(1)&gt;" in html  # shown, as text
    assert "<td>ok</td>" in rendered(page)["markdown-it"]  # a table output stays a table
    assert f"--run-dir {shlex.quote(str(run))}" in index  # the command to copy names the folder, quoted
    assert "--profile 'x`<script>" in index
    odd = walkthrough.index_page("r", {"timings_seconds": {"01_train": HOSTILE}}, {"01_train": "t"})
    assert "| [01_train](01_train.md) | t | – s |" in odd  # a run time that is not a number is not shown


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("google-chrome") is None,
                    reason="no Chromium (apt-get install chromium)")
def test_figures_are_drawn_at_their_size_times_the_scale() -> None:
    figs = [go.Figure(go.Scatter(y=[1, 3, 2]), layout={"width": 320, "height": 200}).to_plotly_json(),
            go.Figure(go.Bar(y=[2, 1])).to_plotly_json()]
    pngs = export.figures_to_png(json.loads(json.dumps(figs, default=list)), scale=1.5)
    assert [png_size(p) for p in pngs] == [(480, 300), (1350, 750)]
    with pytest.raises(ValueError, match="^scale: 9"):
        export.figures_to_png(figs, scale=9)


def test_without_chromium_the_cli_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(export.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="^no Chromium found: .*apt-get install chromium"):
        export.figures_to_png([{"data": [], "layout": {}}])
    assert export.figures_to_png([]) == []  # nothing to draw needs no browser
    from tiebias import __main__ as cli

    monkeypatch.setattr(walkthrough, "write_walkthrough", lambda run: export.chromium())
    assert cli.main(["walkthrough", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("error: no Chromium found")


def test_a_folded_code_cell_stays_folded_in_the_walkthrough() -> None:
    """A cell JupyterLab shows folded (a coding exercise's solution) is a <details> block in the walkthrough too."""
    from tiebias.teach.walkthrough import render_notebook

    nb = {"cells": [{"cell_type": "code", "id": "a", "metadata": {"jupyter": {"source_hidden": True}},
                     "source": "x = 1", "outputs": []},
                    {"cell_type": "code", "id": "b", "metadata": {}, "source": "y = 2", "outputs": []}]}
    blocks = render_notebook(nb, "01_train").blocks
    folded = next(b for b in blocks if "x = 1" in b)
    assert folded.startswith("<details><summary>") and folded.endswith("</details>")
    assert not next(b for b in blocks if "y = 2" in b).startswith("<details>")


def test_the_walkthrough_shows_run_folders_relative_to_the_checkout() -> None:
    """No absolute path of the machine it was rendered on: `run_dir = "runs/class"`, not `/home/.../runs/class`."""
    import re

    for page in (Path(__file__).resolve().parents[1] / "walkthrough").glob("*.md"):
        hit = re.search(r"(?<![\w.])/[\w.-]+(?:/[\w.-]+)*/runs/\w+", page.read_text())
        assert hit is None, f"{page.name}: {hit.group(0)}"
