"""A bar that can decide, checked against the devices it runs on before any kernel runs (issue 27).

Through the real CLI in temporary git repositories: each refused case exits 2 with one line
and writes nothing; the waiver registers and is recorded in row 0; with no device known the
row and the output say so; an ordinary bar still registers; the sweep checks its own device
(measured first) before its first config. The shipped registrations pass unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, TINY, git, init_repo, run_bench

TINY_GO = 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"'
H200_CEILINGS = REPO / "ledger" / "_device_ceilings.jsonl"
H200_AA = REPO / "ledger" / "aa-h200.jsonl"  # real H200 results: cublas_stack's own times, cold mode


def _bar(go: str, *, text: str = TINY, extra: str = "") -> str:
    return text.replace(TINY_GO, f"go = {json.dumps(go)}{extra}")


def _rows(root: Path, line: str) -> list[dict]:
    path = root / "ledger" / f"{line}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _h200_ceilings_text() -> str:
    """The shipped ceilings ledger's H200 rows: its longest prefix measured on the H200 (a
    prefix of a hash chain is a valid ledger). A clone where the README's first command has
    run holds this machine's CPU ceilings after them, which these tests must not read."""
    lines = H200_CEILINGS.read_text().splitlines(keepends=True)
    n = 0
    while n < len(lines) and (json.loads(lines[n]).get("env") or {}).get("gpu") == "NVIDIA H200":
        n += 1
    if not n:
        raise AssertionError(f"{H200_CEILINGS} starts with no H200 row")
    return "".join(lines[:n])


def _with_ledgers(root: Path, *paths: Path) -> Path:
    """Copy real committed ledgers of this repository (the H200's) into ``root`` and commit them."""
    for p in paths:
        if p == H200_CEILINGS:
            (root / "ledger" / p.name).write_text(_h200_ceilings_text())
            continue
        shutil.copy(p, root / "ledger" / p.name)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "ledgers measured on the H200")
    return root


def _refused(root: Path, line: str) -> str:
    r = run_bench(root, "register", f"registrations/{line}.toml")
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (root / "ledger" / f"{line}.jsonl").exists()  # nothing written
    return r.stderr


ONE_PAIR = TINY.replace("seq_len = [32, 48]", "seq_len = [32]")

# (bar, grid text, what the refusal must say): the cases and their neighbours.
UNDECIDABLE = [
    ("pass_rate == 1.5", TINY,
     ["the bar can never be GO", "`pass_rate == 1.5` is always false", "pass_rate is one of 0, 0.5, 1"]),
    ("geomean(speedup) >= 0.01 and count(speedup) >= 2", ONE_PAIR,
     ["the bar can never be GO", "`count(speedup) >= 2` is always false", "counts at most 1 registered pair"]),
    ("geomean(speedup) >= 1.10 and pass_rate == 1.0 or geomean(speedup) < 1.10 and pass_rate <= 1.0", TINY,
     ["a clause can never change the outcome", "`pass_rate <= 1.0` is always true"]),
    ("geomean(speedup) >= 1.10 and pass_rate == 1.0 or geomean(speedup) >= 1.10", TINY,
     ["clause `pass_rate == 1.0` can never change the outcome", "flipped alone"]),
    ("pass_rate >= 0.0", TINY, ["the bar is GO whatever the sweep measures", "every metric at its worst"]),
    ("min(speedup) >= 1.2 and min(speedup) < 1.0", TINY, ["the bar can never be GO", "min(speedup) = 2.4"]),
]


@pytest.mark.parametrize("go,text,says", UNDECIDABLE, ids=[c[0] for c in UNDECIDABLE])
def test_a_bar_that_cannot_decide_is_refused_at_register(tmp_path, go, text, says):
    root = init_repo(tmp_path / "proj", {"t": _bar(go, text=text)})
    err = _refused(root, "t")
    for s in says:
        assert s in err, err
    assert "fix the bar" in err and "beyond_ceiling_ok" not in err  # never waived


def test_an_ordinary_bar_registers_and_says_no_device_is_known(repo):
    r = run_bench(repo, "register", "tiny")
    assert r.returncode == 0, r.stderr
    assert "note: no device's ceilings are known (ledger/_device_ceilings.jsonl holds none)" in " ".join(r.stdout.split())
    red = _rows(repo, "tiny")[0]["reductio"]
    assert red["checked"] == [] and red["waived"] == [] and red["beyond_ceiling_ok"] is None
    assert "`bench sweep` checks it against the device it runs on" in red["note"]


