"""The reproduction report read offline in headless Chromium, reached from report.html as a reader would."""

from __future__ import annotations

import json
import os
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
