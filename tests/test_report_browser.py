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

VIEWPORT = {"width": 1280, "height": 900}
README_VIEWPORT = {"width": 1280}  # the first screen and the speedup plot (the height: down to its bottom)
README_COLORS = 128  # palette size of the README's PNG (keeps it small)
# The README's screenshot; refreshed by this test when BENCH_UPDATE_SCREENSHOT=1.
README_SHOT = REPO / "docs" / "img" / "report.png"


SHIPPED = [REPO / "tests" / "data" / "report-fixture.jsonl", REPO / "ledger" / "flash-h200-v2.jsonl",
           REPO / "ledger" / "decode-h200.jsonl"]
README_LINE = "flash-h200-v2"  # the line the README's screenshot shows


def _box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


@pytest.mark.parametrize("ledger", SHIPPED, ids=["cpu-fixture", "flash-h200-v2", "decode-h200"])
def test_every_plot_renders_in_chromium_and_a_screenshot_is_saved(browser, tmp_path, ledger):
    paths = report.write(lines.load_path(ledger), tmp_path / "report")
    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(paths["html"].as_uri())
    page.wait_for_load_state("load")
    imgs = page.eval_on_selector_all(
        "img", "els => els.map(e => ({plot: e.dataset.plot, w: e.naturalWidth, h: e.naturalHeight, ok: e.complete,"
               " shown: e.getBoundingClientRect().width}))")
    assert sorted(i["plot"] for i in imgs) == sorted(name for name, _ in report.PLOTS)
    for i in imgs:
        assert i["ok"] and i["w"] > 300 and i["h"] > 100, i
        # Panels of small multiples take the page's width, the others half of it: none shrunk illegibly.
        assert i["shown"] >= (1000 if i["plot"] in report.WIDE_PLOTS else 500), i
    assert page.title().startswith(ledger.stem)
    assert page.locator(".badge").inner_text() == "GO"
    # The first screen (1280 x 900) holds each kernel's geomean with its CI and every bar clause's margin.
    first = _box(page, "#first-screen")
    kernels, clauses = _box(page, "table.kernels"), _box(page, "table.clauses")
    assert first["y"] < VIEWPORT["height"] and kernels["y"] + kernels["height"] <= VIEWPORT["height"]
    assert clauses["y"] + clauses["height"] <= VIEWPORT["height"], clauses
    rows = page.locator("table.kernels tr").all_inner_texts()
    assert len(rows) == 1 + len(lines.load_path(ledger).registration["candidates"])
    assert all("×" in r and "[" in r for r in rows[1:])  # a geomean and its CI in every kernel's row
    assert page.locator("table.clauses tr").count() == 1 + len(report_data_clauses(ledger))
    # The per-config tables are there, folded away.
    assert not page.locator("details.per-config h3").first.is_visible()
    page.locator("details.per-config summary").click()
    assert page.locator("details.per-config h3").first.is_visible()
    page.locator("details.per-config summary").click()
    assert not errors, errors
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / f"{ledger.stem}.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("BENCH_SCREENSHOT_DIR"):  # to look at them
        shutil.copy(shot, Path(os.environ["BENCH_SCREENSHOT_DIR"]) / shot.name)
    if os.environ.get("BENCH_UPDATE_SCREENSHOT") and ledger.stem == README_LINE:
        from PIL import Image

        # The first screen and the speedup plot below it.
        plot = _box(page, 'img[data-plot="speedup"]')
        page.set_viewport_size({"width": README_VIEWPORT["width"], "height": int(plot["y"] + plot["height"]) + 24})
        page.screenshot(path=str(shot))
        README_SHOT.parent.mkdir(parents=True, exist_ok=True)
        # Fast-octree keeps a small colour like the bar's red dash its own (median cut merges it away).
        Image.open(shot).convert("RGB").quantize(README_COLORS, method=Image.Quantize.FASTOCTREE).save(
            README_SHOT, optimize=True)
    page.close()


def report_data_clauses(ledger: Path) -> list:
    from harness.ledger.format import read_rows

    return [r for r in read_rows(ledger) if r.kind == "verdict"][-1].clauses
