"""`bench site` (issue 29 item 6): one static site over every ledger — an index of the lines,
each line's report, a page per amendment chain with the headline figure per line and
regressions marked — checked on real ledgers in a real git repository, through the CLI, and in
Chromium (skipped, saying why, where playwright or a system Chromium is absent).

The synthetic chain copies the shipped A/A line's rows into new ledgers (rows appended through
``Ledger``, so every chain verifies): ``aa`` as shipped (closed NO-GO), and three lines amending
it whose speedups (and CIs) are scaled: 10% lower (a regression), 0.1% lower (within 2%), and
3% lower with a CI wide enough to overlap ``aa``'s (within noise). Raw samples are dropped from
the scaled rows so that ``ledger verify`` has no samples to recompute them from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.ledger.store import Ledger
from tests.conftest import REPO, git, init_repo, run_bench
from tests.test_report_browser import VIEWPORT

# The rows Ledger.append writes itself.
WRITTEN = ("schema", "seq", "kind", "line", "prev_hash", "hash")
# line -> (amends, factor on speedup, on its CI low, on its CI high)
AMENDERS = {"aa-slow": ("aa", 0.90, 0.90, 0.90), "aa-same": ("aa", 0.999, 0.999, 0.999),
            "aa-wide": ("aa", 0.97, 0.90, 1.05)}


def copy_line(root: Path, src: str, line: str, amends=None, factors=None) -> None:
    """``src``'s shipped rows appended to ledger/<line>.jsonl; with ``factors``, its speedups
    scaled (its raw samples and its verdict left out)."""
    led = Ledger(root, line)
    for raw in (REPO / "ledger" / f"{src}.jsonl").read_text().splitlines():
        row = json.loads(raw)
        fields = {k: v for k, v in row.items() if k not in WRITTEN}
        if row["kind"] == "registered":  # the new line's own registration (verify holds row 0 to the line)
            fields["amends"] = amends
            fields["registration"] = {**fields["registration"], "amends": amends, "line": line,
                                      "path": f"registrations/{line}.toml"}
        elif row["kind"] == "verdict" and factors:
            continue
        elif row["kind"] == "result" and factors:
            fields["timing"] = {k: v for k, v in fields["timing"].items() if k != "arms"}
            m = fields["metrics"]
            fields["metrics"] = {**m, **{k: m[k] * f for k, f in zip(("speedup", "speedup_ci_low", "speedup_ci_high"),
                                                                       factors)}}
        led.append(row["kind"], fields)


def chain(root: Path, amenders: dict) -> Path:
    """A committed repository at ``root`` holding ``aa`` and the lines ``amenders`` name."""
    init_repo(root, {})
    copy_line(root, "aa-h200", "aa")
    for line, (amends, *factors) in amenders.items():
        copy_line(root, "aa-h200", line, amends, factors)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "ledgers")
    return root


@pytest.fixture(scope="module")
def chain_repo(tmp_path_factory) -> Path:
    return chain(tmp_path_factory.mktemp("site") / "proj", AMENDERS)


@pytest.fixture(scope="module")
def small_site(tmp_path_factory) -> tuple:
    """`bench site` over aa and aa-slow (each line's report takes seconds: two lines only)."""
    root = chain(tmp_path_factory.mktemp("small") / "proj", {"aa-slow": AMENDERS["aa-slow"]})
    out = root.parent / "site"
    return root, out, run_bench(root, "site", "--out", str(out))


def test_a_chain_marks_the_regression_and_not_the_noise(chain_repo):
    from harness.reporting.analysis.lines import load
    from harness.reporting.analysis.site import FIRST, REGRESSION, REGRESSION_MIN, WITHIN_NOISE, site_data

    site, reports = site_data(chain_repo)
    assert sorted(reports) == ["aa", "aa-same", "aa-slow", "aa-wide"]
    (chain,) = site.chains
    assert chain.root == "aa" and chain.lines[0] == "aa" and set(chain.lines) == {"aa", *AMENDERS}
    steps = {s.headline.line: s for s in chain.steps}
    assert steps["aa"].mark == FIRST and steps["aa"].parent is None
    first = steps["aa"].headline
    # Closed: the verdict's figure, inside its interval (the rows' bootstrap CIs, aggregated).
    assert first.decided and first.value == load(chain_repo, "aa").verdict.primary_value
    assert first.low < first.value < first.high and first.device == "NVIDIA H200"
    slow, same, wide = steps["aa-slow"], steps["aa-same"], steps["aa-wide"]
    assert slow.mark == REGRESSION and slow.parent == "aa" and slow.change == pytest.approx(-0.10)
    assert slow.headline.high < first.low and "outside both intervals" in slow.why
    assert not slow.headline.decided and slow.headline.value == pytest.approx(first.value * 0.9)
    assert same.mark == WITHIN_NOISE and -REGRESSION_MIN < same.change < 0 and "within 2%" in same.why
    # Worse by more than the threshold, but the intervals overlap: noise, not a regression.
    assert wide.mark == WITHIN_NOISE and wide.change < -REGRESSION_MIN and "intervals overlap" in wide.why
    assert chain.regressions == 1 and chain.text == "aa, aa-same (amends aa), aa-slow (amends aa), aa-wide (amends aa)"
    entries = {e.status.line: e for e in site.entries}
    assert entries["aa"].amended_by == ("aa-same", "aa-slow", "aa-wide") and entries["aa"].status.outcome == "NO-GO"
    assert entries["aa-slow"].amends == "aa" and entries["aa-slow"].chain == "aa" and entries["aa-slow"].page


def test_an_improvement_and_a_lower_is_better_metric(chain_repo):
    from dataclasses import replace

    from harness.reporting.analysis.site import IMPROVED, NOT_COMPARED, REGRESSION, compare_step, site_data

    site, _ = site_data(chain_repo, ["aa-slow"])
    steps = {s.headline.line: s.headline for c in site.chains for s in c.steps}
    assert compare_step(steps["aa-slow"], steps["aa"])[0] == IMPROVED
    # ms: lower is better, so a larger figure is the regression.
    a, b = (replace(steps["aa"], expr="min(ms)", metric="ms", value=v, low=v * 0.99, high=v * 1.01) for v in (1.0, 1.1))
    assert compare_step(a, b)[0] == REGRESSION and compare_step(b, a)[0] == IMPROVED
    other = replace(steps["aa-slow"], expr="max(speedup)")
    assert compare_step(steps["aa"], other)[0] == NOT_COMPARED


def test_bench_site_writes_relative_self_contained_pages(small_site):
    root, out, r = small_site
    assert r.returncode == 0, r.stderr
    assert "regression: aa-slow against aa: 10.0% worse than aa" in r.stdout
    assert "2 lines, 2 line pages, 1 chain page" in r.stdout
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))
    assert pages == ["chains/aa.html", "index.html", "lines/aa-slow/report.html", "lines/aa/report.html"]
    for page in out.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r'(src|href)="(https?:|/)', text), page  # nothing fetched, no absolute link
        for href in re.findall(r'href="([^"#]+)"', text):
            assert (page.parent / href).resolve().is_file(), (page, href)
    chain_page = (out / "chains" / "aa.html").read_text()
    assert 'data-line="aa-slow" data-mark="REGRESSION" class="regressed"' in chain_page
    assert 'data-line="aa" data-mark="FIRST"' in chain_page and "data:image/png;base64," in chain_page
    index = (out / "index.html").read_text()
    assert 'href="lines/aa/report.html"' in index and 'href="chains/aa.html"' in index
    assert "1 regression" in index and "NO-GO" in index
    report = (out / "lines" / "aa-slow" / "report.html").read_text()
    assert 'href="../../index.html"' in report and 'href="../../chains/aa.html"' in report


