"""Reports, comparisons, routes, status and the tidy view — from ledgers alone.

The fixture ledger (tests/data/report-fixture.jsonl) is a real CPU sweep made by
tests/data/make_report_fixture.py; synthetic ledgers are written through Ledger.append
with samples of known difference.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.errors import UserError
from harness.reporting.render.compare import comparison_notes
from harness.ledger.store import Ledger
from harness.ledger.format import read_rows
from harness.reporting.analysis import compare as cmp
from harness.reporting.analysis import lines, report, route, status, summary, tidy
from harness.reporting.render import compare as compare_out
from harness.reporting.render import plots
from harness.reporting.render import report as report_out
from harness.reporting.render import route as route_out
from harness.workloads.shipped import ATTENTION
from tests.conftest import REPO, run_bench

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "report-fixture.jsonl"
GOLDEN = DATA / "report-fixture.md"
H200 = REPO / "ledger" / "flash-h200.jsonl"
V2 = REPO / "ledger" / "flash-h200-v2.jsonl"
DECODE = REPO / "ledger" / "decode-h200.jsonl"

# ------------------------------------------------------------------ synthetic ledgers

CPU_ENV = {"device": "cpu", "gpu": None}
GPU_ENV = {"device": "cuda", "gpu": "NVIDIA H200"}


def _config(n: int) -> tuple[dict, str]:
    cfg = {"workload": "attention", "batch": 1, "heads": 2, "kv_heads": 2, "seq_len": n, "head_dim": 16,
           "dtype": "float32", "causal": False}
    return cfg, f"attention/b1/h2/kv2/n{n}/d16/float32/full"


def _ledger(root: Path, line: str, candidates=("fast",), commit="a" * 40) -> Ledger:
    led = Ledger(root, line)
    led.append("registered", {"commit": commit, "registration_commit": commit, "registration_sha256": "0" * 64,
                              "env": {}, "n_configs": 3,
                              "registration": {"line": line, "candidates": list(candidates), "baseline": "base",
                                               "workload": "attention", "go": "geomean(speedup) >= 1.0",
                                               "prediction": 1.1, "primary": "geomean(speedup)", "hypothesis": "h"}})
    return led


def _result(led: Ledger, n: int, kernel: str, cand: list[float], base: list[float], *, env=CPU_ENV, commit="a" * 40,
            **extra) -> dict:
    """A result row whose figures are its samples' (``ledger.verify.verify`` recomputes them)."""
    from harness.measurement.stats import ratio, speedup_ci
    from harness.measurement.timing.sustained import rates
    from harness.workloads import Config

    cfg, key = _config(n)
    lo, hi = speedup_ci(base, cand)
    ms = float(np.median(cand))
    r = rates(Config(**cfg), ms, ATTENTION)
    return led.append("result", {
        "commit": commit, "env": env, "config": cfg, "config_key": key, "candidate": kernel, "baseline": "base",
        "numerics": {"allow_tf32": False}, "policy": {"control_tolerance": 0.02},
        "metrics": {"ms": ms, "baseline_ms": float(np.median(base)), "speedup": ratio(base, cand),
                    "speedup_ci_low": lo, "speedup_ci_high": hi, "control": 1.0, "tflops": r["tflops"],
                    "gbps": r["gbps"]},
        "timing": {"mode": "cold", "arms": {f"candidate:{kernel}": {"samples_ms": list(cand)},
                                            "baseline": {"samples_ms": list(base)}}},
        **extra})


def _failure(led: Ledger, n: int, kernel: str, kind: str, commit="a" * 40, env=CPU_ENV) -> dict:
    cfg, key = _config(n)
    return led.append(kind, {"commit": commit, "env": env, "config": cfg, "config_key": key, "candidate": kernel,
                             "baseline": "base", "reason": f"{kernel} {kind} here",
                             **({"tag": "mismatch"} if kind == "incorrect" else {})})


def _samples(median: float, n: int = 60, spread: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * (1 + spread * rng.standard_normal(n)))


# ------------------------------------------------------------------ tidy


def test_tidy_has_one_typed_row_per_outcome_and_named_metric_columns():
    rows = read_rows(FIXTURE)
    outcomes = [r for r in rows if r.kind in ("result", "incorrect", "skipped")]
    df = tidy.tidy(FIXTURE)
    assert len(df) == len(outcomes) == 15
    assert list(df.columns[:10]) == list(tidy.LEAD_COLUMNS)
    assert str(df["seq_len"].dtype) == "Int64" and str(df["causal"].dtype) == "boolean"
    assert str(df["speedup"].dtype) == "float64" and str(df["dtype"].dtype) == "string"
    for r in outcomes:
        got = df[df["seq"] == r.seq].iloc[0]
        assert got["kind"] == r.kind and got["candidate"] == r.candidate and got["seq_len"] == r.config["seq_len"]
        if r.kind == "result":
            assert got["speedup"] == r.metrics["speedup"] and got["n_samples"] == len(
                r.timing["arms"][f"candidate:{r.candidate}"]["samples_ms"])
        else:
            assert math.isnan(got["speedup"]) and r.reason[:40] in got["reason"]


def test_new_metrics_appear_in_the_tidy_view_and_the_report_without_code_changes(tmp_path):
    led = _ledger(tmp_path, "m")
    row = _result(led, 32, "fast", _samples(1.0), _samples(2.0))
    led2 = _ledger(tmp_path, "m2")
    led2.append("result", {**{k: v for k, v in row.dump().items() if k not in ("seq", "hash", "prev_hash", "line", "kind")},
                           "metrics": {**row.metrics, "host_us": 12.5, "l2_hit_rate": 0.75}})
    df = tidy.tidy(led2.path)
    assert df["host_us"].tolist() == [12.5] and df["l2_hit_rate"].tolist() == [0.75]
    data = report.report_data(lines.load_path(led2.path))
    assert "host µs" in data["header"] and "l2_hit_rate" in data["header"]
    cells = data["tables"][0]["rows"][1]["cells"]
    assert cells[data["header"].index("host µs")] == "12.5" and cells[data["header"].index("l2_hit_rate")] == "0.75"


