"""register → sweep → verdict end to end, through the real CLI in real git repositories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.cli.sweep import EXIT_NOTHING_USABLE

from harness.ledger.rows import load
from harness.vocab import metrics
from harness.ledger.format import read_rows
from harness.ledger.verify import verify
from harness.vocab.outcomes import OUTCOME_KINDS
from tests.conftest import TINY, bench_env, git, run_bench

pytestmark = pytest.mark.slow


def rows(repo, line="tiny"):
    return read_rows(repo / "ledger" / f"{line}.jsonl")


def kinds(repo, line="tiny"):
    return [r.kind for r in rows(repo, line)]


def test_register_sweep_verdict_and_the_refusals(repo):
    r = run_bench(repo, "register", "registrations/tiny.toml")
    assert r.returncode == 0, r.stderr
    assert kinds(repo) == ["registered"]
    head = git(repo, "rev-parse", "HEAD")
    assert rows(repo)[0].commit == head and rows(repo)[0].registration_commit == head

    again = run_bench(repo, "register", "registrations/tiny.toml")
    assert again.returncode == 2 and "already registered" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    early = run_bench(repo, "verdict", "tiny")
    assert early.returncode == 2 and "no outcome yet" in early.stderr

    s = run_bench(repo, "sweep", "tiny")
    assert s.returncode == 0, s.stderr + s.stdout
    # The bar was checked against this device's ceilings, measured before the first config.
    assert "reductio: the bar can be met on" in " ".join(s.stdout.split())
    results = [r for r in rows(repo) if r.kind == "result"]
    assert len(results) == 2
    for res in results:
        assert res.commit == head and len(res.commit) == 40
        m = res.metrics
        assert m["speedup"] > 0 and m["ms"] > 0 and m["tflops"] > 0
        if res.env["device"] == "cpu":
            assert res.timing["clock_note"]  # says why clocks were not monitored
        else:  # NVML polled during timing, reference taken under load
            assert res.timing["clock"]["poll_hz"] >= 100 and res.timing["clock"]["reference_mhz"] > 0
        assert res.gate["candidate"]["passed"] and res.gate["baseline"]["passed"]
        assert len(res.timing["arms"]["candidate:sdpa"]["samples_ms"]) >= 5
        # Every row metric the bar accepts is in the row (tflops_at(F) is computed from them), and
        # known: the fractions from the ceilings the sweep measured, only NVML's clock, power and
        # cycles unknown on the CPU.
        assert set(m) == set(metrics.NAMES)
        unknown = [name for name in metrics.NAMES if m[name] is None]
        assert unknown == ([name for name in metrics.NAMES if metrics.BY_NAME[name].needs == "nvml"]
                           if res.env["device"] == "cpu" else []), unknown
    assert (repo / "ledger" / "_device_ceilings.jsonl").exists()
    # The ceilings it measured were committed first, then each config's rows as it ended;
    # the stamp stayed the code commit, and the tree is clean.
    subjects = git(repo, "log", "--format=%s", f"{head}..HEAD").splitlines()
    assert len(subjects) == 3 and subjects[-1] == (f"bench: ledger/_device_ceilings.jsonl row 0 (ceilings for the "
                                                   f"sweep of tiny at {head[:12]})"), subjects
    assert subjects[-2].startswith("bench: ledger/tiny.jsonl rows 0-"), subjects
    assert all(x.endswith(f"(sweep of tiny at {head[:12]})") for x in subjects[:-1]), subjects
    assert subjects[0].endswith(f"row {len(rows(repo)) - 1} (sweep of tiny at {head[:12]})"), subjects
    assert git(repo, "status", "--porcelain") == ""

    n = len(rows(repo))
    resumed = run_bench(repo, "sweep", "tiny")
    assert resumed.returncode == 0 and len(rows(repo)) == n  # every pair already done at this commit
    assert "already done" in resumed.stdout

    v = run_bench(repo, "verdict", "tiny")
    assert v.returncode == 0, v.stderr + v.stdout
    assert "GO" in v.stdout and "geomean(speedup) >= 0.01" in v.stdout
    verdict = rows(repo)[-1]
    assert verdict.kind == "verdict" and verdict.outcome == "GO" and verdict.commit == head
    assert git(repo, "log", "-1", "--format=%s") == f"bench: ledger/tiny.jsonl row {n} (verdict of tiny: GO)"
    assert "committed as" in v.stdout
    assert verdict.prediction == 1.5 and verdict.primary_value > 0

    closed = run_bench(repo, "sweep", "tiny")
    assert closed.returncode == 2 and "closed" in closed.stderr
    assert run_bench(repo, "verdict", "tiny").returncode == 2
    assert len(rows(repo)) == n + 1

    ok = run_bench(repo, "ledger", "verify")
    assert ok.returncode == 0 and "chain intact" in ok.stdout
    shown = run_bench(repo, "ledger", "show", "tiny")
    assert shown.returncode == 0 and "result" in shown.stdout and "GO" in shown.stdout
    csv = run_bench(repo, "ledger", "show", "tiny", "--csv")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].count(",") > 10
    js = run_bench(repo, "ledger", "show", "tiny", "--json")
    assert [json.loads(x)["kind"] for x in js.stdout.splitlines()] == kinds(repo)


def test_no_go_exits_1(repo):
    p = repo / "registrations" / "tiny.toml"
    p.write_text(p.read_text().replace("geomean(speedup) >= 0.01", "geomean(speedup) >= 1000"))
    git(repo, "commit", "-qam", "impossible bar")
    assert run_bench(repo, "register", "tiny").returncode == 0
    assert run_bench(repo, "sweep", "tiny").returncode == 0
    v = run_bench(repo, "verdict", "tiny")
    assert v.returncode == 1 and "NO-GO" in v.stdout
    assert rows(repo)[-1].outcome == "NO-GO"


def test_dirty_tree_refused_and_nothing_written(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    (repo / "scratch.py").write_text("print('hi')\n")
    r = run_bench(repo, "sweep", "tiny")
    assert r.returncode == 2 and "scratch.py" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before
    assert run_bench(repo, "verdict", "tiny").returncode == 2
    (repo / "registrations" / "other.toml").write_text("x")
    assert run_bench(repo, "register", "registrations/tiny.toml").returncode == 2


def test_edited_registration_refused_naming_the_commit(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    reg_commit = rows(repo)[0].registration_commit
    p = repo / "registrations" / "tiny.toml"
    p.write_text(p.read_text().replace(">= 0.01", ">= 0.001"))
    git(repo, "commit", "-qam", "loosen the bar after the fact")
    r = run_bench(repo, "sweep", "tiny")
    assert r.returncode == 2 and "changed since it was registered" in r.stderr and reg_commit[:12] in r.stderr
    assert kinds(repo) == ["registered"]


def test_amending_line_names_the_old_one(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    text = (repo / "registrations" / "tiny.toml").read_text()
    (repo / "registrations" / "tiny2.toml").write_text('amends = "tiny"\n' + text.replace(">= 0.01", ">= 0.5"))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "amend")
    assert run_bench(repo, "register", "tiny2").returncode == 0
    assert rows(repo, "tiny2")[0].amends == "tiny" and kinds(repo) == ["registered"]
    (repo / "registrations" / "tiny3.toml").write_text('amends = "nope"\n' + text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "bad amend")
    r = run_bench(repo, "register", "tiny3")
    assert r.returncode == 2 and "no line 'nope'" in r.stderr
    assert not (repo / "ledger" / "tiny3.jsonl").exists()


@pytest.mark.serial  # signals and a kill timed against a running sweep
def test_kill_mid_sweep_loses_no_written_row_and_resume_completes(repo):
    p = repo / "registrations" / "tiny.toml"
    p.write_text(p.read_text().replace("seq_len = [32, 48]", "seq_len = [32, 40, 48, 56, 64, 72]")
                 .replace("min_time_ms = 5", "min_time_ms = 300").replace("warmup_ms = 5", "warmup_ms = 100"))
    git(repo, "commit", "-qam", "six configs")
    assert run_bench(repo, "register", "tiny").returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", "tiny"], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=bench_env())
    deadline = time.time() + 120
    while time.time() < deadline and sum(k == "result" for k in kinds(repo)) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    got = [r for r in rows(repo) if r.kind == "result"]
    assert 2 <= len(got) < 6, "kill the sweep while configs remain"
    assert verify(repo / "ledger" / "tiny.jsonl").ok
    locks = sorted((repo / ".git").rglob("*.lock"))
    if locks:  # the kill landed in git's commit of a config's rows
        r = run_bench(repo, "sweep", "tiny")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert ".lock exists and stayed for 30 s: another git command is running, or one was killed" in r.stderr
        for lock in locks:
            lock.unlink()
    assert run_bench(repo, "sweep", "tiny").returncode == 0
    # Resumed: every config has one outcome, nothing ran twice, and the rows written before the
    # kill are the ones kept. (On a loaded host a config may end `skipped`, e.g. too many rounds
    # descheduled to judge: an outcome all the same, never measured again by a resume.)
    outcomes = [r for r in rows(repo) if r.kind in OUTCOME_KINDS]
    keys = [r.config_key for r in outcomes]
    assert len(keys) == 6 and len(set(keys)) == 6, [(r.config_key, r.kind, r.reason) for r in outcomes]
    assert {r.seq for r in got} <= {r.seq for r in outcomes}
    assert sum(r.kind == "result" for r in outcomes) >= len(got)
    assert verify(repo / "ledger" / "tiny.jsonl").ok
    assert git(repo, "status", "--porcelain", "--", "ledger/tiny.jsonl") == ""  # every row committed


def test_bad_input_gets_one_line_and_exit_2(repo, tmp_path):
    r = run_bench(repo, "register", "registrations/missing.toml")
    assert r.returncode == 2 and "no registration file" in r.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    r = run_bench(outside, "sweep", "tiny")
    assert r.returncode == 2 and "not inside a git repository" in r.stderr
    r = run_bench(repo, "sweep", "tiny")
    assert r.returncode == 2 and "not registered" in r.stderr
    # Usage errors (from click, or the click copy typer vendors): one line, exit 2, no traceback.
    for args, msg in ((("ledger", "verify", "a", "b"), "unexpected extra argument"),
                      (("sweep", "--bogus"), "No such option"), (("nosuch",), "No such command")):
        r = run_bench(repo, *args)
        assert r.returncode == 2 and msg in r.stderr and "--help" in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


# Modules whose import takes seconds: `bench --help` must import none of them. (Checked by
# what is imported, not by wall time, which a loaded machine stretches.)
HEAVY_MODULES = ("torch", "triton", "cupy", "pynvml", "scipy", "pandas", "matplotlib", "ray", "numpy")


def test_cli_help_is_fast_and_lists_kernels(repo):
    h = run_bench(repo, "--help")
    assert h.returncode == 0 and "sweep" in h.stdout and "warm" in h.stdout
    code = ("import sys\nfrom harness.cli import main\nrc = main(['--help'])\n"
            f"print('HEAVY', sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules), rc)")
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=600,
                       env=bench_env())
    assert r.returncode == 0 and "HEAVY [] 0" in r.stdout, (r.stdout[-500:], r.stderr[-2000:])
    k = run_bench(repo, "kernels")
    assert k.returncode == 0 and "torch_stack" in k.stdout and "cublas_stack" in k.stdout


def test_verdict_ignores_a_hollow_baseline_row_but_counts_its_candidates_as_skipped():
    from harness.governance.verdict import bar_rows, latest_outcomes

    cfg = {"workload": "attention", "batch": 1, "heads": 2, "kv_heads": 2, "seq_len": 32, "head_dim": 16,
           "dtype": "float32", "causal": False}
    rows = [load(d) for d in (
        {"seq": 1, "kind": "incorrect", "role": "baseline", "config": cfg, "config_key": "c", "candidate": "stack"},
        {"seq": 2, "kind": "skipped", "config": cfg, "config_key": "c", "candidate": "sdpa"},
        {"seq": 3, "kind": "incorrect", "role": "candidate", "config": cfg, "config_key": "d", "candidate": "sdpa"},
    )]
    got, excluded = bar_rows(latest_outcomes(rows), include_noisy=False)
    assert got == [{**cfg, "candidate": "sdpa", "correct": False}]
    assert excluded == {"baseline_incorrect": 1, "skipped": 1}


def test_resume_is_per_device_and_retries_transient_outcomes():
    from harness.commands.plan import plan, replaced_by
    from harness.workloads import Config

    class Reg:
        configs = (Config("attention", 1, 2, 2, 32, 16, "float32", False),
                   Config("attention", 1, 2, 2, 48, 16, "float32", False))
        candidates = ("sdpa",)
        mixed_devices = False

    a, b = (c.key() for c in Reg.configs)
    cpu = {"device": "cpu", "gpu": None}
    rows = [load(d) for d in (
        {"seq": 1, "kind": "result", "config_key": a, "candidate": "sdpa", "commit": "c1", "env": cpu},
        {"seq": 2, "kind": "throttled", "config_key": b, "candidate": "sdpa", "commit": "c1", "env": cpu},
        {"seq": 3, "kind": "incorrect", "role": "baseline", "config_key": b, "candidate": "stack", "commit": "c1",
         "env": cpu})]
    tasks, done = plan(Reg, rows, ("c1", "cpu", None, None))
    assert done == 1 and [t.config.key() for t in tasks] == [b]  # the throttled pair is retried
    assert replaced_by(tasks[0], rows, ("c1", "cpu", None, None)) == [2, 3]
    gpu_tasks, gpu_done = plan(Reg, rows, ("c1", "cuda", "NVIDIA H200", None))
    assert gpu_done == 0 and len(gpu_tasks) == 2  # a GPU sweep inherits nothing from the CPU
    assert replaced_by(gpu_tasks[0], rows, ("c1", "cuda", "NVIDIA H200", None)) == [1]


def test_verdict_refuses_a_tampered_chain_and_mixed_measurements(repo):
    from harness.ledger.store import Ledger

    assert run_bench(repo, "register", "tiny").returncode == 0
    assert run_bench(repo, "sweep", "tiny").returncode == 0
    path = repo / "ledger" / "tiny.jsonl"
    good = path.read_bytes()
    lines = good.split(b"\n")
    lines[1] = lines[1].replace(b'"speedup":', b'"speedup":1000', 1).replace(b'"speedup":1000-', b'"speedup":-')
    path.write_bytes(b"\n".join(lines))
    r = run_bench(repo, "verdict", "tiny")
    assert r.returncode == 2 and "fails verification" in r.stderr
    assert path.read_bytes() == b"\n".join(lines)  # nothing appended

    path.write_bytes(good)
    last = [x for x in read_rows(path) if x.kind == "result"][-1]
    moved = {k: v for k, v in last.dump().items() if k not in ("seq", "hash", "prev_hash", "time", "schema", "kind", "line")}
    Ledger(repo, "tiny").append("result", {**moved, "commit": "f" * 40})  # same pair, measured elsewhere
    r = run_bench(repo, "verdict", "tiny")
    assert r.returncode == 2 and "measured in 2 places" in r.stderr


def test_a_verdict_over_several_gpu_models_needs_mixed_devices(repo):
    """Rows of one commit from two GPU models (as a Ray cluster of mixed hosts writes them):
    refused by default, decided for a line registered with [bar] mixed_devices = true."""
    from harness.ledger.store import Ledger
    from harness.vocab.outcomes import current_rows
    from harness.vocab.outcomes import OUTCOME_KINDS

    mix = TINY.replace("schema = 1", "schema = 2").replace("include_noisy = true",
                                                           "include_noisy = true\nmixed_devices = true")
    (repo / "registrations" / "tinymix.toml").write_text(mix)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a line over mixed devices")
    for line in ("tiny", "tinymix"):
        assert run_bench(repo, "register", line).returncode == 0
    assert run_bench(repo, "sweep", "tiny", "--device", "cpu", "--no-ceilings").returncode == 0
    outs = [r for r in current_rows(read_rows(repo / "ledger" / "tiny.jsonl")) if r.kind in OUTCOME_KINDS]
    gpus = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    for line in ("tiny", "tinymix"):
        for i, r in enumerate(outs):
            moved = {k: v for k, v in r.dump().items() if k not in ("seq", "hash", "prev_hash", "time", "schema", "kind", "line")}
            Ledger(repo, line).append(r.kind, {**moved, "env": {**r.env, "device": "cuda", "gpu": gpus[i % 2]}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "rows from two GPU models")
    refused = run_bench(repo, "verdict", "tiny")
    assert refused.returncode == 2 and "mixed_devices = true" in refused.stderr, refused.stderr
    assert "NVIDIA H100 80GB HBM3, NVIDIA H200" in refused.stderr
    decided = run_bench(repo, "verdict", "tinymix")
    assert decided.returncode in (0, 1), decided.stdout + decided.stderr
    (verdict,) = [r for r in read_rows(repo / "ledger" / "tinymix.jsonl") if r.kind == "verdict"]
    assert verdict.measured_at["gpu"] == " + ".join(gpus)


def test_a_line_in_use_is_refused(repo):
    from harness.governance.line import line_lock

    assert run_bench(repo, "register", "tiny").returncode == 0
    with line_lock(repo, "tiny"):
        r = run_bench(repo, "sweep", "tiny")
    assert r.returncode == 2 and "in use by another bench command" in r.stderr
    assert kinds(repo) == ["registered"]


def test_ceilings_are_stored_once_per_device_and_need_a_clean_tree(repo):
    first = run_bench(repo, "ceilings")
    assert first.returncode == 0 and "measured" in first.stdout and "copy bandwidth" in first.stdout
    again = run_bench(repo, "ceilings")
    assert again.returncode == 0 and "stored" in again.stdout
    assert len(read_rows(repo / "ledger" / "_device_ceilings.jsonl")) == 1
    assert git(repo, "status", "--porcelain") == ""  # committed when measured
    (repo / "scratch.py").write_text("x = 1\n")
    dirty = run_bench(repo, "ceilings", "--force")
    assert dirty.returncode == 2 and "scratch.py" in dirty.stderr
    assert len(read_rows(repo / "ledger" / "_device_ceilings.jsonl")) == 1


def test_a_candidate_that_cannot_run_here_refuses_the_sweep_before_any_write(repo):
    p = repo / "registrations" / "tiny.toml"
    p.write_text(p.read_text().replace('candidate = "sdpa"', 'candidates = ["sdpa", "cublas_stack"]'))
    git(repo, "commit", "-qam", "a GPU-only candidate")
    assert run_bench(repo, "register", "tiny").returncode == 0
    # The sweep's worker starts while these checks run (issue 32): refused, it is stopped too.
    import os
    import subprocess
    import sys
    import uuid

    from tests.conftest import bench_env

    mark = f"BENCH_TEST_MARK={uuid.uuid4().hex}".encode()
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", "tiny"], cwd=repo, capture_output=True, text=True,
                       timeout=600, env={**bench_env(), "BENCH_TEST_MARK": mark.decode().split("=", 1)[1]})
    assert r.returncode == 2 and "candidate 'cublas_stack' cannot run on this machine" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert kinds(repo) == ["registered"] and not (repo / "ledger" / "_device_ceilings.jsonl").exists()
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    alive.append(pid)
        except OSError:  # gone, or not ours to read
            continue
    assert alive == [], f"processes of the refused sweep still alive: {alive}"


def test_never_measured_pairs_refuse_the_verdict_unless_the_bar_allows_missing(repo):
    from harness.ledger.store import Ledger

    p = repo / "registrations" / "tiny.toml"
    allow = p.read_text().replace("include_noisy = true", "include_noisy = true\nallow_missing = true")
    (repo / "registrations" / "tiny2.toml").write_text(allow)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a second line that allows missing pairs")
    for line in ("tiny", "tiny2"):
        assert run_bench(repo, "register", line).returncode == 0
        assert run_bench(repo, "sweep", line).returncode == 0
        # the last config's result is replaced by a memory skip measured at the same place
        last = [x for x in read_rows(repo / "ledger" / f"{line}.jsonl") if x.kind == "result"][-1]
        keep = ("commit", "registration_sha256", "registration_commit", "harness_version", "code", "env", "config",
                "config_key", "candidate", "baseline")
        Ledger(repo, line).append("skipped", {**{k: getattr(last, k) for k in keep}, "predicted_bytes": 2, "available_bytes": 1,
                                              "reason": "predicted peak > available"})
    uncommitted = run_bench(repo, "verdict", "tiny2")
    assert uncommitted.returncode == 2 and "row 3 not committed" in uncommitted.stderr
    assert "git add ledger/tiny2.jsonl" in uncommitted.stderr and len(uncommitted.stderr.strip().splitlines()) == 1
    git(repo, "add", "ledger/tiny.jsonl", "ledger/tiny2.jsonl")
    git(repo, "commit", "-qm", "the skips")
    refused = run_bench(repo, "verdict", "tiny")
    assert refused.returncode == 2 and "never measured (skipped: 1)" in refused.stderr
    assert read_rows(repo / "ledger" / "tiny.jsonl")[-1].kind == "skipped"  # nothing written
    allowed = run_bench(repo, "verdict", "tiny2")
    assert allowed.returncode == 0, allowed.stderr
    assert read_rows(repo / "ledger" / "tiny2.jsonl")[-1].excluded == {"skipped": 1}


def test_a_registration_inside_the_ledger_directory_is_refused(repo):
    (repo / "ledger" / "sneaky.toml").write_text((repo / "registrations" / "tiny.toml").read_text())
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registration in ledger/")
    r = run_bench(repo, "register", "ledger/sneaky.toml")
    assert r.returncode == 2 and "cannot live in ledger/" in r.stderr
    assert not (repo / "ledger" / "sneaky.jsonl").exists()


def test_rig_noisy_pairs_are_measured_again_and_a_verdict_needs_every_pair_decided(repo):
    # A control tolerance no rig meets: every result is rig-noisy, so the sweep measures each
    # config again (NOISY_REMEASURES times, superseding the noisy rows), and the verdict
    # refuses, naming the undecided pairs.
    from harness.commands.sweep import NOISY_REMEASURES

    p = repo / "registrations" / "tiny.toml"
    noisy = p.read_text().replace("timeout_s = 5", "timeout_s = 5\ncontrol_tolerance = 1e-12").replace(
        "include_noisy = true", "include_noisy = false")
    (repo / "registrations" / "noisy.toml").write_text(noisy)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a line with an impossible control tolerance")
    assert run_bench(repo, "register", "noisy").returncode == 0
    s = run_bench(repo, "sweep", "noisy")
    assert s.returncode == EXIT_NOTHING_USABLE, s.stderr  # every pair rig-noisy: nothing the verdict can use
    assert "measured again later in the sweep" in s.stdout
    rs = rows(repo, "noisy")
    assert sum(r.kind == "result" for r in rs) == 2 * (1 + NOISY_REMEASURES)
    assert sum(r.kind == "supersedes" and "rig-noisy" in r.reason for r in rs) == 2 * NOISY_REMEASURES
    refused = run_bench(repo, "verdict", "noisy")
    assert refused.returncode == 2 and "decide on 0 of 2 registered pairs" in refused.stderr
    assert "sdpa @ attention/b1/h2/kv2/n32/d16/float32/full (rig-noisy)" in refused.stderr
    assert rows(repo, "noisy")[-1].kind == "result"  # nothing written


def test_the_verdict_row_records_its_coverage(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    assert run_bench(repo, "sweep", "tiny").returncode == 0
    assert run_bench(repo, "verdict", "tiny").returncode in (0, 1)
    v = rows(repo)[-1]
    assert v.kind == "verdict"
    assert v.coverage == {"pairs": 2, "decided": 2, "fraction": 1.0, "undecided": [], "min_coverage": 1.0}


def test_no_commit_leaves_the_rows_to_the_user_and_the_verdict_waits_for_them(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    head = git(repo, "rev-parse", "HEAD")
    s = run_bench(repo, "sweep", "tiny", "--no-commit")
    assert s.returncode == 0, s.stderr
    assert "has rows no commit holds yet" in s.stdout and git(repo, "rev-parse", "HEAD") == head
    assert "ledger/_device_ceilings.jsonl row 0) is not committed (--no-commit)" in s.stdout
    last = len(rows(repo)) - 1
    v = run_bench(repo, "verdict", "tiny")
    assert v.returncode == 2 and f"rows 0-{last} not committed" in v.stderr
    assert "git add ledger/tiny.jsonl && git commit" in v.stderr and len(v.stderr.strip().splitlines()) == 1
    assert kinds(repo)[-1] != "verdict"
    # Issue 47: the ceilings row the first run measured is no later run's to commit: refused until
    # the user commits it (vouching for it, as the first run's summary said).
    refused = run_bench(repo, "sweep", "tiny")
    assert refused.returncode == 2 and "ledger/_device_ceilings.jsonl row 0 not committed" in refused.stderr
    git(repo, "add", "ledger/_device_ceilings.jsonl")
    git(repo, "commit", "-qm", "the ceilings my --no-commit sweep measured", "--", "ledger/_device_ceilings.jsonl")
    again = run_bench(repo, "sweep", "tiny")  # nothing left to run: it commits what the first one left
    assert again.returncode == 0 and "already done" in again.stdout
    subject = git(repo, "log", "-1", "--format=%s")
    assert subject == f"bench: ledger/tiny.jsonl rows 0-{last} (sweep of tiny at {head[:12]})"
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    v = run_bench(repo, "verdict", "tiny", "--no-commit")  # a dry run: a verdict row exists only committed
    assert v.returncode in (0, 1), v.stderr
    assert "dry run: nothing written, line tiny stays open" in v.stdout
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before and kinds(repo)[-1] != "verdict"
    assert git(repo, "status", "--porcelain", "--", "ledger/tiny.jsonl") == ""
    assert run_bench(repo, "ledger", "verify", "tiny").returncode == 0


def test_an_unwritable_ledger_is_refused_before_any_work(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    path = repo / "ledger" / "tiny.jsonl"
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (file system, or not root)")
    try:
        for cmd in ("sweep", "verdict"):
            r = run_bench(repo, cmd, "tiny")
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert "ledger/tiny.jsonl is not writable (Operation not permitted)" in r.stderr
        assert not (repo / "ledger" / "_device_ceilings.jsonl").exists()  # no work was done
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert kinds(repo) == ["registered"]


def test_a_torn_final_row_names_the_repair_and_the_repaired_line_sweeps(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    path = repo / "ledger" / "tiny.jsonl"
    path.write_bytes(path.read_bytes() + b'{"schema":1,"seq":1,"kind":"res')  # killed mid-write
    r = run_bench(repo, "sweep", "tiny")
    assert r.returncode == 2 and "run `bench ledger repair tiny`" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    fixed = run_bench(repo, "ledger", "repair", "tiny")
    assert fixed.returncode == 0 and "what would have been row 1" in fixed.stdout
    assert kinds(repo) == ["registered"] and verify(path).ok
