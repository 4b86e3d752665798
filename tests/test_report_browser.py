"""The HTML report in a real browser: Debian's headless Chromium driven by playwright.

Skips (saying why) where playwright or a system Chromium is absent; never downloads a
browser (`playwright install` is not used).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.reporting.render import report
from harness.reporting.analysis import lines
from tests.conftest import REPO

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORT = {"width": 1280, "height": 900}
README_VIEWPORT = {"width": 1280, "height": 1320}  # the summary and the four plots
README_COLORS = 128  # palette size of the README's PNG (keeps it small)
# The README's screenshot; refreshed by this test when BENCH_UPDATE_SCREENSHOT=1.
README_SHOT = REPO / "docs" / "img" / "report.png"


def _chromium() -> str | None:
    explicit = os.environ.get("BENCH_CHROMIUM")
    if explicit:
        return explicit
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    exe = _chromium()
    if exe is None:
        pytest.skip("no system Chromium (apt-get install chromium, or set BENCH_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.mark.parametrize("ledger", [REPO / "tests" / "data" / "report-fixture.jsonl", REPO / "ledger" / "flash-h200.jsonl"],
                         ids=["cpu-fixture", "h200"])
def test_every_plot_renders_in_chromium_and_a_screenshot_is_saved(browser, tmp_path, ledger):
    paths = report.write(lines.load_path(ledger), tmp_path / "report")
    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(paths["html"].as_uri())
    page.wait_for_load_state("load")
    imgs = page.eval_on_selector_all(
        "img", "els => els.map(e => ({plot: e.dataset.plot, w: e.naturalWidth, h: e.naturalHeight, ok: e.complete}))")
    assert sorted(i["plot"] for i in imgs) == sorted(name for name, _ in report.PLOTS)
    for i in imgs:
        assert i["ok"] and i["w"] > 300 and i["h"] > 100, i
    assert page.title().startswith(ledger.stem)
    assert page.locator(".badge").inner_text() == "GO"
    assert not errors, errors
    shot = tmp_path / f"{ledger.stem}.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("BENCH_UPDATE_SCREENSHOT") and ledger.stem == "flash-h200":
        from PIL import Image

        page.set_viewport_size(README_VIEWPORT)
        page.screenshot(path=str(shot))
        README_SHOT.parent.mkdir(parents=True, exist_ok=True)
        Image.open(shot).convert("RGB").quantize(README_COLORS).save(README_SHOT, optimize=True)
    page.close()