def _gate_with_non_finite_figures():
    """A gate that passed at min_pass_rate 0.5 with one failing check: its error is NaN and,
    against an all-zero reference under a zero tolerance, its tolerance ratio infinite."""
    import torch

    from harness.measurement.correctness.figures import compare
    from harness.measurement.correctness.results import CheckReport, GateResult

    _, key = _config(32)
    zeros = torch.zeros(4, dtype=torch.float64)
    bad = compare(torch.full((4,), 100.0), zeros, atol=0.0, rtol=0.0)
    assert bad.tolerance_ratio == math.inf and bad.rel_frobenius == math.inf
    bad = dataclasses.replace(bad, max_abs_err=math.nan)
    good = compare(torch.zeros(4), zeros, atol=0.0, rtol=0.0)
    reports = (CheckReport(key, 0, "normal", True, None, None, good, good, 0.01),
               CheckReport(key, 1, "normal", False, "mismatch", "seed 1: off", bad, None, math.nan))
    return GateResult("fast", key, True, 0.5, 2, 1, 0.5, (0, 1), ("normal",), (), (), 0.0, 0.0, reports,
                      "seed 1: off", "mismatch", 0.01, 0.02)


def test_non_finite_gate_figures_and_stats_are_written_spelled_and_read_back_as_non_finite(tmp_path):
    # One NaN policy: the gate's figures and an arm's Stats hand over raw floats, the ledger
    # spells them "NaN"/"Infinity" (never null: null is an absent value) and tidy and the
    # report read them back as nan/inf. A row written before the policy (null there) still reads.
    from harness.jsonsafe import number
    from harness.measurement.stats import Stats

    gate = _gate_with_non_finite_figures().to_row()
    empty = Stats.from_samples([]).as_dict()
    base = _samples(2.0)
    timing = {"mode": "cold", "arms": {"candidate:fast": {"samples_ms": [], "stats": empty},
                                       "baseline": {"samples_ms": base, "stats": Stats.from_samples(base).as_dict()}}}
    led = _ledger(tmp_path, "nan")
    _result(led, 32, "fast", _samples(1.0), base, timing=timing, gate={"candidate": gate, "baseline": gate})
    (row,) = [r for r in read_rows(led.path) if r.kind == "result"]
    worst, failed = row.gate["candidate"]["worst"], row.gate["candidate"]["failures"][0]
    assert worst["figures"]["max_abs_err"] == "NaN" and worst["figures"]["tolerance_ratio"] == "Infinity"
    assert worst["figures"]["rel_frobenius"] == "Infinity" and failed["reference_seconds"] == "NaN"
    assert worst["figures"]["worst_out"] == 100.0  # finite values stay numbers
    stats = row.timing["arms"]["candidate:fast"]["stats"]
    assert stats["n"] == 0 and stats["median"] == "NaN" and stats["rel_noise"] == "Infinity"
    assert math.isnan(number(stats["median"])) and number(stats["rel_noise"]) == math.inf
    assert "null" not in json.dumps([worst["figures"]["max_abs_err"], stats])
    assert tidy.tidy(led.path)["gate_tolerance_ratio"].tolist() == [math.inf]
    data = report.report_data(lines.load_path(led.path))
    cells = dict(zip(data["header"], data["tables"][0]["rows"][1]["cells"]))
    assert cells["interleaved ms [p20–p80]"] == "nan [nan–nan]"  # measured and NaN, not "—" (absent)
    assert cells["correctness gate"] == "1/2 checks, worst nan abs (inf of tol)"

    # The same row as the ledger held it before: null where a value was non-finite.
    old = json.loads(json.dumps(row.dump()).replace('"NaN"', "null").replace('"Infinity"', "null"))
    led2 = _ledger(tmp_path, "old")
    led2.append("result", {k: v for k, v in old.items() if k not in ("seq", "hash", "prev_hash", "line", "kind")})
    assert math.isnan(tidy.tidy(led2.path)["gate_tolerance_ratio"].iloc[0])
    data = report.report_data(lines.load_path(led2.path))
    cells = dict(zip(data["header"], data["tables"][0]["rows"][1]["cells"]))
    assert cells["interleaved ms [p20–p80]"] == "— [—–—]" and cells["correctness gate"] == "1/2 checks, worst — abs (— of tol)"


def test_the_primary_renders_with_no_outcome_yet_and_when_a_verdict_recorded_it_as_nan(tmp_path):
    led = _ledger(tmp_path, "empty")
    data = report.report_data(lines.load_path(led.path))
    assert data["primary"]["value"] == "—" and data["primary"]["error"] is None
    written = report_out.write(lines.load_path(led.path), tmp_path / "out", data)  # both templates render
    assert "Primary `geomean(speedup)` = **—**, predicted 1.1." in Path(written["markdown"]).read_text()
    assert "<b>—</b>, predicted 1.1." in Path(written["html"]).read_text()
    led.append("verdict", {"commit": "a" * 40, "outcome": "NO-GO", "clauses": [], "primary": "geomean(speedup)",
                           "primary_value": math.nan, "prediction": 1.1})
    assert read_rows(led.path)[-1].primary_value == "NaN"
    data = report.report_data(lines.load_path(led.path))
    assert data["primary"]["value"] == "nan" and data["primary"]["error"] == "nan"


def test_ledger_show_format_tidy_and_its_refusals(repo):
    shutil.copy(FIXTURE, repo / "ledger" / "report-fixture.jsonl")
    r = run_bench(repo, "ledger", "show", "report-fixture", "--format", "tidy")
    assert r.returncode == 0, r.stderr
    head, *body = r.stdout.splitlines()
    assert head.startswith("line,seq,kind,commit,device,gpu,config_key,candidate") and "speedup" in head.split(",")
    assert len(body) == 15
    bad = run_bench(repo, "ledger", "show", "report-fixture", "--format", "wide")
    assert bad.returncode == 2 and "--format 'wide': use table, json, csv, tidy" in bad.stderr and bad.stdout == ""
    both = run_bench(repo, "ledger", "show", "report-fixture", "--format", "tidy", "--csv")
    assert both.returncode == 2 and bad.stdout == ""
    assert run_bench(repo, "ledger", "show", "report-fixture", "--csv").returncode == 0  # the old flags still work


