"""02_align and 03_lens in a real JupyterLab, driven in headless Chromium (smoke profile).

A run folder as the 01 notebook trains it (smoke profile, its seeds: copied from the shared smoke study), JupyterLab is started on copies of
02 and 03 with ``TIEBIAS_PROFILE=smoke`` and ``TIEBIAS_RUN_DIR`` set, and each notebook is run with
"Run All Cells". The test asserts: no error output (in the page and in the saved notebook), every plotly
figure drawn and no wider than its output area, each explorer rendered and updating when typed into
(empty input gives a message, not a traceback), and the saved notebook holds no plotly.js bundle. A pasted
1,160-character text gives each explorer a one-line message saying it was cut; leading spaces show the word.
The exercises' answers stay folded until their summary is clicked. TEACHING.md's first coding exercise, opened in
its notebook without running the rest: the stub's check says what to do, a wrong answer's says what is wrong, the
solution passes, and the solution cell is folded.

Needs Debian's ``chromium`` (apt-get install -y chromium) and ``playwright`` from PyPI; skipped when
either is missing. ``.ci/run`` installs both.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks"
CHROMIUM = Path(os.environ.get("TIEBIAS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LAB_SETTINGS = {  # no autosave, no news or update checks, every cell kept in the page (plots drawn off-screen too)
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}
RUN_TIMEOUT_S = 150  # per notebook, from "Run All Cells" to the last cell done
MAX_SAVED_BYTES = 1_500_000  # a saved notebook with the plotly.js bundle is over 4.8 MB

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
if not CHROMIUM.is_file():
    pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)

pytestmark = pytest.mark.slow


def _free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _what_01_wrote(folder: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore: leave out what 02, 03 and 04 added to a study's folder (lenses, the sweep's models,
    their metrics, figures, records, executed notebooks and report), so 02 and 03 start from 01's output."""
    later = ("lens", "tied_in", "02_", "03_", "04_", "ablation_", "alignment_")
    return {n for n in names if n.startswith(later)} | {"results", "report", "report.html", "summary.json",
                                                        "notebooks", ".lock"}.intersection(names)


