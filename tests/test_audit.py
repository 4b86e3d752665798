"""Rows add up (ledger/audit.py): a result row's figures recomputed from its raw samples.

The rows are real: tests/data/report-fixture.jsonl is a CPU sweep of a registered line
(tests/data/make_report_fixture.py), and the shipped ledgers are the H200's. An attacker
edits a row and re-hashes the chain from it on, as ``Ledger.append`` hashes it; only the
recomputation can see it before (or after) the rows are committed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.ledger.audit import recompute
from harness.ledger.rows import load
from harness.ledger.format import GENESIS_HASH, canonical, read_rows, row_hash
from harness.ledger.verify import verify
from tests.conftest import REPO, git, init_repo, run_bench
from tests.data.make_report_fixture import LINE, REGISTRATION

FIXTURE = REPO / "tests" / "data" / "report-fixture.jsonl"
HONEST = 6          # a clean sdpa result of the fixture
NOISY = 1           # a rig-noisy one (control 0.8885 outside 1 ± 0.02)
BEFORE_VERDICT = 16  # the fixture's rows before its verdict row (an open line)


def _rows() -> list[dict]:
    """The fixture's rows as written (dicts, as an attacker edits them)."""
    return [r.dump() for r in read_rows(FIXTURE)]


def _rechain(rows: list[dict]) -> bytes:
    """The ledger an attacker writes: every row chained and hashed as ``Ledger.append`` does."""
    prev = GENESIS_HASH
    for r in rows:
        r["prev_hash"] = prev
        r["hash"] = prev = row_hash(r)
    return "".join(canonical(r) + "\n" for r in rows).encode()


def _set(row: dict, path: str, value) -> None:
    *head, last = path.split(".")
    for k in head:
        row = row[k]
    row[last] = value(row[last]) if callable(value) else value


def test_the_fixture_and_the_shipped_ledgers_add_up():
    rows = _rows()
    assert sum(r["kind"] == "result" for r in rows) == 6
    assert all(recompute(load(r)) == [] for r in rows)
    shipped = sorted((REPO / "ledger").glob("*.jsonl"))
    assert shipped
    for path in shipped:  # older rows (no interleaved_ms, rig_noise, quanta, floor) verify on what they have
        res = verify(path)
        assert res.ok, res.reason
        assert res.n_results == sum(r.kind == "result" for r in read_rows(path))


@pytest.mark.parametrize("row, path, value, named", [
    (HONEST, "metrics.speedup", 9.99, ["metrics.speedup"]),
    (HONEST, "metrics.speedup_ci_low", lambda v: v * 1.5, ["metrics.speedup_ci_low"]),
    (HONEST, "timing.arms.baseline.stats.median", lambda v: v * 1.01, ["timing.arms.baseline.stats.median"]),
    (HONEST, "metrics.baseline_ms", lambda v: v * 1.01, ["metrics.baseline_ms"]),
    (HONEST, "metrics.control", 1.05, ["metrics.control"]),
    (HONEST, "metrics.ms", lambda v: v / 2, ["metrics.ms"]),
    (HONEST, "metrics.gbps", lambda v: v * 2, ["metrics.gbps"]),
    (HONEST, "timing.n_dropped", lambda v: v + 1, ["timing.n_dropped"]),
    (HONEST, "rig_noisy", True, ["rig_noisy"]),
    (NOISY, "rig_noisy", False, ["rig_noisy"]),
])
def test_an_edited_figure_is_named(row, path, value, named):
    r = copy.deepcopy(_rows()[row])
    _set(r, path, value)
    assert [d.field for d in recompute(load(r))] == named


def test_a_noisy_row_made_clean_is_named_field_by_field():
    r = copy.deepcopy(_rows()[NOISY])
    r["metrics"]["control"] = r["timing"]["control_ratio"] = 1.0
    r["timing"]["control_ok"], r["rig_noisy"], r["rig_noise"] = True, False, []
    found = {d.field: d for d in recompute(load(r))}
    assert set(found) == {"metrics.control", "timing.control_ratio", "timing.control_ok", "rig_noisy", "rig_noise"}
    assert found["metrics.control"].recomputed == pytest.approx(0.8884641064851708)
    assert found["rig_noise"].recomputed == ["control 0.8885 outside 1 ± 0.02"]