# ------------------------------------------------------------------ report


def test_markdown_report_renders_deterministically_from_the_fixture_ledger():
    """The golden file is the reviewed rendering; regenerate it with BENCH_UPDATE_GOLDEN=1 after a deliberate change."""
    import os

    text = report_out.markdown(report.report_data(lines.load_path(FIXTURE)))
    assert text == report_out.markdown(report.report_data(lines.load_path(FIXTURE)))
    if os.environ.get("BENCH_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert text.startswith(f"# report-fixture: {read_rows(FIXTURE)[-1].outcome}")
    verdict = read_rows(FIXTURE)[-1]
    clause = verdict.clauses[0]
    margin = summary.margin_text(clause["value"], ">=", 1.0)
    assert margin == f"{clause['value'] - 1:+.4g} ({clause['value'] - 1:+.1%})"
    assert (f"| `{clause['text']}` | {clause['value']:.4g} | >= | 1 | {margin} | [") in text
    assert f"| 3 | {'pass' if clause['passed'] else 'fail'} | interleaved, over 3 results |" in text
    # The first screen comes before the per-config tables, the banners before both.
    assert text.index("**Coverage below 1.**") < text.index("## By how much") < text.index("## Results per config")
    assert "| incorrect | torch_stack (baseline): [mismatch] | 3 |" in text  # non-result outcomes counted by reason
    assert "rtol 1e-07·\\|ref\\|" in text  # a reason's '|' cannot break the table
    assert max(len(line) for line in text.splitlines() if not line.startswith("|")) < 200


def test_report_without_a_verdict_is_provisional_and_evaluates_the_bar_so_far(tmp_path):
    led = _ledger(tmp_path, "open")
    _result(led, 32, "fast", _samples(1.0), _samples(2.0))
    data = report.report_data(lines.load_path(led.path))
    assert data["provisional"] and data["verdict"] is None
    text = report_out.markdown(data)
    assert text.startswith("# open: provisional report (no verdict yet)") and "**Provisional.**" in text
    (clause,) = data["clauses"]
    assert clause["outcome"] == "pass" and float(clause["value"]) == pytest.approx(2.0, rel=0.05)
    assert "1 of 3" in dict(data["facts"])["pairs with an outcome"]


@pytest.mark.parametrize("path", [FIXTURE, H200], ids=["cpu-fixture", "h200"])
def test_every_plot_renders_a_non_empty_image(path):
    import matplotlib.image as mpimg

    images = report_out.figures(lines.load_path(path))
    assert set(images) == {name for name, _ in report_out.PLOTS}
    for name, png in images.items():
        assert png[:8] == b"\x89PNG\r\n\x1a\n", name
        pixels = mpimg.imread(__import__("io").BytesIO(png))
        assert pixels.shape[0] > 100 and pixels.shape[1] > 300, name
        assert np.ptp(pixels[..., :3]) > 0.5, f"{name} is blank"


def test_clock_plot_says_why_when_there_are_no_clock_readings():
    res = [r for r in read_rows(FIXTURE) if r.kind == "result"]
    assert all(v is None for r in res for v in r.timing["rounds"]["min_sm_mhz"])
    assert plots.clock_plot(res)[:4] == b"\x89PNG"


def test_bench_report_writes_markdown_html_and_plots(repo, tmp_path):
    shutil.copy(FIXTURE, repo / "ledger" / "report-fixture.jsonl")
    r = run_bench(repo, "report", "report-fixture", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "report-fixture: GO (ledger row 16)" in r.stdout
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("src=\"data:image/png;base64,") == len(report_out.PLOTS) == 6 and "<script" not in page
    assert page.index('id="first-screen"') < page.index("<h2>Plots</h2>") < page.index('<details class="per-config">')
    assert (tmp_path / "out" / "report.md").read_text() == GOLDEN.read_text()
    assert all((tmp_path / "out" / f"{name}.png").stat().st_size > 1000 for name, _ in report_out.PLOTS)
    missing = run_bench(repo, "report", "nope")
    assert missing.returncode == 2 and "no ledger for line 'nope'" in missing.stderr


# ------------------------------------------------------------------ the report's first screen and plots


@pytest.fixture(scope="module")
def shipped():
    """The shipped H200 ledgers' views and report data (computed once: the bootstraps take seconds)."""
    views = {p.stem: lines.load_path(p) for p in (V2, DECODE)}
    return {k: (v, report.report_data(v)) for k, v in views.items()}


def _geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


@pytest.mark.parametrize("line, rate, frac, ceiling", [("flash-h200-v2", "tflops", "tflops_frac", "measured matmul"),
                                                      ("decode-h200", "kv_gbps", "kv_gbps_frac", "measured copy")])
def test_the_first_screen_gives_each_kernels_speedup_its_ci_its_extremes_and_its_best_rate(shipped, line, rate, frac,
                                                                                           ceiling):
    view, data = shipped[line]
    results = view.results()
    assert [k["candidate"] for k in data["kernels"]] == view.registration["candidates"]
    for k in data["kernels"]:
        mine = [r for r in results if r.candidate == k["candidate"]]
        speedups = [r.metrics["speedup"] for r in mine]
        g = _geomean(speedups)
        assert k["n"] == len(mine) and k["geomean"] == f"{g:.3f}×"
        lo, hi = map(float, k["ci"].strip("[]").split(", "))
        assert lo <= round(g, 3) <= hi and hi - lo < 0.01 * g  # H200 rows: tight, but a real interval
        worst, best = min(mine, key=lambda r: r.metrics["speedup"]), max(mine, key=lambda r: r.metrics["speedup"])
        assert (k["min"], k["min_key"]) == (f"{worst.metrics['speedup']:.3f}×", worst.config_key)
        assert (k["max"], k["max_key"]) == (f"{best.metrics['speedup']:.3f}×", best.config_key)
        top = max(mine, key=lambda r: r.metrics[rate])
        assert k["rate_key"] == top.config_key and k["rate"].startswith(f"{top.metrics[rate]:.4g} ")
        assert k["of_ceiling"] == (f"{top.metrics[frac]:.1%} of {top.metrics[rate] / top.metrics[frac]:.4g} "
                                   f"({ceiling})")
        assert k["of_datasheet"].endswith("(datasheet)")
    if line == "decode-h200":  # a decode kernel beats the measured copy rate: the column says what it is of
        assert data["rate_header"] == "best KV GB/s"
        assert data["kernels"][1]["of_ceiling"].startswith("106.0% of 4276 (measured copy)")
        assert data["kernels"][1]["of_datasheet"] == "94.4% of 4800 (datasheet)"
    text = report_out.markdown(data)
    first = text.split("## Bar and verdict")[0]
    assert all(k["geomean"] in first and k["ci"] in first for k in data["kernels"])


def test_each_clause_has_its_margin_and_a_bootstrap_ci_over_its_deciding_rows(shipped):
    from harness.measurement.stats import speedup_replicates

    view, data = shipped["flash-h200-v2"]
    speed, tflops, rate = data["clauses"]
    assert speed["margin"] == "+1.249 (+27.8%)" and tflops["margin"] == "+13.59 (+2.7%)"
    assert rate["margin"] == "—" and rate["ci"] == "—"  # pass_rate counts rows: nothing was sampled
    # min(speedup ...) is decided by one row: its CI is that row's bootstrap, with the documented seed.
    (row,) = [r for r in view.results() if r.candidate == "triton_flash" and r.config["seq_len"] == 4096
              and r.config["dtype"] == "float16" and not r.config["causal"]]
    reps = speedup_replicates(lines.arm_samples(row, "baseline"), lines.arm_samples(row, "candidate"),
                              summary.BOOTSTRAP_RESAMPLES, [summary.BOOTSTRAP_SEED, row.seq])
    lo, hi = np.percentile(reps, [2.5, 97.5])
    assert speed["ci"] == f"[{lo:.4g}, {hi:.4g}]" and lo <= row.metrics["speedup"] <= hi
    # min(tflops ...) over two rows, each rate resampled from its sustained calls.
    lo, hi = map(float, tflops["ci"].strip("[]").split(", "))
    assert lo < float(tflops["value"]) < hi and hi - lo < 5
    _, dec = shipped["decode-h200"]
    kv = dec["clauses"][0]
    assert kv["text"].startswith("min(kv_gbps_frac") and kv["margin"] == "+0.0809 (+9.5%)"
    lo, hi = map(float, kv["ci"].strip("[]").split(", "))
    assert lo < float(kv["value"]) < hi


def test_one_margin_for_the_verdict_and_the_report():
    from harness.registration.bar import ClauseOutcome, margin
    from harness.reporting.render.verdict import margin as verdict_margin

    assert margin(513.6, ">=", 500) == pytest.approx((13.6, 0.0272))
    assert margin(0.8, "<=", 1.0) == pytest.approx((0.2, 0.2)) and margin(1.2, "<", 1.0)[0] == pytest.approx(-0.2)
    assert margin(1.0, "==", 1.0) is None and margin(None, ">=", 1) is None and margin(math.nan, ">", 1) is None
    assert margin(0.5, ">=", 0)[1] is None  # no relative margin to a zero threshold
    cl = ClauseOutcome("min(tflops) >= 500", 513.6, ">=", 500.0, True, 2)
    assert verdict_margin(cl) == ", margin +13.6 (+2.7%)" == f", margin {summary.margin_text(513.6, '>=', 500.0)}"
    assert summary.margin_text(0.9, ">=", 1.0) == "-0.1 (-10.0%)"  # a failing clause: on the wrong side

def test_banners_name_what_qualifies_the_verdict(shipped):
    _, v2 = shipped["flash-h200-v2"]
    (clock,) = v2["banners"]
    assert clock["kind"] == "clock" and "24 of 36 results" in clock["text"] and "1587–1918 MHz" in clock["text"]
    assert "lowest 0.81×" in clock["text"]
    assert shipped["decode-h200"][1]["banners"] == []  # every rate at the reference clock, every pair decided
    fixture = report.report_data(lines.load_path(FIXTURE))
    kinds = {b["kind"]: b["text"] for b in fixture["banners"]}
    assert set(kinds) == {"rig-noisy", "skipped", "coverage"}
    assert "counted by the bar" in kinds["rig-noisy"] and "incorrect 3, skipped 6" in kinds["skipped"]
    assert "6 of 12 registered pairs" in kinds["coverage"]


def test_the_decode_bars_own_metric_has_a_column_named_for_its_denominator(shipped):
    view, data = shipped["decode-h200"]
    header = data["header"]
    assert "KV of measured copy" in header and "of measured copy" in header and "of peak GB/s" not in header
    row = min((r for r in view.results() if r.candidate == "triton_decode"), key=lambda r: r.metrics["kv_gbps_frac"])
    table = next(t for t in data["tables"] if t["key"] == row.config_key)
    cells = dict(zip(header, next(x["cells"] for x in table["rows"] if x["cells"][0] == "triton_decode")))
    assert cells["KV of measured copy"] == f"{row.metrics['kv_gbps_frac']:.1%}" == "93.1%"
    assert "KV of measured copy" not in shipped["flash-h200-v2"][1]["header"]  # not judged there: no column


def _threshold_dashes(fig):
    """(panel title, [(x from, x to, y)]) of the drawn bar thresholds."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        spans = [(float(seg[0][0]), float(seg[1][0]), float(seg[0][1])) for c in ax.collections
                 if str(c.get_label()).startswith("bar") for seg in c.get_segments()]
        out.append((ax.get_title(), spans))
    return out


def test_speedup_panels_have_a_numeric_size_axis_and_thresholds_only_where_their_clause_applies(shipped, tmp_path):
    view, _ = shipped["flash-h200-v2"]
    spans = summary.threshold_spans(view.registration, view.outcomes(), include_noisy=False)
    ((_, value, pairs),) = spans
    assert value == 4.5 and pairs == {("attention/b8/h16/kv16/n4096/d128/float16/full", "triton_flash")}
    fig = plots.speedup_figure(view.results(), spans)
    drawn = dict(_threshold_dashes(fig))
    assert sorted(drawn) == ["bfloat16, causal, d128", "bfloat16, non-causal, d128", "float16, causal, d128",
                             "float16, non-causal, d128"]
    ((x0, x1, y),) = drawn.pop("float16, non-causal, d128")
    assert y == 4.5 and x0 < 4096 < x1 and x1 < 8192 and x0 > 1024
    assert all(not s for s in drawn.values())  # no threshold over the shapes the clause does not filter
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["1024", "4096", "8192"]
    dec, _ = shipped["decode-h200"]
    dspans = summary.threshold_spans(dec.registration, dec.outcomes(), include_noisy=False)
    panels = dict(_threshold_dashes(plots.speedup_figure(dec.results(), dspans)))
    assert len(panels) == 4 and all(len(s) == 2 and {y for *_, y in s} == {1.0} for s in panels.values())
    assert "bfloat16, non-causal, d128, b16" in panels  # batch varies: it splits the panels
    # Sizes a text sort would scramble (n131072 < n32768 < n8192) lie in numeric order.
    led = _ledger(tmp_path, "sizes")
    for n in (131072, 8192, 32768):
        _result(led, n, "fast", _samples(1.0, n=8, seed=n), _samples(2.0, n=8, seed=n + 1))
    (ax,) = [a for a in plots.speedup_figure(lines.load_path(led.path).results()).axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8192", "32768", "131072"]
    xs = ax.lines[0].get_xdata()
    assert list(xs) == [8192, 32768, 131072]


def test_rates_plot_draws_the_measured_ceiling_and_the_datasheet_peak_under_their_names(shipped):
    view, _ = shipped["flash-h200-v2"]
    fig = plots.rates_figure(view.results(), "tflops")
    for ax in [a for a in fig.axes if a.get_visible()]:
        labelled = {line.get_label(): line.get_ydata()[0] for line in ax.lines}
        ceiling = 780.2736072929396 if ax.get_title().startswith("float16") else 811.0885425199975
        assert labelled["measured matmul ceiling"] == pytest.approx(ceiling, rel=1e-5)
        assert labelled["datasheet peak (not measured)"] == 989.0
        assert "cublas_stack (baseline)" in labelled and ax.get_ylabel() == "achieved TFLOP/s"
    # The rate clause's threshold, only over the configs it filters (fp16, non-causal, seq_len >= 4096).
    spans = summary.rate_threshold_spans(view.registration, view.outcomes(), "tflops", include_noisy=False)
    ((_, value, pairs, of_ceiling),) = spans
    assert (value, of_ceiling) == (500.0, False) and pairs == {
        (f"attention/b8/h16/kv16/n{n}/d128/float16/full", "triton_flash") for n in (4096, 8192)}
    drawn = dict(_threshold_dashes(plots.rates_figure(view.results(), "tflops", spans)))
    assert [x for x, _ in sorted(drawn.items()) if x and drawn[x]] == ["float16, non-causal, d128"]
    assert sorted(round(x0 * 1.3) for x0, _, _ in drawn["float16, non-causal, d128"]) == [4096, 8192]
    dec, _ = shipped["decode-h200"]
    dspans = summary.rate_threshold_spans(dec.registration, dec.outcomes(), "kv_gbps", include_noisy=False)
    ((_, value, pairs, of_ceiling),) = dspans  # the bar judges kv_gbps_frac: a fraction of each ceiling
    assert (value, of_ceiling, len(pairs)) == (0.85, True, 8)
    fig = plots.rates_figure(dec.results(), "kv_gbps", dspans)
    ax = fig.axes[0]
    labelled = {line.get_label(): line.get_ydata()[0] for line in ax.lines}
    assert labelled["measured copy ceiling"] == pytest.approx(4275.8, rel=1e-4)
    assert labelled["datasheet peak (not measured)"] == 4800.0 and ax.get_ylabel() == "achieved KV GB/s"
    assert {round(y, 1) for _, s in _threshold_dashes(fig) for *_, y in s} == {round(0.85 * 4275.811641415113, 1)}


def test_the_decode_roofline_sets_its_kernels_side_by_side_at_their_one_intensity(shipped):
    dec, _ = shipped["decode-h200"]
    ax = plots.roofline_figure(dec.results()).axes[0]
    xs = {c.get_label(): {round(float(x), 6) for x, _ in c.get_offsets()} for c in ax.collections
          if c.get_label() in ("triton_decode", "sdpa_cudnn")}
    assert set(xs) == {"triton_decode", "sdpa_cudnn"} and not (xs["triton_decode"] & xs["sdpa_cudnn"])
    assert ax.get_xscale() == "log" and "arithmetic intensity" in ax.get_xlabel()
    assert "side by side" in ax.get_title()
    flash, _ = shipped["flash-h200-v2"]
    assert "side by side" not in plots.roofline_figure(flash.results()).axes[0].get_title()


def test_the_deciding_configs_samples_are_drawn_candidate_beside_baseline_beside_control(shipped):
    view, _ = shipped["flash-h200-v2"]
    (d,) = summary.deciding_configs(view.registration, view.outcomes(), include_noisy=False)
    assert d.row.config_key == "attention/b8/h16/kv16/n4096/d128/float16/full" and d.row.candidate == "triton_flash"
    assert d.why == "min speedup; min tflops"  # one row decides both metric clauses
    dec, _ = shipped["decode-h200"]
    (dd,) = summary.deciding_configs(dec.registration, dec.outcomes(), include_noisy=False)
    assert dd.why == "min kv_gbps_frac; min speedup"
    png = plots.distribution_plot([d, dd])
    import matplotlib.image as mpimg

    pixels = mpimg.imread(__import__("io").BytesIO(png))
    assert pixels.shape[0] > 300 and np.ptp(pixels[..., :3]) > 0.5


def test_the_report_is_byte_identical_for_the_same_ledger(tmp_path):
    view = lines.load_path(FIXTURE)
    a = report_out.write(view, tmp_path / "a")
    b = report_out.write(lines.load_path(FIXTURE), tmp_path / "b")
    for name, path in a.items():
        assert path.read_bytes() == b[name].read_bytes(), name


# ------------------------------------------------------------------ compare


@pytest.mark.parametrize("factor, expected", [(0.8, cmp.FASTER), (1.25, cmp.SLOWER), (1.0, cmp.SAME),
                                              (1.004, cmp.SAME)])
def test_compare_changes_on_samples_with_known_differences(tmp_path, factor, expected):
    a, b = _ledger(tmp_path, "a"), _ledger(tmp_path, "b")
    _result(a, 32, "fast", _samples(1.0, seed=1), _samples(2.0, seed=2))
    _result(b, 32, "fast", _samples(1.0 * factor, seed=3), _samples(2.0, seed=4))
    (pair,) = cmp.compare(lines.load_path(a.path), lines.load_path(b.path)).pairs
    assert pair.change == expected, pair
    assert pair.speedup == pytest.approx(1 / factor, rel=0.01)
    if expected != cmp.SAME:
        assert pair.p_adjusted < cmp.FDR_Q and pair.p_adjusted == pair.p_value  # one config: nothing to adjust


def test_compare_is_unclear_when_the_samples_cannot_tell(tmp_path):
    a, b = _ledger(tmp_path, "a"), _ledger(tmp_path, "b")
    _result(a, 32, "fast", _samples(1.0, n=8, spread=0.3, seed=1), _samples(2.0))
    _result(b, 32, "fast", _samples(1.05, n=8, spread=0.3, seed=2), _samples(2.0))
    (pair,) = cmp.compare(lines.load_path(a.path), lines.load_path(b.path)).pairs
    assert pair.change == cmp.UNCLEAR
    tiny = cmp.compare_samples([1.0, 1.1], [0.5, 0.6])
    assert math.isnan(tiny[3]) and cmp.classify(*tiny) == cmp.UNCLEAR


def test_compare_names_no_change_smaller_than_its_minimum_effect():
    # Significant, CI wholly above 1, but wider than the SAME band: a 1.001x ratio is not FASTER.
    assert cmp.classify(1.001, 1.0005, 1.03, 1e-6) == cmp.UNCLEAR
    assert cmp.classify(1.05, 1.001, 1.1, 1e-6) == cmp.FASTER
    assert cmp.classify(1 / 1.05, 0.9, 0.999, 1e-6) == cmp.SLOWER
    assert cmp.classify(0.995, 0.95, 0.999, 1e-6) == cmp.UNCLEAR
    assert cmp.classify(1.05, 1.001, 1.1, cmp.FDR_Q) == cmp.UNCLEAR  # not significant after adjustment


def test_benjamini_hochberg_adjustment_and_its_counts(tmp_path):
    # By hand: p (0.01, 0.04, 0.03, 0.005) over 4 tests -> 0.02, 0.04, 0.04, 0.02; NaN is no test.
    got = cmp.bh_adjust([0.01, 0.04, 0.03, math.nan, 0.005])
    assert got[:3] == pytest.approx([0.02, 0.04, 0.04]) and math.isnan(got[3])
    assert got[4] == pytest.approx(0.02)
    assert cmp.bh_adjust([]) == []
    # A comparison of many configs: the decisions use the adjusted p-values, the counts say both.
    a, b = _ledger(tmp_path, "a"), _ledger(tmp_path, "b")
    for i, n in enumerate((32, 64, 96, 128)):
        _result(a, n, "fast", _samples(1.0, seed=10 + i), _samples(2.0))
        _result(b, n, "fast", _samples(0.8 if n == 32 else 1.0, seed=20 + i), _samples(2.0))
    c = cmp.compare(lines.load_path(a.path), lines.load_path(b.path))
    assert [p.change for p in c.pairs].count(cmp.FASTER) == 1
    for p in c.pairs:
        assert p.p_adjusted >= p.p_value or math.isnan(p.p_value)
    sig = c.significance()
    assert sig["tests"] == 4 and sig["adjusted"] <= sig["raw"] and sig["adjusted"] >= 1


def test_compare_refuses_different_devices_unless_told(tmp_path):
    a, b = _ledger(tmp_path, "a"), _ledger(tmp_path, "b")
    _result(a, 32, "fast", _samples(1.0), _samples(2.0))
    _result(b, 32, "fast", _samples(1.0), _samples(2.0), env=GPU_ENV)
    with pytest.raises(UserError, match="different settings.*device \\(cpu vs cuda\\).*--allow-mixed"):
        cmp.compare(lines.load_path(a.path), lines.load_path(b.path))
    mixed = cmp.compare(lines.load_path(a.path), lines.load_path(b.path), allow_mixed=True)
    assert mixed.mixed and mixed.pairs[0].change == cmp.SAME


def test_compare_names_a_setting_one_side_never_recorded_instead_of_refusing(tmp_path):
    # Issue 51: older rows never recorded num_threads (None); that is no difference.
    a, b, c = _ledger(tmp_path, "a"), _ledger(tmp_path, "b"), _ledger(tmp_path, "c")
    _result(a, 32, "fast", _samples(1.0), _samples(2.0))
    _result(b, 32, "fast", _samples(1.0), _samples(2.0), numerics={"allow_tf32": False, "num_threads": 16})
    _result(c, 32, "fast", _samples(1.0), _samples(2.0), numerics={"allow_tf32": False, "num_threads": 8})
    got = cmp.compare(lines.load_path(a.path), lines.load_path(b.path))
    assert got.pairs[0].change == cmp.SAME and not got.mixed
    assert got.unrecorded == ("numerics num_threads: not recorded in a",)
    assert got.unrecorded[0] in " ".join(comparison_notes(got))
    # A value both sides recorded and that differs is still refused.
    with pytest.raises(UserError, match="different settings.*num_threads: 8 vs 16"):
        cmp.compare(lines.load_path(c.path), lines.load_path(b.path))


def test_compare_against_in_ci_mode_fails_on_a_significant_regression(repo):
    old, new = "1" * 40, "2" * 40
    led = _ledger(repo, "ci", commit=old)
    _result(led, 32, "fast", _samples(1.0, seed=1), _samples(2.0), commit=old)
    _result(led, 64, "fast", _samples(1.0, seed=2), _samples(2.0), commit=old)
    _result(led, 32, "fast", _samples(1.0, seed=3), _samples(2.0), commit=new)
    _result(led, 64, "fast", _samples(1.3, seed=4), _samples(2.0), commit=new)  # 30% slower
    r = run_bench(repo, "compare", "--against", "ci")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL: 1 config(s) significantly slower" in r.stdout and "SLOWER" in r.stdout
    ok = run_bench(repo, "compare", "--against", "ci", "--threshold", "0.5")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    for bad in ("nan", "inf", "-0.1"):  # NaN would pass every slowdown: the CI gate off
        off = run_bench(repo, "compare", "--against", "ci", "--threshold", bad)
        assert off.returncode == 2 and "finite number >= 0" in off.stderr and off.stdout == "", (bad, off.stdout)
    both = run_bench(repo, "compare", f"ci@{old[:8]}", f"ci@{new[:8]}")
    assert both.returncode == 0 and "SAME 1" in both.stdout and "SLOWER 1" in both.stdout
    one = run_bench(repo, "compare", "ci")
    assert one.returncode == 2 and "needs two sides" in one.stderr


# ------------------------------------------------------------------ route


def _route_lines(root: Path):
    """Line x: fast wins n32, is incorrect at n64 in line y, impossible at n128; slow's CI straddles 1."""
    x, y = _ledger(root, "x", candidates=("fast", "slow")), _ledger(root, "y", candidates=("fast", "mid"))
    _result(x, 32, "fast", _samples(0.5, seed=1), _samples(1.0, seed=2))
    _result(x, 32, "slow", _samples(1.0, seed=3), _samples(1.0, seed=4))  # CI [0.994, 1.004]
    _result(y, 32, "mid", _samples(0.8, seed=5), _samples(1.0, seed=6))
    _result(x, 64, "fast", _samples(0.4, seed=7), _samples(1.0, seed=8))
    _failure(y, 64, "fast", "incorrect")
    _result(y, 64, "mid", _samples(0.9, seed=9), _samples(1.0, seed=10))
    _result(x, 128, "fast", _samples(0.1, seed=11), _samples(1.0, seed=12), impossible={"why": "faster than copy"})
    _result(x, 128, "slow", _samples(1.0, seed=13), _samples(1.0, seed=14))  # CI [0.994, 1.003]
    _failure(y, 128, "mid", "crashed")
    return x, y


def test_route_never_picks_a_kernel_with_a_failing_row_at_that_shape(tmp_path):
    x, y = _route_lines(tmp_path)
    table = route.build([lines.load_path(x.path), lines.load_path(y.path)])
    chosen = {r.config["seq_len"]: r.kernel for r in table.routes}
    assert chosen == {32: "fast", 64: "mid", 128: "base"}
    assert "fast: failed here" in next(r.why for r in table.routes if r.config["seq_len"] == 64)
    speedups = [r.speedup for r in table.routes]
    assert table.geomean == pytest.approx(math.exp(sum(map(math.log, speedups)) / 3))
    assert table.worst.kernel == "base" and table.worst.speedup == 1.0


def test_route_writes_json_and_an_importable_dispatcher_that_falls_back(tmp_path):
    x, y = _route_lines(tmp_path)
    table = route.build([lines.load_path(x.path), lines.load_path(y.path)])
    js, py = route_out.write(table, tmp_path / "out", "dispatch")
    data = json.loads(js.read_text())
    assert data["schema"] == route.ROUTE_SCHEMA and data["baseline"] == "base" and len(data["routes"]) == 3
    spec = importlib.util.spec_from_file_location("dispatch", py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.choose("attention", 1, 2, 2, 32, 16, "float32", False) == "fast"
    assert mod.choose("attention", 1, 2, 2, 64, 16, "float32", False) == "mid"
    assert mod.choose("attention", 1, 2, 2, 999, 16, "float32", False) == "base"  # unseen shape


def test_route_treats_overlapping_cis_as_a_tie_and_names_it(tmp_path):
    """At n32 'fast' and 'twin' cannot be told apart (CIs overlap; twin's median a hair lower):
    the kernel tied-best at more shapes (fast, also the only choice at n64) takes it."""
    led = _ledger(tmp_path, "tie", candidates=("fast", "twin"))
    _result(led, 32, "fast", _samples(0.5, seed=1, spread=0.05), _samples(1.0, seed=2))
    _result(led, 32, "twin", _samples(0.499, seed=3, spread=0.05), _samples(1.0, seed=4))
    _result(led, 64, "fast", _samples(0.5, seed=5), _samples(1.0, seed=6))
    _result(led, 64, "twin", _samples(1.0, seed=7), _samples(1.0, seed=8))  # CI straddles 1
    rows = {r.candidate: r for r in read_rows(led.path) if r.kind == "result" and r.config["seq_len"] == 32}
    f, t = rows["fast"].metrics, rows["twin"].metrics
    assert f["speedup_ci_low"] <= t["speedup_ci_high"] and t["speedup_ci_low"] <= f["speedup_ci_high"]
    table = route.build([lines.load_path(led.path)])
    chosen = {r.config["seq_len"]: r for r in table.routes}
    assert chosen[32].kernel == "fast" and chosen[64].kernel == "fast"
    assert "tied with twin" in chosen[32].why
    # Apart (no overlap), the faster one wins as before.
    led2 = _ledger(tmp_path, "apart", candidates=("fast", "twin"))
    _result(led2, 32, "fast", _samples(0.5, seed=1), _samples(1.0, seed=2))
    _result(led2, 32, "twin", _samples(0.4, seed=3), _samples(1.0, seed=4))
    (r,) = route.build([lines.load_path(led2.path)]).routes
    assert r.kernel == "twin" and "tied" not in r.why


def test_the_dispatcher_routes_an_unseen_seq_len_like_its_nearest_measured_one(tmp_path):
    x, y = _route_lines(tmp_path)
    _, py = route_out.write(route.build([lines.load_path(x.path), lines.load_path(y.path)]), tmp_path / "o", "d")
    spec = importlib.util.spec_from_file_location("d", py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # measured: 32 fast, 64 mid, 128 base
    assert mod.choose("attention", 1, 2, 2, 40, 16, "float32", False) == "fast"   # 40/32 < 64/40
    assert mod.choose("attention", 1, 2, 2, 48, 16, "float32", False) == "mid"    # 64/48 < 48/32
    assert mod.choose("attention", 1, 2, 2, 8, 16, "float32", False) == "fast"    # below the range: 32's
    assert mod.choose("attention", 1, 2, 2, 32, 64, "float32", False) == "base"   # no shape with head_dim 64


def test_route_passes_over_a_result_whose_ci_could_not_be_formed(tmp_path):
    """A NaN CI low (written "NaN" by the ledger) is the worst a candidate has at that shape:
    it is never routed to there, the shape falls back to the baseline, and nothing crashes."""
    led = _ledger(tmp_path, "nan", candidates=("fast", "odd"))
    _result(led, 32, "fast", _samples(0.5, seed=1), _samples(1.0, seed=2))
    _result(led, 32, "fast", [0.5], _samples(1.0, seed=4))  # one sample: no bootstrap CI
    _result(led, 32, "odd", [0.4], _samples(1.0, seed=6))
    assert '"speedup_ci_low":"NaN"' in led.path.read_text()
    table = route.build([lines.load_path(led.path)])
    (r,) = table.routes
    assert r.kernel == "base" and "fast: no speedup CI" in r.why and "odd: no speedup CI" in r.why


def test_route_refuses_mixed_devices_and_baselines(tmp_path):
    x = _ledger(tmp_path, "x")
    _result(x, 32, "fast", _samples(0.5), _samples(1.0))
    z = _ledger(tmp_path, "z")
    _result(z, 64, "fast", _samples(0.5), _samples(1.0), env=GPU_ENV)
    with pytest.raises(UserError, match="2 devices"):
        route.build([lines.load_path(x.path), lines.load_path(z.path)])


def test_bench_route_on_the_h200_ledger(repo, tmp_path):
    shutil.copy(H200, repo / "ledger" / "flash-h200.jsonl")
    r = run_bench(repo, "route", "flash-h200", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "route.json").read_text())
    assert data["device"] == "NVIDIA H200" and len(data["routes"]) == 12
    assert "geomean" in r.stdout and "worst" in r.stdout


# ------------------------------------------------------------------ status


def test_status_shows_every_line_state_commit_and_device(repo):
    assert run_bench(repo, "register", "registrations/tiny.toml").returncode == 0
    shutil.copy(FIXTURE, repo / "ledger" / "report-fixture.jsonl")
    led = _ledger(repo, "half")
    _result(led, 32, "fast", _samples(1.0), _samples(2.0))
    got = {s.line: s for s in status.statuses(repo)}
    assert got["tiny"].state == "registered"
    assert got["report-fixture"].state == "closed GO" and got["report-fixture"].device == "cpu"
    assert got["half"].state == "swept 1 of 3 pairs" and got["half"].commit == "a" * 40
    r = run_bench(repo, "status")
    assert r.returncode == 0 and "closed GO" in r.stdout and "swept 1 of 3 pairs" in r.stdout
    (repo / "ledger" / "half.jsonl").write_text(led.path.read_text().replace('"fast"', '"FAST"', 1))
    assert status.line_status(repo / "ledger" / "half.jsonl").state.startswith("BROKEN")


def test_a_line_spec_with_an_unknown_commit_is_refused(tmp_path):
    led = _ledger(tmp_path, "a")
    _result(led, 32, "fast", _samples(1.0), _samples(2.0))
    with pytest.raises(UserError, match="no result measured at commit 'beef'"):
        lines.load(tmp_path, "a@beef")
    with pytest.raises(UserError, match="empty commit"):
        lines.split_spec("a@")


def test_compare_pairs_one_kernel_against_another_and_refuses_other_numeric_flags(tmp_path):
    a, b = _ledger(tmp_path, "a", candidates=("old",)), _ledger(tmp_path, "b", candidates=("new",))
    _result(a, 32, "old", _samples(1.0, seed=1), _samples(2.0))
    _result(a, 64, "old", _samples(1.0, seed=2), _samples(2.0))
    _result(b, 32, "new", _samples(0.5, seed=3), _samples(2.0))
    result = cmp.compare(lines.load_path(a.path), lines.load_path(b.path))
    (pair,) = result.pairs
    assert (pair.kernel_a, pair.kernel_b, pair.change) == ("old", "new", cmp.FASTER)
    assert result.only_a == ("attention/b1/h2/kv2/n64/d16/float32/full",)
    c = _ledger(tmp_path, "c", candidates=("old",))
    row = _result(c, 32, "old", _samples(1.0, seed=4), _samples(2.0))
    d = Ledger(tmp_path, "d")
    d.append("result", {**{k: v for k, v in row.dump().items() if k not in ("seq", "hash", "prev_hash", "line", "kind")},
                        "numerics": {"allow_tf32": True}})
    with pytest.raises(UserError, match="numerics \\(allow_tf32: False vs True\\)"):
        cmp.compare(lines.load_path(c.path), lines.load_path(d.path))


def test_terminal_tables_render_the_same_at_a_fixed_width():
    from rich.console import Console

    def text(renderable) -> str:
        c = Console(width=120, record=True, file=__import__("io").StringIO(), color_system=None)
        c.print(renderable)
        return c.export_text()

    view = lines.load_path(FIXTURE)
    table = route.build([view])
    shown = text(route_out.route_table(table))
    assert shown == text(route_out.route_table(route.build([lines.load_path(FIXTURE)])))
    assert all(len(line) <= 120 for line in shown.splitlines())
    assert f"geomean {table.geomean:.3f}×" in shown and "torch_stack: failed" in shown
    same = text(compare_out.comparison_table(cmp.compare(view, lines.load_path(FIXTURE))))
    # Identical samples, but CPU-noisy: the ratio's CI is wider than ±2%, so no claim of SAME either.
    assert "SLOWER 0" in same and "FASTER 0" in same and all(len(line) <= 120 for line in same.splitlines())