@pytest.fixture(scope="module")
def trained_run(smoke_study, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smoke run folder with a tied and an untied model of each of the profile's seeds, as the 01 notebook wrote
    them (02 and 03 refuse a run whose profile seeds are not all trained: a half-made run): copied from the shared
    smoke study (conftest.py), without anything 02, 03 and 04 added.

    ``TIEBIAS_BROWSER_RUN`` names such a folder to use instead (02 and 03 then write their results into it,
    as they do in a study).
    """
    if os.environ.get("TIEBIAS_BROWSER_RUN"):
        return Path(os.environ["TIEBIAS_BROWSER_RUN"])
    run_dir = tmp_path_factory.mktemp("browser") / "run"
    shutil.copytree(smoke_study.path, run_dir, ignore=_what_01_wrote)
    return run_dir


@pytest.fixture(scope="module")
def lab(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A JupyterLab server on copies of 01, 02 and 03; yields (URL template of a notebook in a fresh workspace of its
    own, so no other notebook is open, and the server's root folder)."""
    home = tmp_path_factory.mktemp("lab")
    root = home / "notebooks"
    root.mkdir()
    for name in ("01_train.ipynb", "02_align.ipynb", "03_lens.ipynb"):  # 01: its coding exercise only
        shutil.copy(NB / name, root / name)
    settings = home / "settings"
    for rel, value in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "TIEBIAS_PROFILE": "smoke", "TIEBIAS_RUN_DIR": str(trained_run),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data")}
    log = (home / "lab.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
                             f"--IdentityProvider.token={token}", f"--port={port}", "--ServerApp.port_retries=0",
                             "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
                             "--LabApp.extension_manager=readonly"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not start: {(home / 'lab.log').read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield f"{base}/lab/workspaces/{{name}}/tree/{{name}}.ipynb?reset&token={token}", root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(lab: tuple[str, Path]) -> Iterator[object]:
    """One headless Chromium page."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1280, "height": 1000})
        pg.set_default_timeout(30_000)
        yield pg
        browser.close()


def _run_all(page, url: str, n_code: int, shots: Path) -> None:
    """Open a notebook, run all cells once its kernel is idle, and wait until every code cell has run."""
    page.goto(url)
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-CodeCell", timeout=60_000)
    sync_api.expect(page.locator("#jp-main-statusbar")).to_contain_text("| Idle", timeout=60_000)
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    item = page.get_by_role("menuitem", name="Run All Cells", exact=True)
    sync_api.expect(item).not_to_have_attribute("aria-disabled", "true")
    item.click()
    try:
        page.wait_for_function(
            """n => {
                const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')];
                // a folded cell (a coding exercise's solution) shows no prompt: it has run once it has an output
                const done = cells.filter(c => c.querySelector('.jp-InputPlaceholder')
                    ? c.querySelector('.jp-OutputArea-output') !== null
                    : /\\[\\d+\\]/.test((c.querySelector('.jp-InputPrompt') || {}).textContent || ''));
                return cells.length === n && done.length === n;
            }""", arg=n_code, timeout=RUN_TIMEOUT_S * 1000, polling=500)
    except sync_api.TimeoutError:
        page.screenshot(path=str(shots / "timeout.png"), full_page=True)
        prompts = page.evaluate("() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
                                ".map(p => p.textContent)")
        raise AssertionError(f"cells not all run after {RUN_TIMEOUT_S} s: prompts {prompts}; "
                             f"screenshot {shots / 'timeout.png'}") from None


def _save(page, root: Path, name: str) -> nbformat.NotebookNode:
    """Save the open notebook (Ctrl+S) and read it back from disk."""
    path = root / name
    before = path.stat().st_mtime_ns
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while path.stat().st_mtime_ns == before:
        assert time.monotonic() < deadline, f"{name} was not saved"
        time.sleep(0.2)
    time.sleep(0.5)
    return nbformat.read(path, as_version=4)


def _figures(page) -> list[dict]:
    """Every plotly plot in the visible notebook: its size, its output area's width and whether it has drawn."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .js-plotly-plot')].map(el => {
            const area = el.closest('.jp-OutputArea-output') || el.parentElement;
            const svg = el.querySelector('svg.main-svg');
            return {width: el.getBoundingClientRect().width, area: area.getBoundingClientRect().width,
                    svgs: el.querySelectorAll('svg.main-svg').length,
                    drawn: !!svg && svg.getBoundingClientRect().height > 0 && !!el.querySelector('.draglayer, .cartesianlayer')};
        })""")


def _explore(page, text: str, expect: str) -> str:
    """Type into the visible notebook's explorer, press Enter and wait for the message to contain ``expect``."""
    exp = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tiebias-explorer").first
    box = exp.locator("input[type=text]").first
    box.fill(text)
    box.press("Enter")
    msg = exp.locator(".tiebias-explorer-message")
    sync_api.expect(msg).to_contain_text(expect, timeout=60_000)
    out_text = exp.inner_text()
    assert "Traceback" not in out_text, out_text
    return out_text


def _check(page, root: Path, name: str, min_figures: int) -> nbformat.NotebookNode:
    """No error anywhere, every figure drawn within its output area, nothing bulky saved."""
    body = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").inner_text()
    assert "Traceback (most recent call last)" not in body, body[body.find("Traceback") - 500:][:3000]
    nb = _save(page, root, name)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, f"{name}: {errors[0].ename}: {errors[0].evalue}"
    expected = sum("application/vnd.plotly.v1+json" in o.get("data", {})
                   for c in nb.cells for o in c.get("outputs", []))
    assert expected >= min_figures, f"{name}: {expected} plotly outputs, expected at least {min_figures}"
    page.wait_for_function(
        "n => document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .js-plotly-plot .main-svg').length >= n",
        arg=expected, timeout=30_000)
    figs = _figures(page)
    assert len(figs) == expected, f"{name}: {len(figs)} plots drawn for {expected} figures"
    for f in figs:
        assert f["drawn"] and f["svgs"] >= 1, f"{name}: a figure did not draw: {f}"
        assert f["width"] <= f["area"] + 1, f"{name}: a figure is wider ({f['width']} px) than the notebook ({f['area']} px)"
    size = (root / name).stat().st_size
    assert size < MAX_SAVED_BYTES, f"{name}: saved notebook is {size} bytes (plotly.js embedded?)"
    return nb


def _n_code(name: str) -> int:
    """Number of code cells of a committed notebook."""
    return sum(c.cell_type == "code" for c in nbformat.read(NB / name, as_version=4).cells)


def _tables(page, n: int) -> None:
    """The visible notebook's explorer shows ``n`` tables."""
    sync_api.expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tiebias-explorer table")).to_have_count(n)


def test_02_align_in_jupyterlab(page, lab) -> None:
    url, root = lab
    _run_all(page, url.format(name="02_align"), _n_code("02_align.ipynb"), root.parent)
    _check(page, root, "02_align.ipynb", min_figures=5)
    _explore(page, "love", "'love' ->")
    _tables(page, 1)
    _explore(page, "", "Type a word")
    _tables(page, 0)
    _explore(page, "Ġking", "'Ġking'")


LONG_TEXT = ("the king and the queen rode to the kingdom " * 27)[:1160]  # a pasted paragraph, 1,160 characters


def _visible(page, lab, name: str) -> None:
    """Make sure ``name``'s notebook is open and has run (it is when the test before this one ran it)."""
    url, root = lab
    if f"/tree/{name}.ipynb" not in page.url or not page.locator(
            ".jp-NotebookPanel:not(.lm-mod-hidden) .tiebias-explorer").count():
        _run_all(page, url.format(name=name), _n_code(f"{name}.ipynb"), root.parent)


def _one_line(page, limit: int) -> str:
    """The visible explorer's message: one line of at most ``limit`` characters, shown no taller than two text lines."""
    msg = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tiebias-explorer .tiebias-explorer-message").first
    text = msg.inner_text()
    assert "\n" not in text and len(text) <= limit, text
    assert msg.bounding_box()["height"] <= 60, f"message spans {msg.bounding_box()['height']} px: {text[:200]}"
    return text


def test_02_word_explorer_cuts_long_input_and_strips_spaces(page, lab) -> None:
    from tiebias.output import explorers

    _visible(page, lab, "02_align")
    _explore(page, LONG_TEXT, f"input cut to its first {explorers.MAX_WORD_CHARS} characters (it had 1,160)")
    _one_line(page, 400)
    _tables(page, 1)
    _explore(page, "   king", "showing ␣king")  # leading spaces: the word, not the space token
    assert "Ġ" not in page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tiebias-explorer table").inner_text()


def test_03_lens_in_jupyterlab(page, lab) -> None:
    url, root = lab
    _run_all(page, url.format(name="03_lens"), _n_code("03_lens.ipynb"), root.parent)
    _check(page, root, "03_lens.ipynb", min_figures=5)
    _explore(page, "", "Type a prompt")
    _tables(page, 0)
    _explore(page, "To be, or not to be", "after 'To be, or not to be'")
    _tables(page, 1)


def test_03_prompt_explorer_cuts_long_input(page, lab) -> None:
    from tiebias.output import explorers

    _visible(page, lab, "03_lens")
    _explore(page, LONG_TEXT, f"input cut to its first {explorers.MAX_PROMPT_CHARS} characters (it had 1,160)")
    _one_line(page, 300)
    _tables(page, 1)


def test_02_exercise_answers_stay_folded_until_opened(page, lab) -> None:
    """Each exercise's answer, and each coding exercise's hint, is a <details> block: JupyterLab shows its summary
    only, and the text on a click."""
    _visible(page, lab, "02_align")
    details = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown details")
    answers = details.filter(has=page.locator("summary", has_text="Answer"))
    hints = details.filter(has=page.locator("summary", has_text="Hint"))
    assert answers.count() >= 2, "02 has two or more exercises, each with a folded answer"
    assert hints.count() >= 1, "02's coding exercise has folded hints"
    for first in (answers.first, hints.first):
        first.scroll_into_view_if_needed()
        text = first.locator(":scope > :not(summary)").first
        assert not text.is_visible()
        first.locator("summary").click()
        sync_api.expect(text).to_be_visible()


def _code_cell(page, text: str):
    """The visible notebook's code cell whose source contains ``text`` now, pinned by its position (so the locator
    still finds it after its source is replaced)."""
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell")
    index = cells.evaluate_all("(els, t) => els.findIndex(e => e.textContent.includes(t))", text)
    assert index >= 0, f"no code cell holds {text!r}"
    cell = cells.nth(index)
    cell.scroll_into_view_if_needed()
    return cell


def _run_cell(page, cell, source: str | None = None) -> str:
    """Replace a cell's source (if given), run it with Shift+Enter and return its output once it has one."""
    editor = cell.locator(".jp-InputArea-editor .cm-content")
    editor.click()
    if source is not None:
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(source)
    before = cell.locator(".jp-InputPrompt").inner_text()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function("([el, b]) => /\\[\\d+\\]/.test(el.textContent) && el.textContent !== b",
                           arg=[cell.locator(".jp-InputPrompt").element_handle(), before], timeout=60_000)
    return cell.locator(".jp-OutputArea").inner_text()


def test_teaching_first_coding_exercise_runs_its_checker_in_jupyterlab(page, lab) -> None:
    """The lesson plan's first exercise, as a student meets it: open its notebook, run the stub and its check (a ✗
    saying what to do), write a wrong answer (a ✗ saying what is wrong), then the solution (a ✓)."""
    import re

    from tiebias.teach import coding

    teaching = (NB.parent / "TEACHING.md").read_text()
    exercise_id = re.search(r"Coding exercise (\d\d-code)", teaching).group(1)
    name = coding.CHECKERS[exercise_id][0]
    notebook = next(p.stem for p in NB.glob(f"{exercise_id[:2]}_*.ipynb"))
    sources = {c["id"]: "".join(c["source"]) for c in json.loads((NB / f"{notebook}.ipynb").read_text())["cells"]}
    solution = sources[f"exercise-{exercise_id}-solution"].split("from tiebias.teach")[0].rstrip() + "\n"
    wrong = "\n".join(solution.splitlines()[:-1]) + "\n    return -" + solution.splitlines()[-1].split("return ")[1]
    url, _ = lab
    page.goto(url.format(name=notebook))
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-CodeCell", timeout=60_000)
    sync_api.expect(page.locator("#jp-main-statusbar")).to_contain_text("| Idle", timeout=60_000)
    heading = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown").filter(
        has_text=f"Coding exercise {exercise_id}").first
    heading.scroll_into_view_if_needed()
    assert "Spend up to" in heading.inner_text() and "Hint 1" in heading.inner_text()
    stub = _code_cell(page, "raise NotImplementedError")
    check = _code_cell(page, f'run_check("{exercise_id}", {name})')
    _run_cell(page, stub)
    out = _run_cell(page, check)
    assert "✗" in out and "NotImplementedError" in out, out
    _run_cell(page, stub, wrong)
    out = _run_cell(page, check)
    assert "✗" in out and "✗ " + exercise_id in out, out
    _run_cell(page, stub, solution)
    out = _run_cell(page, check)
    assert "✓" in out, out
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell")
    folded = page.evaluate("""() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')]
        .filter(c => c.querySelector('.jp-InputPlaceholder')).length""")
    assert cells.count() and folded >= 1, "the solution cell is folded"