def test_a_fraction_above_one_is_refused_with_no_device_known(tmp_path):
    root = init_repo(tmp_path / "proj", {"t": _bar("min(tflops_frac) >= 1.2 and pass_rate == 1.0")})
    err = _refused(root, "t")
    assert "`min(tflops_frac) >= 1.2` is always false" in err
    assert "a fraction of the device's measured ceiling is at most 1" in err and "beyond_ceiling_ok" in err


def test_a_verify_clause_that_can_never_hold_is_refused(tmp_path):
    text = TINY + '\n[verify]\nclauses = ["tensor_active >= 1.5"]\n'
    err = _refused(init_repo(tmp_path / "proj", {"t": text}), "t")
    assert "[verify] clause `tensor_active >= 1.5` can never hold" in err and "tensor_active in [0, 1]" in err


def test_a_rate_beyond_a_known_device_is_refused_with_the_arithmetic_and_can_be_waived(tmp_path):
    go = "min(tflops) >= 1e6 and pass_rate == 1.0"
    why = "a test: the ceiling row is another machine's"
    waived = _bar(go, extra=f"\nbeyond_ceiling_ok = {json.dumps(why)}").replace("schema = 1", "schema = 3")
    root = _with_ledgers(init_repo(tmp_path / "proj", {
        "t": _bar(go), "w": waived, "old": waived.replace("schema = 3", "schema = 2"), "ok": TINY}), H200_CEILINGS)
    err = _refused(root, "t")
    assert "the bar can never be GO on NVIDIA H200 (ledger/_device_ceilings.jsonl row 0)" in err
    # The arithmetic: the float32 matmul ceiling (TF32's, the faster) and the floor it gives.
    assert "`min(tflops) >= 1e6` is always false" in err and "420.3 TFLOP/s" in err and "floor" in err
    assert 'beyond_ceiling_ok = "<why>" (schema = 3)' in err

    old = run_bench(root, "register", "old")
    assert old.returncode == 2 and "[bar] beyond_ceiling_ok needs schema = 3" in old.stderr

    r = run_bench(root, "register", "w")
    assert r.returncode == 0, r.stderr
    row0 = _rows(root, "w")[0]
    assert row0["registration"]["beyond_ceiling_ok"] == why
    assert row0["reductio"]["beyond_ceiling_ok"] == why
    assert len(row0["reductio"]["waived"]) == 1 and "420.3 TFLOP/s" in row0["reductio"]["waived"][0]
    assert row0["reductio"]["checked"][0]["device"] == "NVIDIA H200"
    out = " ".join(r.stdout.split())
    assert "reductio waived ([bar] beyond_ceiling_ok = " in out and "it would refuse: the bar can never be GO" in out
    rep = run_bench(root, "report", "w", "--out", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stderr
    # Nothing measured yet: the short report still states the waiver among the line's facts.
    assert f"- beyond the measured ceilings (waived): {why}" in (tmp_path / "report" / "report.md").read_text()

    ok = run_bench(root, "register", "ok")
    assert ok.returncode == 0, ok.stderr
    assert "reductio: checked against NVIDIA H200 (ceilings row 0" in " ".join(ok.stdout.split())
    assert "note:" not in ok.stdout
    assert "beyond_ceiling_ok" not in _rows(root, "ok")[0]["registration"]


SPEEDUP_LINE = TINY.replace('baseline = "torch_stack"', 'baseline = "cublas_stack"').replace(
    "batch = [1]", "batch = [8]").replace("heads = [2]", "heads = [16]").replace(
    "seq_len = [32, 48]", "seq_len = [1024]").replace("head_dim = [16]", "head_dim = [128]").replace(
    'dtype = ["float32"]', 'dtype = ["float16"]').replace("atol = 1e-5", "atol = 2e-2").replace(
    "rtol = 1e-4", "rtol = 2e-2").replace("[timing]\n", '[timing]\nmode = "cold"\n')


def test_a_speedup_the_baselines_time_and_the_floor_cannot_allow_is_refused(tmp_path):
    root = _with_ledgers(init_repo(tmp_path / "proj", {"s": _bar("min(speedup) >= 20 and pass_rate == 1.0",
                                                                 text=SPEEDUP_LINE)}), H200_CEILINGS, H200_AA)
    aa = [json.loads(x) for x in H200_AA.read_text().splitlines()]
    key = "attention/b8/h16/kv16/n1024/d128/float16/full"
    base = max(r["metrics"]["baseline_ms"] for r in aa if r["kind"] == "result" and r["config_key"] == key)
    err = _refused(root, "s")
    assert "`min(speedup) >= 20` is always false" in err
    assert f"the baseline's measured {base:.4g} ms (ledger/aa-h200.jsonl row" in err
    # 68.7 GFLOP at the H200's 780.3 TFLOP/s float16 ceiling: 0.08807 ms, no call is shorter.
    assert f"0.08807 ms, is {base / 0.08807:.3g}" in err


def test_the_sweep_checks_its_device_before_any_config(tmp_path):
    # No device known at register: the note. The sweep measures this CPU's ceilings first,
    # commits them, and refuses before any kernel runs: the line holds its row 0 alone.
    root = init_repo(tmp_path / "proj", {"t": _bar("min(tflops) >= 1e6 and pass_rate == 1.0")})
    r = run_bench(root, "register", "t")
    assert r.returncode == 0 and "no device's ceilings are known" in r.stdout, r.stderr
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "registered")
    s = run_bench(root, "sweep", "t")
    assert s.returncode == 2, s.stdout + s.stderr
    assert "the bar can never be GO on" in s.stderr and "`min(tflops) >= 1e6` is always false" in s.stderr
    assert "(ledger/_device_ceilings.jsonl row 0)" in s.stderr and "beyond_ceiling_ok" in s.stderr
    assert [row["kind"] for row in _rows(root, "t")] == ["registered"]
    assert [row["kind"] for row in _rows(root, "_device_ceilings")] == ["ceilings"]
    assert git(root, "status", "--porcelain") == ""  # the ceilings are committed, nothing else written


