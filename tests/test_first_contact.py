"""Issue 51 item 4: a closed line's verdict read back (`bench verdict LINE --show`), and the
report of a line with nothing measured yet (one short page saying what to run)."""

from __future__ import annotations

import json

from tests.conftest import REPO, TINY, init_repo, run_bench


def test_verdict_show_prints_a_closed_lines_written_verdict():
    # flash-h200-peers is closed NO-GO in the shipped ledgers: read only, exit as the verdict.
    before = (REPO / "ledger" / "flash-h200-peers.jsonl").read_bytes()
    r = run_bench(REPO, "verdict", "flash-h200-peers", "--show")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NO-GO — line flash-h200-peers closed at ledger row 49" in r.stdout
    j = run_bench(REPO, "verdict", "registrations/flash-h200-v2.toml", "--show", "--format", "json")
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert doc["outcome"] == "GO" and doc["written"] is True and doc["row"]["seq"] == 37
    assert (REPO / "ledger" / "flash-h200-peers.jsonl").read_bytes() == before


def test_verdict_show_on_an_open_line_says_what_to_run(repo):
    assert run_bench(repo, "register", "registrations/tiny.toml").returncode == 0
    r = run_bench(repo, "verdict", "tiny", "--show")
    assert r.returncode == 2 and r.stdout == ""
    assert "no verdict yet" in r.stderr and "bench verdict tiny --no-commit" in r.stderr
    both = run_bench(repo, "verdict", "tiny", "--show", "--no-commit")
    assert both.returncode == 2 and "pass one of them" in both.stderr


def test_a_line_with_nothing_measured_gets_one_short_report(tmp_path):
    repo = init_repo(tmp_path / "proj", {"tiny": TINY})
    assert run_bench(repo, "register", "registrations/tiny.toml").returncode == 0
    r = run_bench(repo, "report", "tiny", "--out", "out")
    assert r.returncode == 0, r.stderr
    assert "nothing measured yet: run bench sweep tiny" in r.stdout
    out = repo / "out"
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.md"]  # no empty plot frames
    md = (out / "report.md").read_text()
    assert "`bench sweep tiny`" in md and len(md.splitlines()) < 40
    html = (out / "report.html").read_text()
    assert "<img" not in html and "bench sweep tiny" in html