def test_quanta_and_malformed_samples_are_named_not_raised():
    from harness.measurement.stats import QUANTUM_TICKS_MS, quantum

    # The fixture predates quanta; one of row 6's arms (host-timed) takes few distinct values.
    r = copy.deepcopy(_rows()[HONEST])
    r["timing"]["quanta"] = {}  # a row of today claiming no arm sits on a quantum
    assert [d.field for d in recompute(load(r))] == ["timing.quanta"]
    arm = "candidate:sdpa_math"
    q = quantum(r["timing"]["arms"][arm]["samples_ms"], QUANTUM_TICKS_MS)
    r["timing"]["quanta"] = {arm: q.as_dict() | {"why": q.describe()}}
    assert [d.field for d in recompute(load(r))] == ["rig_noisy", "rig_noise"]  # a quantised arm makes the row noisy
    r["rig_noisy"], r["rig_noise"] = True, [f"{arm}: {q.describe()}"]
    assert recompute(load(r)) == []
    r["timing"]["quanta"][arm]["distinct"] += 5
    assert [d.field for d in recompute(load(r))] == [f"timing.quanta.{arm}.distinct"]
    r = copy.deepcopy(_rows()[HONEST])
    r["timing"]["arms"]["control"]["samples_ms"] = ["NaN", 1.0]
    assert [d.field for d in recompute(load(r))] == ["timing.arms.control.samples_ms"]
    older = copy.deepcopy(_rows()[HONEST])  # a row of an older schema: what is absent is not checked
    for k in ("interleaved_ms", "host_us", "baseline_host_us", "sm_mhz", "power_w"):
        older["metrics"].pop(k, None)
    del older["rig_noise"], older["timing"]["rounds"]
    assert recompute(load(older)) == []


def test_verify_names_every_row_that_does_not_add_up(tmp_path):
    rows = _rows()[:BEFORE_VERDICT]
    path = tmp_path / "x.jsonl"
    path.write_bytes(_rechain(copy.deepcopy(rows)))
    assert verify(path).ok and verify(path).n_results == 6
    rows[HONEST]["metrics"]["speedup"] = 9.99
    rows[7]["metrics"]["control_ms"] *= 1.1
    path.write_bytes(_rechain(rows))  # the chain holds: only the figures can tell
    res = verify(path)
    assert not res.ok and not res.torn and res.bad_row == HONEST
    assert [(n, seq, [d.field for d in found]) for n, seq, found in res.unsound] == [
        (6, 6, ["metrics.speedup"]), (7, 7, ["metrics.control_ms"])]
    assert res.lines()[0].startswith("line 7 (seq 6) does not add up: metrics.speedup stored 9.99, its raw samples "
                                     "give 3.01472")
    assert "(and 1 more row: bench ledger verify names each)" in res.reason


@pytest.fixture
def fixture_repo(tmp_path: Path) -> Path:
    """The fixture's line, registered from its own file (same SHA-256), before its verdict."""
    return init_repo(tmp_path / "proj", {LINE: REGISTRATION})


def _commit_rows(root: Path, data: bytes) -> Path:
    path = root / "ledger" / f"{LINE}.jsonl"
    path.write_bytes(data)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "rows")
    return path


