"""Full-page screenshots of a line's report, the site's index and a chain page, at the widths
docs/reports.md shows them, written to docs/img/ (PNG, palette-reduced to keep them small).

    python scripts/screenshots.py SITE_DIR REPORT_DIR [--out docs/img]

SITE_DIR is `bench site --out SITE_DIR`'s output, REPORT_DIR `bench report LINE --out
REPORT_DIR`'s. Needs playwright (the test extra) and a system Chromium (apt-get install
chromium, or BENCH_CHROMIUM=/path); no browser is downloaded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

WIDTHS = (1280, 800)
# The first screen's height; a full page is cut at MAX_HEIGHT (the rest is the same tables).
VIEWPORT_HEIGHT = 900
MAX_HEIGHT = 4000
PALETTE_COLORS = 128  # as the README's docs/img/report.png
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium() -> str:
    exe = os.environ.get("BENCH_CHROMIUM") or next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if exe is None:
        sys.exit("no system Chromium: apt-get install chromium, or set BENCH_CHROMIUM")
    return exe


def shoot(browser, url: str, width: int, dest: Path) -> None:
    """One full page at ``width`` px, cut at MAX_HEIGHT, palette-reduced; says so where the
    page is wider than its viewport (something overflows the layout)."""
    from PIL import Image

    page = browser.new_page(viewport={"width": width, "height": VIEWPORT_HEIGHT})
    page.goto(url)
    page.wait_for_load_state("load")
    wide = page.evaluate("document.documentElement.scrollWidth")
    if wide > width:
        print(f"warning: {url} at {width} px: the page is {wide} px wide (something overflows)", file=sys.stderr)
    height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_HEIGHT)
    tmp = dest.with_suffix(".raw.png")
    page.screenshot(path=str(tmp), clip={"x": 0, "y": 0, "width": width, "height": height}, full_page=True)
    page.close()
    Image.open(tmp).convert("RGB").quantize(PALETTE_COLORS, method=Image.Quantize.FASTOCTREE).save(dest, optimize=True)
    tmp.unlink()
    print(f"wrote {dest} ({width}x{height}, {dest.stat().st_size // 1024} KiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", type=Path)
    ap.add_argument("report", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    ap.add_argument("--chain", default=None, help="the chain page's name (default: the site's first)")
    a = ap.parse_args()
    chains = sorted((a.site / "chains").glob("*.html"))
    chain = a.site / "chains" / f"{a.chain}.html" if a.chain else (chains[0] if chains else None)
    if chain is None or not chain.is_file():
        sys.exit(f"no chain page under {a.site / 'chains'}")
    pages = {"report": a.report / "report.html", "site": a.site / "index.html", "chain": chain}
    a.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        for name, path in pages.items():
            for width in WIDTHS:
                shoot(browser, path.resolve().as_uri(), width, a.out / f"{name}-{width}.png")
        browser.close()


if __name__ == "__main__":
    main()
