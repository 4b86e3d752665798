"""One protocol per figure: every rate is shown beside the median and clock it was computed
from (sustained beside a sustained rate), every speedup beside the interleaved medians and
clock, and each column names its protocol — in the report, `ledger show`, `compare`, `route`
and the sweep's lines. The shipped flash-h200-v2 ledger is the case: its deciding 513.6
TFLOP/s comes from the sustained phase (2.141 ms at 1776 MHz), its speedup from the
interleaved rounds (1.968 ms against the baseline's 11.31 ms, at 1980 MHz).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.ledger.rows import load
from harness.ledger import audit
from harness.vocab import metrics
from harness.ledger.store import Ledger
from harness.ledger.format import read_rows
from harness.reporting.analysis import compare, lines, protocol, report, route
from harness.reporting.render import plots
from harness.reporting.render import report as report_out
from harness.reporting.render import route as route_out
from harness.reporting.render import rows as row_text
from harness.reporting.render import sweep as sweep_out
from harness.workloads.shipped import ATTENTION
from tests.conftest import REPO, bench_env, git, run_bench

V2 = REPO / "ledger" / "flash-h200-v2.jsonl"
DECIDING = "attention/b8/h16/kv16/n4096/d128/float16/full"  # where min(tflops ...) = 513.6 is measured


def _deciding_row() -> dict:
    (row,) = [r for r in read_rows(V2) if r.kind == "result" and r.config_key == DECIDING
              and r.candidate == "triton_flash"]
    return row


def _cells(header_line: str, row_line: str) -> dict[str, str]:
    """A Markdown table row as {column: cell}."""
    split = lambda s: [c.strip() for c in s.strip().strip("|").split(" | ")]  # noqa: E731
    header, cells = split(header_line), split(row_line)
    assert len(header) == len(cells), (header, cells)
    return dict(zip(header, cells))


@pytest.fixture
def v2_repo(repo: Path) -> Path:
    shutil.copy(V2, repo / "ledger" / V2.name)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the shipped flash-h200-v2 ledger")
    return repo


# ------------------------------------------------------------------ the metric table


def test_every_metric_names_its_protocol_and_a_row_resolves_it():
    assert {m.protocol for m in metrics.METRICS} == {metrics.INTERLEAVED, metrics.RATES}
    row = _deciding_row()
    assert metrics.rate_protocol(row) == metrics.SUSTAINED
    for name in ("tflops", "gbps", "tflops_frac", "ms", "sm_mhz", "power_w"):
        assert metrics.protocol(name, row) == metrics.SUSTAINED, name
    for name in ("speedup", "speedup_ci_low", "interleaved_ms", "baseline_ms", "control", "host_us"):
        assert metrics.protocol(name, row) == metrics.INTERLEAVED, name
    older = load({k: v for k, v in row.dump().items() if k != "rate_protocol"})  # rows before the sustained phase
    assert metrics.protocol("tflops", older) == metrics.INTERLEAVED
    with pytest.raises(ValueError, match="rate_protocol 'loop'"):
        metrics.rate_protocol(row.replace(rate_protocol="loop"))
    with pytest.raises(ValueError, match="protocol must be"):
        metrics.Metric("x", "ms", "a metric that says nothing of its protocol", False)


def test_verify_names_a_rate_protocol_that_is_no_protocol():
    row = _deciding_row()
    assert audit.recompute(row) == []
    (bad,) = audit.recompute(row.replace(rate_protocol="burst"))
    assert bad.field == "rate_protocol" and bad.stored == "burst" and "not a timing protocol" in bad.recomputed


def test_each_figure_reads_its_own_protocols_record():
    row = _deciding_row()
    sus, inter = protocol.rates(row), protocol.timed(row, metrics.INTERLEAVED)
    assert sus.text() == "sustained 2.141 ms at 1776 MHz" and sus.median_ms == row.metrics["ms"]
    assert inter.text() == "interleaved 1.968 ms at 1980 MHz" and inter.median_ms == row.metrics["interleaved_ms"]
    assert protocol.of_metric(row, "tflops") == sus and protocol.of_metric(row, "speedup") == inter
    assert protocol.speedup_text(row) == "interleaved 1.968 ms vs baseline 11.31 ms at 1980 MHz"
    with pytest.raises(ValueError, match="no sustained phase of the baseline"):
        protocol.timed(row, metrics.SUSTAINED, "baseline")


# ------------------------------------------------------------------ the report


def test_the_report_shows_the_deciding_rate_beside_its_sustained_time_and_clock(v2_repo, tmp_path):
    out = tmp_path / "report"
    r = run_bench(v2_repo, "report", "flash-h200-v2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stdout.split())  # the summary wraps at the terminal's width
    assert "→ 513.6 (>= 500, 2 rows); measured: sustained 2.141 ms at 1776 MHz (triton_flash @ " in said
    text = (out / "report.md").read_text()
    # The bar's clause and the primary name where their value was measured.
    assert ("| 513.6 | >= | 500 | +13.59 (+2.7%) | [513.1, 514.1] | 2 | pass | sustained 2.141 ms at 1776 MHz "
            "(triton_flash @ attention/b8/h16/kv16/n4096/d128/float16/full) |") in text
    assert "| 5.749 | >= | 4.5 | +1.249 (+27.8%) | [" in text
    assert "| pass | interleaved 1.968 ms vs baseline 11.31 ms at 1980 MHz (triton_flash @ " in text
    assert "= **513.6** (measured: sustained 2.141 ms at 1776 MHz (triton_flash @ " in text
    # The config table: the rate beside the sustained median and clock, the speedup beside the interleaved ones.
    table = text.split(f"### {DECIDING}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    (row_line,) = [t for t in table if t.startswith("| triton_flash ")]
    cells = _cells(table[0], row_line)
    header = list(cells)
    assert cells["TFLOP/s"] == "513.6" and cells["rates from"] == "sustained"
    assert cells["rate ms [p20–p80]"].startswith("2.141 [") and cells["rate SM clock"] == "1776 MHz"
    assert cells["rate power W"] == "690"
    assert header.index("rates from") + 1 == header.index("rate ms [p20–p80]") \
        and header.index("rate SM clock") + 2 == header.index("TFLOP/s")  # side by side
    assert cells["speedup [95% CI]"].startswith("5.749× [") and cells["interleaved ms [p20–p80]"].startswith("1.968 [")
    assert cells["interleaved SM clock"] == "1980 MHz"
    assert header.index("speedup [95% CI]") + 1 == header.index("interleaved ms [p20–p80]")
    # The baseline has no sustained phase: its rates are named as its interleaved median's.
    base = _cells(table[0], next(t for t in table if t.startswith("| cublas_stack (baseline) ")))
    assert base["rates from"] == "interleaved" and base["rate ms [p20–p80]"] == base["interleaved ms [p20–p80]"]
    assert base["TFLOP/s"] == "97.19"  # flops over the baseline's 11.31 ms, not over the candidate's
    # The legend names each column's protocol.
    legend = " ".join(text.split("## Results per config\n\n", 1)[1].split("\n\n", 1)[0].split())
    assert legend.startswith("Columns by protocol. Interleaved rounds") and "sustained: the candidate's calls back" \
        in legend and 'named in "rates from"' in legend
    page = (out / "report.html").read_text()
    assert ('<td class="num">sustained</td><td class="num">2.141 [2.134–2.167]</td><td class="num">1776 MHz</td>'
            '<td class="num">690</td><td class="num">513.6</td>') in page
    assert "<th>rates from</th>" in page and "Columns by protocol." in page


def test_a_line_without_a_sustained_phase_says_every_column_is_interleaved():
    data = report.report_data(lines.load_path(REPO / "ledger" / "flash-h200.jsonl"))
    assert "rates from" not in data["header"] and data["legend"].startswith("Every column comes from the interleaved")
    assert data["header"][1:4] == list(report.SPEEDUP_COLUMNS)
    assert data["primary"]["source"].startswith("interleaved ") and "(triton_flash @ " in data["primary"]["source"]


def test_the_plots_name_and_mark_the_sustained_phase():
    results = lines.load_path(V2).results()
    images = report_out.figures(lines.load_path(V2))
    assert all(png[:4] == b"\x89PNG" for png in images.values())
    without = [load({k: v for k, v in r.dump().items() if k not in ("rate_protocol", "sustained")}) for r in results]
    assert plots.clock_plot(results) != plots.clock_plot(without)  # the sustained phases' clocks are drawn
    assert plots.roofline_plot(results) != plots.roofline_plot(without)  # marked as sustained rates


# ------------------------------------------------------------------ ledger show, the sweep's lines


def test_ledger_show_puts_each_figure_beside_its_own_time_and_clock(v2_repo):
    wide = {**bench_env(), "COLUMNS": "1000"}
    r = subprocess.run([sys.executable, "-m", "harness", "ledger", "show", "flash-h200-v2", "--kind", "result"],
                       cwd=v2_repo, capture_output=True, text=True, env=wide, timeout=120)
    assert r.returncode == 0, r.stderr
    want = ("speedup 5.749× [5.741, 5.756] (interleaved 1.968 ms vs baseline 11.31 ms at 1980 MHz); 513.6 TFLOP/s, "
            "250.8 GB/s (sustained 2.141 ms at 1776 MHz, 690 W); host 432 µs/call, control 0.9998")
    assert want in r.stdout
    assert row_text.outcome_reason(_deciding_row()) == want
    tidy = run_bench(v2_repo, "ledger", "show", "flash-h200-v2", "--format", "tidy")
    assert tidy.returncode == 0, tidy.stderr
    (rec,) = [x for x in csv.DictReader(io.StringIO(tidy.stdout))
              if x["config_key"] == DECIDING and x["candidate"] == "triton_flash"]
    assert rec["rate_protocol"] == "sustained" and float(rec["tflops"]) == pytest.approx(513.587, abs=1e-3)
    assert float(rec["ms"]) == pytest.approx(2.1408, abs=1e-4) and float(rec["sm_mhz"]) == pytest.approx(1776.03)
    assert float(rec["sm_clock_mean_mhz"]) == 1980.0  # the interleaved rounds' clock, its own column


def test_the_sweeps_lines_and_table_keep_each_figure_with_its_protocol(monkeypatch):
    from rich.console import Console

    rows = [r for r in read_rows(V2) if r.kind == "result" and r.config_key == DECIDING]
    line = sweep_out.config_progress(1, 12, DECIDING, rows, 12.0)
    assert "triton_flash result: speedup 5.749× [5.741, 5.756] (interleaved 1.968 ms vs baseline 11.31 ms at " \
           "1980 MHz); 513.6 TFLOP/s, 250.8 GB/s (sustained 2.141 ms at 1776 MHz, 690 W)" in line
    # The sweep's closing table, printed where a wide console records it (no column folds).
    c = Console(width=400, record=True, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(sweep_out, "console", lambda: c)
    sweep_out.render_sweep_summary({"line": "flash-h200-v2", "commit": rows[0].commit, "counts": {"result": 3}}, rows)
    shown = c.export_text()
    (tf,) = [t for t in shown.splitlines() if "triton_flash" in t]
    assert "1.968 ms vs baseline 11.31 ms at 1980 MHz" in tf and "513.6" in tf and "sustained 2.141 ms at 1776 MHz" in tf
    assert "interleaved ms (vs baseline) at clock" in shown and "rate from (protocol, ms, clock)" in shown


# ------------------------------------------------------------------ compare, route


def test_compare_shows_the_interleaved_medians_and_clocks_its_ratio_is_made_of(v2_repo):
    cmp = compare.compare(lines.load_path(V2), lines.load_path(V2))
    (pair,) = [p for p in cmp.pairs if p.config_key == DECIDING and p.kernel_a == "triton_flash"]
    row = _deciding_row()
    assert pair.median_a_ms == pytest.approx(row.metrics["interleaved_ms"]) and pair.clock_a_mhz == 1980.0
    r = run_bench(v2_repo, "compare", "flash-h200-v2", "flash-h200-v2")
    assert r.returncode == 0, r.stderr
    assert "A ms" in r.stdout and "interleaved rounds" in r.stdout
    # A line against itself: each config's clock is the same on both sides, one column, not two equal ones.
    assert "A MHz" not in r.stdout and "(MHz, equal on both sides of each config)" in " ".join(r.stdout.split())
    assert "every config: attention/b8/h16/kv16/d128" in " ".join(r.stdout.split())  # the shared fields, once
    (tf,) = [t for t in r.stdout.splitlines() if t.startswith("n4096 float16 full ") and "triton_flash" in t]
    assert re.search(r"1\.968\s+1\.968\s+1980\s", tf), tf


def _cfg(n: int = 32) -> tuple[dict, str]:
    cfg = {"workload": "attention", "batch": 1, "heads": 2, "kv_heads": 2, "seq_len": n, "head_dim": 16,
           "dtype": "float32", "causal": False}
    return cfg, f"attention/b1/h2/kv2/n{n}/d16/float32/full"


def _sustained_result(led: Ledger, kernel: str, inter: float, loop: float, base: float = 2.0) -> dict:
    """A result row of a rate line whose figures are its samples': interleaved rounds with
    median ``inter`` against a baseline of median ``base``, a sustained phase of median ``loop``."""
    from harness.measurement.stats import ratio, speedup_ci
    from harness.measurement.timing.sustained import rates
    from harness.workloads import Config

    rng = np.random.default_rng(int(inter * 1000))
    cand = list(inter * (1 + 0.01 * rng.standard_normal(40)))
    bs = list(base * (1 + 0.01 * rng.standard_normal(40)))
    calls = list(loop * (1 + 0.01 * rng.standard_normal(40)))
    cfg, key = _cfg()
    ms = float(np.median(calls))
    r = rates(Config(**cfg), ms, ATTENTION)
    lo, hi = speedup_ci(bs, cand)
    return led.append("result", {
        "commit": "a" * 40, "env": {"device": "cuda", "gpu": "NVIDIA H200"}, "config": cfg, "config_key": key,
        "candidate": kernel, "baseline": "base", "numerics": {}, "policy": {"control_tolerance": 0.02},
        "rate_protocol": "sustained",
        "sustained": {"samples_ms": calls, "median_ms": ms, "n_calls": len(calls), "sm_mhz": 1700.0, "power_w": 650.0},
        "metrics": {"ms": ms, "interleaved_ms": float(np.median(cand)), "baseline_ms": float(np.median(bs)),
                    "speedup": ratio(bs, cand), "speedup_ci_low": lo, "speedup_ci_high": hi, "control": 1.0,
                    "tflops": r["tflops"], "gbps": r["gbps"], "sm_mhz": 1700.0, "power_w": 650.0},
        "timing": {"mode": "cold", "clock": {"mean_mhz": 1980.0},
                   "arms": {f"candidate:{kernel}": {"samples_ms": cand}, "baseline": {"samples_ms": bs}}}})


def test_route_picks_and_shows_kernels_by_the_protocol_of_their_speedups(tmp_path):
    led = Ledger(tmp_path, "rates")
    led.append("registered", {"commit": "a" * 40, "registration_commit": "a" * 40, "registration_sha256": "0" * 64,
                              "env": {}, "n_configs": 1,
                              "registration": {"line": "rates", "candidates": ["loopy", "steady"], "baseline": "base",
                                               "workload": "attention", "go": "min(tflops) >= 0", "prediction": 1.0,
                                               "primary": "min(tflops)", "hypothesis": "h"}})
    # loopy is faster back to back (0.5 ms) but slower in the rounds the speedup comes from (1.0 ms vs 0.8 ms).
    _sustained_result(led, "loopy", inter=1.0, loop=0.5)
    _sustained_result(led, "steady", inter=0.8, loop=0.9)
    table = route.build([lines.load_path(led.path)])
    (chosen,) = table.routes
    assert chosen.kernel == "steady" and chosen.speedup == pytest.approx(2.5, rel=0.02)
    assert chosen.times() == f"{chosen.ms:.4g} ms vs baseline {chosen.baseline_ms:.4g} ms at 1980 MHz"
    assert chosen.ms == pytest.approx(0.8, rel=0.02)
    js, _ = route_out.write(table, tmp_path / "out")
    saved = json.loads(js.read_text())
    assert saved["schema"] == route.ROUTE_SCHEMA == 3 and "candidate" in saved["routes"][0] and "kernel" not in saved["routes"][0]
    assert saved["routes"][0]["interleaved"] == {"ms": chosen.ms, "baseline_ms": chosen.baseline_ms, "sm_mhz": 1980.0}
    # The report of that line: each kernel's rate beside its own sustained median and clock.
    data = report.report_data(lines.load_path(led.path))
    rows = {r["cells"][0]: dict(zip(data["header"], r["cells"])) for r in data["tables"][0]["rows"]}
    assert rows["loopy"]["rates from"] == "sustained" and rows["loopy"]["rate SM clock"] == "1700 MHz"
    loop_ms = next(r.metrics["ms"] for r in read_rows(led.path) if r.kind == "result" and r.candidate == "loopy")
    assert rows["loopy"]["rate ms [p20–p80]"].startswith(f"{loop_ms:.4g} [")
    assert rows["loopy"]["interleaved SM clock"] == "1980 MHz"


def test_bench_route_prints_the_interleaved_times_beside_each_speedup(v2_repo, tmp_path):
    r = run_bench(v2_repo, "route", "flash-h200-v2", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "interleaved ms at clock" in r.stdout
    (line,) = [t for t in r.stdout.splitlines() if t.startswith("n4096 float16 full ")]
    assert "6.525×" in line and "1.734 ms vs baseline 11.31 ms at 1980 MHz" in line