def test_the_verdict_dry_run_writes_nothing_and_a_forged_row_is_refused(fixture_repo):
    rows = _rows()[:BEFORE_VERDICT]
    path = _commit_rows(fixture_repo, _rechain(copy.deepcopy(rows)))
    before, head = path.read_bytes(), git(fixture_repo, "rev-parse", "HEAD")
    v = run_bench(fixture_repo, "verdict", LINE, "--no-commit")
    assert v.returncode == 0, v.stderr
    assert f"GO — dry run: nothing written, line {LINE} stays open" in v.stdout
    assert ", margin +" in v.stdout  # how far each passing clause clears its threshold
    j = run_bench(fixture_repo, "verdict", LINE, "--no-commit", "--format", "json")
    doc = json.loads(j.stdout)  # one JSON document on stdout, nothing else
    assert j.returncode == 0 and doc["outcome"] == "GO" and doc["dry_run"] and not doc["written"]
    assert doc["row"]["kind"] == "verdict" and doc["row"]["outcome"] == "GO" and doc["commit"] is None
    assert path.read_bytes() == before and git(fixture_repo, "rev-parse", "HEAD") == head
    assert git(fixture_repo, "status", "--porcelain") == ""

    # The observed attack: a row rewritten and re-hashed before its commit, then committed.
    rows[HONEST]["metrics"]["speedup"] = 9.99
    git(fixture_repo, "reset", "-q", "--hard", "HEAD~1")
    path = _commit_rows(fixture_repo, _rechain(rows))
    forged = path.read_bytes()
    for args in (("verdict", LINE), ("verdict", LINE, "--no-commit")):
        r = run_bench(fixture_repo, *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert (f"ledger/{LINE}.jsonl fails verification (line 7 (seq 6) does not add up: metrics.speedup stored "
                f"9.99, its raw samples give 3.01472") in r.stderr
        assert path.read_bytes() == forged
    r = run_bench(fixture_repo, "ledger", "verify", LINE)
    assert r.returncode == 1
    assert r.stdout.startswith(f"BAD  {LINE}.jsonl: line 7 (seq 6) does not add up: metrics.speedup stored 9.99")
    assert json.loads(forged.split(b"\n")[HONEST])["metrics"]["speedup"] == 9.99


def _cpu_ledger(tmp_path, go="pass_rate == 1.0"):
    """A ledger holding a real CPU result row (run_config, as the sweep writes it) and that row,
    read back through the ledger's JSON; skipped where the host gave no result."""
    from harness.ledger.store import Ledger
    from harness.pipeline.run import run_config
    from harness.workloads import Config
    from tests.conftest import sweep_context

    ctx = sweep_context(go=go, timing={"warmup_ms": 5, "min_samples": 8, "max_samples": 80, "min_time_ms": 5,
                                       "timeout_s": 30})
    cfg = Config(workload="attention", batch=1, heads=2, kv_heads=2, seq_len=32, head_dim=16, dtype="float32",
                 causal=False)
    led = Ledger(tmp_path, "t")
    for o in run_config(cfg, ctx.reg.candidates, ctx):
        led.append(o.kind, {"commit": "c" * 40, **o.payload})
    rows = [r for r in led.rows() if r.kind == "result"]
    if not rows:
        pytest.skip(f"the host gave no result ({[r.reason for r in led.rows()]})")
    return led, rows[0]


@pytest.mark.parametrize("go", ["pass_rate == 1.0", "pass_rate == 1.0 and min(tflops) > 0"])
def test_rows_the_sweep_writes_today_add_up(tmp_path, go):
    """The writer (harness/pipeline) and the auditor agree: a real CPU result, interleaved and
    (a bar over a rate) sustained, through the ledger's JSON, recomputes to itself."""
    led, row = _cpu_ledger(tmp_path, go)
    assert row.rate_protocol == ("sustained" if "tflops" in go else "interleaved")
    assert recompute(row) == []
    assert verify(led.path).ok


# ------------------------------------------------------------- host_us (issue 47, item 5)

def _cpu_result(tmp_path, go="pass_rate == 1.0"):
    """A real CPU result row's JSON (``_cpu_ledger``)."""
    return _cpu_ledger(tmp_path, go)[1].dump()


def test_host_times_and_clocks_are_held_to_the_rows_own_record(tmp_path):
    """host_us and baseline_host_us are recomputed from the host enqueue times the row keeps
    (a host_us bar could be forged by editing the figure alone); sm_mhz and power_w are held to
    the row's clock record."""
    row = _cpu_result(tmp_path)
    arm = f"candidate:{row['candidate']}"
    kept = row["timing"]["host_samples_us"]
    assert set(kept) == set(row["timing"]["host_us"]) and len(kept[arm]) == len(row["timing"]["arms"][arm]["samples_ms"])
    assert recompute(load(row)) == []

    def found(edit) -> list[str]:
        r = copy.deepcopy(row)
        edit(r)
        return [d.describe() for d in recompute(load(r))]

    def halve_host_us(r):
        r["metrics"]["host_us"] /= 2
    assert found(halve_host_us) == [f"metrics.host_us stored {row['metrics']['host_us'] / 2:.10g}, its raw samples "
                                    f"give {row['metrics']['host_us']:.10g}"]
    assert [d.split(" ")[0] for d in found(lambda r: _set(r, "metrics.baseline_host_us", 0.5))] == [
        "metrics.baseline_host_us"]

    def both(r):  # the figure and the timing record forged together: the host times still give it away
        r["metrics"]["host_us"] = r["timing"]["host_us"][arm] = 0.5
    assert [d.split(" ")[0] for d in found(both)] == [f"timing.host_us.{arm}"]
    assert [d.split(" ")[0] for d in found(lambda r: r["timing"]["host_samples_us"].pop(arm))] == [
        "timing.host_samples_us"]
    assert found(lambda r: _set(r, "metrics.sm_mhz", 1980.0)) == [
        "metrics.sm_mhz stored 1980, its timing.clock record gives None"]  # the CPU: no clocks polled
    assert [d.split(" ")[0] for d in found(lambda r: _set(r, "metrics.power_w", 300.0))] == ["metrics.power_w"]


def test_a_host_us_bar_is_refused_on_rows_that_keep_no_host_times(tmp_path):
    """A result written before rows kept their host times holds host_us unchecked: a bar
    reading it is refused; the same rows with their host times are decided."""
    from harness.ledger.store import Ledger
    from harness.governance.line import open_line, register
    from harness.pipeline.run import run_config
    from harness.commands.sweep import context
    from tests.conftest import TINY

    text = TINY.replace("seq_len = [32, 48]", "seq_len = [32]").replace("timeout_s = 5", "timeout_s = 30").replace(
        'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"', 'go = "max(host_us) <= 1e6 and pass_rate == 1.0"')
    repo = init_repo(tmp_path / "proj", {"kept": text, "old": text})
    for line in ("kept", "old"):
        register(line, root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registered")
    env = {"device": "cpu", "gpu": None}
    with open_line("kept", root=repo, action="a test") as line:
        stamp = line.stamp(env).fields()
        (cfg,) = line.reg.configs
        outcomes = run_config(cfg, line.reg.candidates, context(line, "cpu", None))
    if [o.kind for o in outcomes] != ["result"]:
        pytest.skip(f"the host gave no result ({[o.payload.get('reason') for o in outcomes]})")
    (o,) = outcomes
    Ledger(repo, "kept").append(o.kind, {**stamp, **o.payload})
    old = copy.deepcopy(o.payload)
    del old["timing"]["host_samples_us"]
    Ledger(repo, "old").append(o.kind, {**stamp, **old})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "rows")
    assert verify(repo / "ledger" / "old.jsonl").ok  # an older row verifies on what it has
    r = run_bench(repo, "verdict", "old", "--no-commit")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert ("its bar reads host_us, which `bench ledger verify` could not check on row 1 (sdpa @ "
            f"{cfg.key()}): it keeps no timing.host_samples_us") in r.stderr
    decided = run_bench(repo, "verdict", "kept", "--no-commit")
    assert decided.returncode == 0 and "GO" in decided.stdout, decided.stdout + decided.stderr


# ------------------------------------------------------------- plugin workloads' rates (issue 50, item 5)

GEMM_CONFIG = {"workload": "gemm_bias_gelu", "m": 64, "n": 32, "k": 16, "dtype": "float32", "gelu": "exact"}


def _as_workload_row(config: dict) -> dict:
    """The fixture's honest row as a row of another workload: its config and rates as that
    workload's formulas give them at the row's ms (no floor: a row swept without ceilings)."""
    from harness.errors import UserError
    from harness.measurement.timing.sustained import rates
    from harness.registry import get_workload

    r = copy.deepcopy(_rows()[HONEST])
    r["config"], r["floor"] = dict(config), None
    for k in ("gbps_frac", "kv_gbps_frac"):
        r["metrics"].pop(k, None)
    try:
        wl = get_workload(config["workload"])
    except UserError:  # a workload not installed here: the row keeps the fixture's figures
        return r
    r["metrics"].update(rates(wl.from_row(config), r["metrics"]["ms"], wl))
    return r


def test_a_plugin_row_s_rates_are_recomputed_from_its_workload_even_without_ceilings():
    from harness.ledger.audit import rates_unaudited

    r = _as_workload_row(GEMM_CONFIG)
    assert recompute(load(r)) == [] and rates_unaudited(load(r)) is None
    for field in ("tflops", "gbps"):
        forged = copy.deepcopy(r)
        forged["metrics"][field] *= 2
        assert [d.field for d in recompute(load(forged))] == [f"metrics.{field}"]


def test_a_row_of_a_workload_not_installed_says_its_rates_were_not_re_audited(tmp_path):
    from harness.ledger.audit import rates_unaudited

    rows = _rows()
    rows[HONEST] = _as_workload_row({"workload": "nosuch", "rows": 4, "dtype": "float32"})
    rows[HONEST]["metrics"]["tflops"] *= 2  # not recomputable here: not named, but said
    assert recompute(load(rows[HONEST])) == []
    assert rates_unaudited(load(rows[HONEST])) == "rates not re-audited: workload 'nosuch' is not installed"
    path = tmp_path / "ledger" / f"{LINE}.jsonl"
    path.parent.mkdir()
    path.write_bytes(_rechain(rows))
    res = verify(path)
    assert res.ok and res.unaudited == ("rates not re-audited: workload 'nosuch' is not installed (1 result row)",)