@pytest.mark.parametrize("path", sorted((REPO / "registrations").glob("*.toml")), ids=lambda p: p.stem)
def test_the_shipped_registrations_pass_against_the_shipped_ceilings(path):
    from harness.governance import reductio
    from harness.registration import schema as registration
    from harness.ledger.store import Ledger
    from harness.ledger.format import CEILINGS_LEDGER

    reg = registration.load(path)
    record = reductio.at_register(REPO, reg)
    assert record["waived"] == []
    for row in Ledger(REPO, CEILINGS_LEDGER).rows():
        if row.device == "cuda":  # the sweep's check on the H200 they were measured on
            assert reductio.before_sweep(REPO, reg, row).startswith("reductio: the bar can be met on")


def test_a_line_registered_before_the_check_is_not_refused_by_the_sweep_for_it(tmp_path):
    # Its bar is fixed: the sweep says the bar cannot decide, and still checks nothing it cannot.
    from harness.governance import reductio
    from harness.registration import schema as registration
    from harness.ledger.store import Ledger
    from harness.ledger.format import CEILINGS_LEDGER

    path = tmp_path / "registrations" / "old.toml"
    path.parent.mkdir()
    path.write_text(_bar("pass_rate >= 0.0"))
    h200 = Ledger(REPO, CEILINGS_LEDGER).rows()[0]  # the shipped H200 row (a clone's own CPU rows follow it)
    assert h200.env["gpu"] == "NVIDIA H200"
    note = reductio.before_sweep(tmp_path, registration.load(path), h200)
    assert note.startswith("reductio not run: the bar is GO whatever the sweep measures")


# Bars over TINY's two pairs that can decide, though a reader might doubt it: clauses on one
# aggregate cut one range (both sides of 1.1 are reachable), a redundant clause still has
# cases where its flip alone changes the outcome, and a count over every pair can be met.
DECIDABLE = [
    "geomean(speedup) >= 1.10 and min(speedup where seq_len >= 48) >= 0.98 and pass_rate == 1.0",
    "geomean(speedup) >= 1.1 and geomean(speedup) <= 2.0",
    "geomean(speedup) >= 1.10 and pass_rate == 1.0 or geomean(speedup) < 1.10 and min(speedup) >= 0.95",
    "min(speedup) >= 1.0 and min(speedup) >= 1.1",
    "count(speedup) >= 2 and pass_rate == 1.0",
    "not (max(ms) > 2.0) and pass_rate == 1.0",
]


@pytest.mark.parametrize("go", DECIDABLE)
def test_bars_that_can_decide_are_not_refused(tmp_path, go):
    from harness.governance import reductio
    from harness.registration import schema as registration

    path = tmp_path / "registrations" / "t.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(_bar(go))
    reg = registration.load(path)
    assert reductio.at_register(tmp_path, reg)["note"]  # no device known here: the note