def test_the_index_and_chain_pages_are_deterministic(chain_repo):
    from harness.reporting.analysis.site import site_data
    from harness.reporting.render.site import chain_html, chain_plot, index_html

    def pages():
        site, _ = site_data(chain_repo)
        return index_html(site), [chain_html(site, c, chain_plot(c)) for c in site.chains]

    assert pages() == pages()


def test_the_shipped_chain_compares_only_like_with_like(tmp_path):
    """Issue 51: flash-h200-v2 changed the rate protocol (interleaved → sustained). Its sustained
    513.6 TFLOP/s is not comparable with flash-h200's interleaved 561.0; both lines' rows hold the
    interleaved medians, so the step compares those instead (561.0 against 558.7: within noise,
    as `bench compare` says SAME). The peer line's speedup is another metric: not comparable,
    never drawn on the TFLOP/s axis nor joined to it."""
    from harness.reporting.analysis.site import (NOT_COMPARABLE, NOT_COMPARED, REGRESSION, SAME_BASIS, WITHIN_NOISE,
                                                 site_data)
    from harness.reporting.render.site import chain_html, chain_joins, chain_plot, chain_points

    site, reports = site_data(REPO, ["flash-h200-v2"])
    assert {"flash-h200", "flash-h200-peers", "flash-h200-v2"} <= set(reports)
    (chain,) = site.chains
    steps = {s.headline.line: s for s in chain.steps}
    first, second, peers = steps["flash-h200"], steps["flash-h200-v2"], steps["flash-h200-peers"]
    assert first.headline.protocols == ("interleaved",) and second.headline.protocols == ("sustained",)
    assert round(first.headline.value, 1) == 561.0 and round(second.headline.value, 1) == 513.6
    # The same-protocol figures, restated from the interleaved medians.
    assert round(first.headline.same[0], 1) == 561.0 and round(second.headline.same[0], 1) == 558.7
    assert second.mark == WITHIN_NOISE and second.basis == SAME_BASIS and round(second.change, 3) == -0.004
    assert second.why.startswith("same protocol (interleaved medians of both lines): flash-h200 (interleaved): "
                                 "561.0 TFLOP/s against flash-h200-v2 (interleaved): 558.7 TFLOP/s")
    assert second.caveats == ("the primaries are not comparable: protocol changed (flash-h200 (interleaved): "
                              "561.0 TFLOP/s; flash-h200-v2 (sustained): 513.6 TFLOP/s)",)
    assert peers.mark == NOT_COMPARABLE and peers.change is None and peers.basis is None
    assert peers.why == ("not comparable: metric changed (flash-h200-v2 (sustained): 513.6 TFLOP/s; "
                         "flash-h200-peers (interleaved): 0.8675×)")
    assert chain.regressions == 0 and all(s.mark != REGRESSION for s in chain.steps)
    if "flash-h200-v3" in steps:  # registered, nothing measured yet
        assert steps["flash-h200-v3"].mark == NOT_COMPARED
    # The plot: one axis per metric and protocol; only the compared pair joined, on its own axis.
    points = chain_points(chain)
    on = {key: sorted((p[1].headline.line, round(p[2], 1), p[5]) for p in pts) for key, pts in points.items()}
    assert on == {("tflops", ("interleaved",)): [("flash-h200", 561.0, False), ("flash-h200-v2", 558.7, True)],
                  ("tflops", ("sustained",)): [("flash-h200-v2", 513.6, False)],
                  ("speedup", ("interleaved",)): [("flash-h200-peers", 0.9, False)]}
    assert chain_joins(chain, points) == [(("tflops", ("interleaved",)), "flash-h200", "flash-h200-v2")]
    # The page's text: no regression, both figures of each non-comparable step.
    png = chain_plot(chain)
    html = chain_html(site, chain, png)
    assert 'data-mark="REGRESSION"' not in html and 'class="regressed"' not in html
    assert 'data-line="flash-h200-v2" data-mark="WITHIN NOISE"' in html
    assert 'data-line="flash-h200-peers" data-mark="NOT COMPARABLE"' in html
    assert "not comparable: protocol changed (flash-h200 (interleaved): 561.0 TFLOP/s; flash-h200-v2 " \
           "(sustained): 513.6 TFLOP/s)" in html
    assert "not comparable: metric changed" in html and "0.8675×" in html
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_index_groups_lines_by_workload():
    """Issue 50 item 5: the index lists each workload's lines together, under its name (one
    workload's site, as small_site's, has no section rows)."""
    from harness.reporting.analysis.site import site_data
    from harness.reporting.render.site import index_html

    site, _ = site_data(REPO, ["decode-small-h200", "example"])
    groups = site.by_workload()
    assert [w for w, _ in groups] == ["attention", "decode"]
    assert [e.status.line for e in dict(groups)["decode"]] == ["decode-small-h200", "decode-small-h200-v2"]
    html = index_html(site)
    order = [html.index(s) for s in ('data-workload="attention"', 'data-line="example"', 'data-workload="decode"',
                                     'data-line="decode-small-h200"', 'data-line="decode-small-h200-v2"')]
    assert order == sorted(order)


