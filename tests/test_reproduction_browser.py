"""The reproduction report read offline in headless Chromium, reached from report.html as a reader would; report.html
opened inside JupyterLab, its figures drawn."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("TIEBIAS_CHROMIUM", "/usr/bin/chromium"))
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
if not CHROMIUM.is_file():
    pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)


def test_report_links_the_reproduction_page_and_it_shows_every_table_offline(smoke_study) -> None:
    data = json.loads((smoke_study.path / "reproduction.json").read_text())
    fetched: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()

        def block(route) -> None:  # offline: anything but a local file is refused and remembered
            if not route.request.url.startswith("file://"):
                fetched.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        page.route("**/*", block)
        page.goto((smoke_study.path / "report.html").as_uri())
        page.click("text=reproduction.html")
        page.wait_for_load_state()
        assert page.url.endswith("reproduction.html")
        tables = page.locator("table")
        assert tables.count() == 4  # per claim, every number, settings, compute
        for i in range(4):
            assert tables.nth(i).is_visible() and tables.nth(i).locator("tr").count() > 1
        numbers = tables.nth(1).locator("tr").count() - 1
        assert numbers == sum(not r["setting"] for r in data["rows"])
        assert "Not meaningful" in page.inner_text("body")
        browser.close()
    assert not fetched, fetched


@pytest.fixture
def lab_on(tmp_path: Path):
    """Start JupyterLab (no autosave, no news) with its root at a folder; yields a function giving a file's URL in a
    fresh workspace. The server is stopped afterwards."""
    procs: list[subprocess.Popen] = []

    def start(root: Path):
        port, token = _free_port(), secrets.token_hex(16)
        env = {**os.environ, **{k: str(tmp_path / k.lower()) for k in ("JUPYTERLAB_SETTINGS_DIR",
               "JUPYTERLAB_WORKSPACES_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR")}}
        log = tmp_path / "lab.log"
        procs.append(subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
                                       f"--IdentityProvider.token={token}", f"--port={port}",
                                       "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
                                       f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
                                       "--LabApp.extension_manager=readonly"],
                                      env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=tmp_path))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if procs[-1].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.5)
        return lambda path: f"{base}/lab/workspaces/report/tree/{path}?reset&token={token}"

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_report_opened_in_jupyterlab_draws_every_figure_once_trusted(smoke_study, lab_on) -> None:
    """report.html opened from JupyterLab's file browser (its HTML viewer: the page in a sandboxed frame, scripts only
    after "Trust HTML", and the server refusing what the page fetches): before trusting, a note says what to click;
    after it, every key figure the run has is drawn, in the page (no frame)."""
    from tiebias.output import report

    expected = [f for f in report.KEY_FIGURES if (smoke_study.path / "figures" / f"{f}.json").is_file()]
    assert len(expected) >= 5, expected
    url = lab_on(smoke_study.path)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(url("report.html"))
        viewer = page.frame_locator(".jp-HTMLViewer iframe")
        sync_api.expect(viewer.locator(".tiebias-needs-scripts")).to_contain_text("Trust HTML", timeout=120_000)
        page.locator(".jp-Toolbar").get_by_text("Trust HTML", exact=True).click()
        plots = viewer.locator(".js-plotly-plot")
        sync_api.expect(plots).to_have_count(len(expected), timeout=120_000)
        for i in range(len(expected)):
            plot = plots.nth(i)
            plot.scroll_into_view_if_needed()
            sync_api.expect(plot.locator("svg.main-svg").first).to_be_visible(timeout=30_000)
            assert plot.locator(".cartesianlayer, .barlayer, .scatterlayer").count() > 0, expected[i]
        assert viewer.locator(".tiebias-needs-scripts").count() == 0
        body = viewer.locator("body").inner_text()
        assert "403" not in body and "Forbidden" not in body
        assert viewer.locator("iframe").count() == 0
        browser.close()