# Effectively-always bars (issue 47, item 6): a threshold beyond anything the metric can
# physically take. Every timed call lasts from a perf_counter_ns tick (1e-6 ms) to the watchdog's
# end (TINY: timeout_s 5 + watchdog_s 600 = 6.05e5 ms): a ratio of two calls lies in
# [1e-6 / 6.05e5, 6.05e5 / 1e-6] = [1.653e-12, 6.05e11], a time in [1e-6, 6.05e5] ms.
BEYOND_PHYSICS = [
    ("min(speedup) < 1e300", ["the bar is GO whatever the sweep measures", "`min(speedup) < 1e300` is always true",
                              "min(speedup) is in [1.653e-12, 6.05e+11]",
                              "no call longer than 6.05e+05 ms (timeout_s 5 + watchdog_s 600 s) over none shorter "
                              "than 1e-06 ms, one tick of perf_counter_ns = 6.05e+11"]),
    ("geomean(speedup) >= 1e-300", ["the bar is GO whatever the sweep measures",
                                    "`geomean(speedup) >= 1e-300` is always true",
                                    "no call shorter than 1e-06 ms, one tick of perf_counter_ns, over none longer "
                                    "than 6.05e+05 ms (timeout_s 5 + watchdog_s 600 s) = 1.653e-12"]),
    ("geomean(speedup) >= 1e-300 and pass_rate == 1.0", ["a clause can never change the outcome",
                                                         "`geomean(speedup) >= 1e-300` is always true"]),
    ("min(speedup) > 1e12 and pass_rate == 1.0", ["the bar can never be GO", "`min(speedup) > 1e12` is always false"]),
    ("max(ms) <= 1e9 and pass_rate == 1.0", ["`max(ms) <= 1e9` is always true", "max(ms) is in [1e-06, 6.05e+05]",
                                             "no call is longer than timeout_s 5 + watchdog_s 600 s"]),
    ("min(control) >= 1e-20 and pass_rate == 1.0", ["`min(control) >= 1e-20` is always true"]),
    ("max(host_us) < 1e12 and pass_rate == 1.0", ["`max(host_us) < 1e12` is always true",
                                                  "max(host_us) is in (0, 6.05e+08]"]),
]


@pytest.mark.parametrize("go,says", BEYOND_PHYSICS, ids=[c[0] for c in BEYOND_PHYSICS])
def test_a_threshold_beyond_what_a_metric_can_physically_take_is_refused_at_register(tmp_path, go, says):
    root = init_repo(tmp_path / "proj", {"t": _bar(go)})
    err = _refused(root, "t")
    for s in says:
        assert s in err, err
    assert "fix the bar" in err and "beyond_ceiling_ok" not in err  # physics, never waived


def test_thresholds_inside_the_physical_limits_still_register_and_a_peer_ratio_is_bounded_too(tmp_path):
    from harness.errors import UserError
    from harness.governance import reductio
    from harness.registration import schema as registration

    path = tmp_path / "registrations" / "t.toml"
    path.parent.mkdir()
    for go in ("min(speedup) < 1e11 and pass_rate == 1.0", "geomean(speedup) >= 1e-11 and pass_rate == 1.0",
               "max(ms) <= 1e5 and pass_rate == 1.0", "max(host_us) < 1e8 and pass_rate == 1.0"):
        path.write_text(_bar(go))
        assert reductio.at_register(tmp_path, registration.load(path))["note"], go  # registers (no device known)
    peers = _bar('max(speedup vs "sdpa_math" where candidate == "sdpa") < 1e300 and pass_rate == 1.0').replace(
        "schema = 1", "schema = 5").replace('candidate = "sdpa"', 'candidates = ["sdpa", "sdpa_math"]')
    path.write_text(peers)
    with pytest.raises(UserError, match=r'`max\(speedup vs "sdpa_math" where candidate == "sdpa"\) < 1e300` is '
                                        r'always true: .* is in \[1.653e-12, 6.05e\+11\]'):
        reductio.at_register(tmp_path, registration.load(path))


def test_a_ratio_beyond_a_known_devices_floor_is_refused_and_can_be_waived(tmp_path):
    # Inside the physical limits (5e11 < 6.05e11), beyond the H200's: no TINY call there is
    # shorter than its floor (16384 B at 4276 GB/s at n32), so min(speedup) <= 6.05e5 ms over that.
    go = "min(speedup) < 5e11 and pass_rate == 1.0"
    why = "a test: the ceiling row is another machine's"
    waived = _bar(go, extra=f"\nbeyond_ceiling_ok = {json.dumps(why)}").replace("schema = 1", "schema = 3")
    root = _with_ledgers(init_repo(tmp_path / "proj", {"t": _bar(go), "w": waived}), H200_CEILINGS)
    err = _refused(root, "t")
    assert "a clause can never change the outcome on NVIDIA H200 (ledger/_device_ceilings.jsonl row 0)" in err
    assert "`min(speedup) < 5e11` is always true" in err and "over none shorter than 5.748e-06 ms on NVIDIA H200" in err
    assert 'beyond_ceiling_ok = "<why>" (schema = 3)' in err
    r = run_bench(root, "register", "w")
    assert r.returncode == 0, r.stderr
    assert len(_rows(root, "w")[0]["reductio"]["waived"]) == 1