def test_a_gone_and_a_broken_ledger_are_listed_without_a_page(tmp_path):
    from harness.reporting.analysis.site import NOT_COMPARED, site_data

    root = chain(tmp_path / "proj", {"aa-slow": AMENDERS["aa-slow"]})
    copy_line(root, "aa-h200", "bb")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "bb")
    (root / "ledger" / "aa.jsonl").unlink()  # committed, gone from the work tree
    with open(root / "ledger" / "bb.jsonl", "a") as fh:
        fh.write('{"kind": "result"\n')
    site, reports = site_data(root)
    assert sorted(reports) == ["aa-slow"]
    entries = {e.status.line: e for e in site.entries}
    assert entries["aa"].status.state == "GONE" and not entries["aa"].page and entries["aa"].headline is None
    assert entries["bb"].status.state.startswith("BROKEN") and not entries["bb"].page
    (c,) = site.chains
    assert c.lines == ("aa", "aa-slow") and c.text == "aa → aa-slow"
    assert c.steps[1].mark == NOT_COMPARED and c.steps[1].why == "aa's ledger is not here"


def test_bad_input_is_one_line_exit_2_and_nothing_written(chain_repo, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    r = run_bench(chain_repo, "site", "--out", str(taken))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "is a file, not a directory" in r.stderr
    r = run_bench(chain_repo, "site", "--out", str(taken / "sub"))
    assert r.returncode == 2 and "is a file, not a directory" in r.stderr
    assert taken.read_text() == "mine\n"
    r = run_bench(chain_repo, "site", "aa@abc123", "--out", str(tmp_path / "new"))
    assert r.returncode == 2 and "not LINE@COMMIT" in r.stderr
    r = run_bench(chain_repo, "site", "nope", "--out", str(tmp_path / "new"))
    assert r.returncode == 2 and "no line named 'nope'" in r.stderr and "aa-slow" in r.stderr
    assert not (tmp_path / "new").exists()


# --- in Chromium ------------------------------------------------------------------------------------


def test_the_site_in_chromium_index_chain_and_line_pages(browser, small_site, tmp_path):
    _, site, r = small_site
    assert r.returncode == 0, r.stderr
    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto((site / "index.html").as_uri())
    assert page.title() == "bench — every line"
    assert page.eval_on_selector_all("table.lines tr[data-line]", "rs => rs.map(r => r.dataset.line)") == [
        "aa", "aa-slow"]
    page.screenshot(path=str(tmp_path / "index.png"), full_page=True)
    page.click("ul.chains a")  # index → chain page
    page.wait_for_load_state("load")
    assert page.url.endswith("/chains/aa.html")
    img = page.eval_on_selector("img[data-plot=chain]", "e => ({w: e.naturalWidth, h: e.naturalHeight, ok: e.complete})")
    assert img["ok"] and img["w"] > 300 and img["h"] > 100, img
    assert page.get_attribute("tr[data-line='aa-slow']", "data-mark") == "REGRESSION"
    page.screenshot(path=str(tmp_path / "chain.png"), full_page=True)
    page.click("tr[data-line='aa-slow'] td a")  # chain → the line's report
    page.wait_for_load_state("load")
    assert page.url.endswith("/lines/aa-slow/report.html") and page.title().startswith("aa-slow")
    assert page.locator(".badge").inner_text() == "provisional"
    page.screenshot(path=str(tmp_path / "line.png"))
    page.click("nav.site-nav a >> nth=0")  # back to the index
    page.wait_for_load_state("load")
    assert page.url.endswith("/index.html")
    assert not errors, errors
    for shot in ("index", "chain", "line"):
        assert (tmp_path / f"{shot}.png").stat().st_size > 10_000
    page.close()
