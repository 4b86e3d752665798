"""An overnight sweep survives any kernel: worker isolation, the watchdog, the device lock,
interruption, and several workers, end to end through real `bench` subprocesses.

Fault kernels (tests/fault_kernels.py) are installed as a ``bench.kernels`` entry-point
plugin; each runs between two honest candidates, and the sweep must end normally with a
result for every honest pair and one `crashed` row naming the cause for the faulty one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, bench_env, git, init_repo, installed_dist, reported_configs

# The tests that send signals, kill processes or hold the device lock are marked `serial`: the
# README's second pass runs them alone, never beside another xdist worker.
SERIAL = pytest.mark.serial

# Short enough that the hang test costs seconds; long enough for a tiny gate on a loaded CI host.
TEST_WATCHDOG_S = 15

FAULT_LINE = textwrap.dedent('''\
    schema = 1
    hypothesis = "an honest kernel is measured whatever its neighbour does"
    workload = "attention"
    candidates = ["sdpa", "{fault}", "honest_stack"]
    baseline = "torch_stack"

    [grid]
    batch = [1]
    heads = [2]
    seq_len = {seq_lens}
    head_dim = [16]
    dtype = ["{dtype}"]
    causal = [false]

    [correctness]
    atol = {tol}
    rtol = {tol}
    # This line tests isolation, not tolerance power: the float16 GPU variant's 2e-2 cannot
    # see a 1% scale error or a dropped last key at these sizes (register would refuse it).
    accept_weak = {weak}
    seeds = [0]
    families = ["normal"]

    [timing]
    # On a GPU, warm-up must outlast a few NVML polls (the reference clock is read in its tail).
    warmup_ms = {warmup}
    min_samples = 3
    # The memory-of-inputs judgement (timing/refresh.py) needs 10 first-seen and 10 seen calls
    # (after a sham, on the host): measure runs up to REFRESH_EXTRA_ROUNDS past max_samples for them.
    max_samples = 20
    min_time_ms = 2
    # Room for those rounds on a busy 2-core host (descheduled rounds are not samples).
    timeout_s = 6
    watchdog_s = {watchdog}

    [bar]
    # This line tests isolation, not speed: a bar that can decide (register refuses one that cannot).
    go = "count >= 1"
    prediction = 1.0
    include_noisy = true
    ''')

# fault kernel -> text its `crashed` row's reason must contain
CPU_FAULTS = {
    "fault_raise": "deliberate failure",
    "fault_oom": "allocate",
    "fault_segv": "SIGSEGV",
    "fault_timing_segv": "SIGSEGV",
    "fault_sigkill": "SIGKILL",
    "fault_hang": f"watchdog after {TEST_WATCHDOG_S} s in gate of fault_hang",
}
GPU_FAULTS = {
    **CPU_FAULTS,
    "fault_oom": "out of memory",
    "fault_oob_write": "illegal memory access",
    "fault_spin": f"watchdog after {TEST_WATCHDOG_S} s in gate of fault_spin",
}


def _plugin_env(tmp_path: Path) -> dict:
    """bench's environment with the fault kernels installed as an entry-point plugin."""
    site = installed_dist(tmp_path / "site", "benchfaults", "0.1", "[bench.kernels]\nfaults = fault_kernels\n",
                          {"fault_kernels": (REPO / "tests" / "fault_kernels.py").read_text()})
    env = bench_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    return env


def _repo(tmp_path: Path, line: str, text: str) -> Path:
    return init_repo(tmp_path / "proj", {line: text})


def _bench(root: Path, env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _popen(root: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _rows(root: Path, line: str) -> list[dict]:
    path = root / "ledger" / f"{line}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _until_waiting(sweep: subprocess.Popen) -> str:
    """The sweep's output up to the line saying it waits for the device."""
    seen = ""
    while "waiting" not in seen:
        line = sweep.stdout.readline()
        assert line, "the sweep ended without waiting"
        seen += line
    return seen


def _outcomes(root: Path, line: str) -> list[dict]:
    from harness.vocab.outcomes import current_rows
    from harness.vocab.outcomes import OUTCOME_KINDS

    from harness.ledger.rows import load

    return [r.dump() for r in current_rows(load(d) for d in _rows(root, line)) if r.kind in OUTCOME_KINDS]


def _fault_sweep(tmp_path, fault, *, device="cpu", dtype="float32", tol="1e-5", seq_lens="[32, 48]"):
    line = "faults"
    root = _repo(tmp_path, line, FAULT_LINE.format(fault=fault, dtype=dtype, tol=tol, seq_lens=seq_lens,
                                                   weak='["scale_1pct", "drop_last_key"]' if dtype == "float16" else "[]",
                                                   warmup=50 if device == "cuda" else 2,
                                                   watchdog=TEST_WATCHDOG_S))
    env = _plugin_env(tmp_path)
    reg = _bench(root, env, "register", line)
    assert reg.returncode == 0, reg.stderr
    res = _bench(root, env, "sweep", line, "--device", device, "--no-ceilings")
    return root, env, line, res


def test_a_baseline_that_raises_in_the_gate_stops_the_sweep_as_the_baselines_fault(tmp_path):
    line = "faults"
    text = FAULT_LINE.format(fault="sdpa_math", dtype="float32", tol="1e-5", seq_lens="[32, 48]", weak="[]",
                             warmup=2, watchdog=TEST_WATCHDOG_S).replace('baseline = "torch_stack"',
                                                                         'baseline = "fault_raise"')
    root = _repo(tmp_path, line, text)
    env = _plugin_env(tmp_path)
    assert _bench(root, env, "register", line).returncode == 0
    res = _bench(root, env, "sweep", line, "--device", "cpu", "--no-ceilings")
    assert res.returncode == 3, res.stdout + res.stderr
    said = " ".join(res.stdout.split())
    assert ("stopped: baseline fault_raise fails the correctness gate at attention/b1/h2/kv2/n32/d16/float32/full "
            "[exception]: seed 0 family normal: kernel raised RuntimeError: fault_raise: deliberate failure") in said
    assert "with 1 config not run" in said and "No tolerance excuses this (the kernel raised)" in said
    assert "the tolerance is wrong" not in said
    outs = _outcomes(root, line)
    assert {r["config_key"] for r in outs} == {"attention/b1/h2/kv2/n32/d16/float32/full"}
    assert sorted(r["kind"] for r in outs) == ["incorrect", "skipped", "skipped", "skipped"]
    _verified(root, line)


def _assert_survived(root, env, line, fault, cause, n_configs):
    outs = _outcomes(root, line)
    by_pair = {}
    for r in outs:
        by_pair.setdefault((r["config_key"], r["candidate"]), []).append(r)
    configs = {r["config_key"] for r in outs}
    assert len(configs) == n_configs
    for cfg in configs:
        for honest in ("sdpa", "honest_stack"):
            kinds = [r["kind"] for r in by_pair[(cfg, honest)]]
            assert kinds == ["result"], (cfg, honest, [r.get("reason") for r in by_pair[(cfg, honest)]])
        (row,) = by_pair[(cfg, fault)]
        assert row["kind"] == "crashed" and cause in row["reason"], row["reason"]
    _verified(root, line)


def _verified(root: Path, line: str) -> None:
    from harness.ledger.verify import verify

    res = verify(root / "ledger" / f"{line}.jsonl")
    assert res.ok, res.reason


@pytest.mark.parametrize("fault", sorted(CPU_FAULTS))
def test_a_faulty_kernel_costs_only_its_own_pair(tmp_path, fault):
    root, env, line, res = _fault_sweep(tmp_path, fault, seq_lens="[32]")  # one config: CI time
    assert res.returncode == 0, res.stdout + res.stderr
    _assert_survived(root, env, line, fault, CPU_FAULTS[fault], n_configs=1)
    if fault == "fault_segv":  # the worker's last output: faulthandler's traceback names the kernel
        crashed = [r for r in _outcomes(root, line) if r["kind"] == "crashed"]
        assert all("fault_segv" in r["fault"]["output"] for r in crashed), crashed[0]["fault"]
        assert all(r["fault"]["phase"] == "gate" for r in crashed)
    if fault == "fault_timing_segv":  # timing names every arm: the candidates re-ran one per job
        (row,) = [r for r in _outcomes(root, line) if r["kind"] == "crashed"]
        assert row["fault"]["phase"] == "timing" and row["fault"]["kernels"] == ["torch_stack", fault]


def _before_start_sweep(tmp_path, how: str):
    line = "faults"
    text = FAULT_LINE.format(fault="x", dtype="float32", tol="1e-5", seq_lens="[32]", weak="[]", warmup=2,
                             watchdog=TEST_WATCHDOG_S)
    text = text.replace('candidates = ["sdpa", "x", "honest_stack"]', 'candidates = ["fault_before_start"]')
    root = _repo(tmp_path, line, text)
    env = {**_plugin_env(tmp_path), "BENCH_FAULT_START": how, "BENCH_FAULT_SPARE_PPID": str(os.getpid())}
    assert _bench(root, env, "register", line).returncode == 0
    res = _bench(root, env, "sweep", line, "--device", "cpu", "--no-ceilings")
    assert res.returncode == 0, res.stdout + res.stderr
    return root, line


@SERIAL
def test_a_job_lost_before_it_began_runs_again_and_is_blamed_only_if_lost_again(tmp_path):
    """A worker that dies before a config's first phase (as one that died idle looks) had not
    begun the job: the job runs again on a fresh worker instead of blaming its only candidate.
    Lost that way a second time, the candidate is blamed, with the cause."""
    root, line = _before_start_sweep(tmp_path / "once", str(tmp_path / "died-once"))
    assert (tmp_path / "died-once").exists()  # the first worker did die
    assert [(r["candidate"], r["kind"]) for r in _outcomes(root, line)] == [("fault_before_start", "result")]
    _verified(root, line)
    root, line = _before_start_sweep(tmp_path / "always", "always")
    (row,) = _outcomes(root, line)
    assert row["kind"] == "crashed" and "worker lost in start" in row["reason"] and "SIGKILL" in row["reason"]
    _verified(root, line)


def test_resume_skips_a_crashed_pair_unless_asked(tmp_path):
    root, env, line, res = _fault_sweep(tmp_path, "fault_sigkill", seq_lens="[32]")
    assert res.returncode == 0, res.stderr
    again = _bench(root, env, "sweep", line, "--device", "cpu", "--no-ceilings")
    assert again.returncode == 0 and "nothing run" in again.stdout, again.stdout
    retry = _bench(root, env, "sweep", line, "--device", "cpu", "--no-ceilings", "--retry-crashed")
    assert retry.returncode == 0, retry.stderr
    rows = _rows(root, line)
    (sup,) = [r for r in rows if r["kind"] == "supersedes"]
    outs = _outcomes(root, line)
    assert sorted((r["candidate"], r["kind"]) for r in outs) == [
        ("fault_sigkill", "crashed"), ("honest_stack", "result"), ("sdpa", "result")]
    # Only the crashed pair was re-run: its old row is superseded, the honest ones stand.
    (old,) = [r for r in rows if r["seq"] in sup["supersedes"] and r["kind"] == "crashed"]
    assert old["candidate"] == "fault_sigkill"
    _verified(root, line)


def test_two_cpu_workers_cover_the_grid_once(repo):
    from conftest import run_bench

    (repo / "registrations" / "tiny.toml").write_text(
        (repo / "registrations" / "tiny.toml").read_text().replace("seq_len = [32, 48]", "seq_len = [32, 40, 48, 56]"))
    git(repo, "commit", "-qam", "four configs")
    assert run_bench(repo, "register", "tiny").returncode == 0
    res = run_bench(repo, "sweep", "tiny", "--device", "cpu", "--workers", "2", "--no-ceilings")
    assert res.returncode == 0, res.stdout + res.stderr
    outs = _outcomes(repo, "tiny")
    assert sorted(r["config_key"] for r in outs) == sorted({r["config_key"] for r in outs})
    assert len(outs) == 4 and all(r["kind"] == "result" for r in outs), [(r["kind"], r.get("reason")) for r in outs]
    assert all(r["env"]["host"] and "gpu_index" in r["env"] and "gpu_uuid" in r["env"] for r in outs)
    _verified(repo, "tiny")


def test_gpus_on_a_cpu_sweep_and_inline_with_workers_are_refused(repo):
    from conftest import run_bench

    assert run_bench(repo, "register", "tiny").returncode == 0
    for args, words in [(("--gpus", "0,1"), "--gpus"), (("--inline", "--workers", "2"), "--inline")]:
        res = run_bench(repo, "sweep", "tiny", "--device", "cpu", *args)
        assert res.returncode == 2 and words in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert [r["kind"] for r in _rows(repo, "tiny")] == ["registered"]


HOLD = textwrap.dedent('''\
    import sys
    from harness.execution.devicelock import device_lock
    with device_lock("cpu", who={"line": "other"}, wait=False):
        print("held", flush=True)
        sys.stdin.readline()  # until the test lets go
    ''')


def _hold_cpu() -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=bench_env())
    assert p.stdout.readline().strip() == "held"
    return p


def _release(holder: subprocess.Popen) -> None:
    holder.stdin.write("go\n")
    holder.stdin.close()
    holder.wait(timeout=30)


@SERIAL
def test_a_second_sweep_on_a_busy_device_refuses_or_waits(repo):
    from conftest import run_bench

    assert run_bench(repo, "register", "tiny").returncode == 0
    holder = _hold_cpu()
    try:
        res = run_bench(repo, "sweep", "tiny", "--device", "cpu", "--no-wait", "--no-ceilings")
        assert res.returncode == 2 and "in use by another bench process" in res.stderr, res.stderr
        assert "line 'other'" in res.stderr and f"pid {holder.pid}" in res.stderr
        assert [r["kind"] for r in _rows(repo, "tiny")] == ["registered"]
        sweep = _popen(repo, bench_env(), "sweep", "tiny", "--device", "cpu", "--no-ceilings")
        seen = _until_waiting(sweep)
        assert "waiting for device cpu" in seen and "line 'other'" in seen, seen
        assert [r["kind"] for r in _rows(repo, "tiny")] == ["registered"]  # nothing ran while it waited
    finally:
        _release(holder)
    out, err = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, out + err
    assert [r["kind"] for r in _outcomes(repo, "tiny")] == ["result", "result"]


def _children(pid: int) -> list[int]:
    """The worker processes of driver ``pid``: its spawned children (``spawn_main``), not the
    multiprocessing resource tracker, which leaves on its own once the driver has gone."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in cmdline:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _hanging_sweep(tmp_path):
    """A sweep held inside its config by a host hang (watchdog far away), and its worker pids."""
    line = "faults"
    root = _repo(tmp_path, line, FAULT_LINE.format(fault="fault_hang", dtype="float32", tol="1e-5",
                                                   seq_lens="[32]", weak="[]", warmup=2, watchdog=600))
    env = _plugin_env(tmp_path)
    assert _bench(root, env, "register", line).returncode == 0
    driver = _popen(root, env, "sweep", line, "--device", "cpu", "--no-ceilings")
    deadline = time.monotonic() + 120
    workers = []
    while time.monotonic() < deadline and not workers:
        time.sleep(0.5)
        workers = _children(driver.pid)
    assert workers, "no worker started"
    time.sleep(8)  # the worker imports torch, then the config runs into the hang
    return root, line, driver, workers


@SERIAL
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_the_driver_leaves_no_worker_and_a_verified_ledger(tmp_path):
    root, line, driver, workers = _hanging_sweep(tmp_path)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers), "a worker outlived its driver"
    _verified(root, line)
    assert _outcomes(root, line) == []


RESUME = "bench: interrupted — every row reported written is on disk; to resume, run: bench sweep {args}"


@SERIAL
def test_ctrl_c_finishes_the_config_in_flight_then_resumes_without_duplicates(repo):
    from conftest import run_bench

    (repo / "registrations" / "tiny.toml").write_text(
        (repo / "registrations" / "tiny.toml").read_text().replace("seq_len = [32, 48]", "seq_len = [32, 40, 48, 56]"))
    git(repo, "commit", "-qam", "four configs")
    assert run_bench(repo, "register", "tiny").returncode == 0
    driver = _popen(repo, bench_env(), "sweep", "tiny", "--device", "cpu", "--no-ceilings")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not _outcomes(repo, "tiny"):
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 130, out + err
    said = out.replace("\n", " ")
    assert "finishing the config" in said and "sweep of line tiny at" in said, out + err
    assert "stopped by Ctrl-C after the config(s) in flight finished, with " in said, out
    assert "every row above is written: to resume, run: bench sweep tiny --device cpu --no-ceilings" in said, out
    assert err.strip().splitlines()[-1] == RESUME.format(args="tiny --device cpu --no-ceilings"), err
    first = _outcomes(repo, "tiny")
    assert 1 <= len(first) < 4 and len({r["config_key"] for r in first}) == len(first)
    assert reported_configs(out) <= {r["config_key"] for r in first}  # every config reported written is on disk
    assert git(repo, "status", "--porcelain", "--", "ledger") == ""  # and committed
    res = run_bench(repo, "sweep", "tiny", "--device", "cpu", "--no-ceilings")
    assert res.returncode == 0, res.stderr
    outs = _outcomes(repo, "tiny")
    assert len(outs) == 4 and len({r["config_key"] for r in outs}) == 4
    assert not [r for r in _rows(repo, "tiny") if r["kind"] == "supersedes"]
    _verified(repo, "tiny")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signals, code, how", [
    ((signal.SIGINT, signal.SIGINT), 130, "stopped at once by Ctrl-C, with 1 config not run"),
    ((signal.SIGTERM,), 143, "stopped at once by SIGTERM, with 1 config not run"),
    ((signal.SIGINT, signal.SIGTERM), 143, "stopped at once by SIGTERM, with 1 config not run"),
], ids=["second-ctrl-c", "sigterm", "ctrl-c-then-sigterm"])
@SERIAL
def test_stopping_at_once_writes_nothing_partial_and_ends_with_the_summary_and_the_resume_line(tmp_path, signals,
                                                                                             code, how):
    root, line, driver, workers = _hanging_sweep(tmp_path)
    for sig in signals:
        driver.send_signal(sig)
        time.sleep(1)
    out, err = driver.communicate(timeout=30)
    assert driver.returncode == code, out + err
    assert _outcomes(root, line) == [] and not any(_alive(w) for w in workers)
    said = out.replace("\n", " ")
    assert "sweep of line faults at" in said and how in said, out
    assert "a config in flight, if any, was dropped: nothing of it is written" in said, out
    assert err.strip().splitlines()[-1] == RESUME.format(args="faults --device cpu --no-ceilings"), err
    assert "Traceback" not in err
    _verified(root, line)


@SERIAL
def test_a_ctrl_c_while_waiting_for_the_device_ends_with_the_summary_and_the_resume_line(repo):
    from conftest import run_bench

    assert run_bench(repo, "register", "tiny").returncode == 0
    holder = _hold_cpu()
    try:
        sweep = _popen(repo, bench_env(), "sweep", "tiny", "--device", "cpu", "--no-ceilings")
        _until_waiting(sweep)
        sweep.send_signal(signal.SIGINT)  # "Ctrl-C to give up": nothing runs yet, so it stops at once
        out, err = sweep.communicate(timeout=60)
    finally:
        _release(holder)
    assert sweep.returncode == 130, out + err
    said = out.replace("\n", " ")
    assert "sweep of line tiny at" in said and "stopped at once by Ctrl-C, before any config ran" in said, out
    assert err.strip().splitlines()[-1] == RESUME.format(args="tiny --device cpu --no-ceilings"), err
    assert [r["kind"] for r in _rows(repo, "tiny")] == ["registered"]


@SERIAL
def test_a_signal_waits_for_the_config_being_written_then_stops_at_once():
    """A second Ctrl-C or a SIGTERM inside ``shielded`` (a config's rows being appended and
    committed) waits for it to end; outside, it stops at once; after ``wrap_up`` it is only
    counted. The caller's handlers come back afterwards."""
    from harness.commands.interrupts import StopNow, interrupts

    def raising(signum, frame):
        raise AssertionError("the caller's handler ran while the guard held the signal")

    previous = signal.signal(signal.SIGTERM, raising)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background runner may ignore it
    written = []
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with pytest.raises(StopNow):
                with interrupts(None) as guard:
                    guard.patient = True
                    if sig == signal.SIGINT:
                        os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: stop starting configs
                        time.sleep(0.1)
                        assert guard.stopping() and not guard.stopped_at_once
                    with guard.shielded():
                        os.kill(os.getpid(), sig)
                        time.sleep(0.1)  # the handler has run by now
                        written.append("the config's last row")
                    written.append("the next config")
            assert written == ["the config's last row"] and guard.signal == sig and guard.stopped_at_once
            written.clear()
        with interrupts(None) as guard:
            guard.wrap_up()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            written.append("the summary")
        assert written == ["the summary"] and guard.signal == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is raising  # restored
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


SLOW_GIT = textwrap.dedent('''\
    #!/bin/sh
    # git, except that a commit first marks that it started and waits: a Ctrl-C can land then.
    case " $* " in *" commit "*) touch "$SLOW_GIT_MARK"; sleep 3;; esac
    exec {git} "$@"
    ''')

COMMIT = textwrap.dedent('''\
    import signal, sys
    signal.signal(signal.SIGINT, lambda *a: None)  # the sweep's first Ctrl-C: finish, commit
    from harness.provenance.git import commit_file
    print(commit_file(sys.argv[1], "ledger/x.jsonl", "bench: ledger/x.jsonl row 0"))
    ''')


@SERIAL
def test_a_ctrl_c_at_the_terminal_does_not_kill_the_commit_of_a_configs_rows(tmp_path):
    """The terminal sends Ctrl-C to its whole foreground group: git, started to commit a
    config's rows after the sweep's first Ctrl-C, must not die of it half-way."""
    import shutil

    from conftest import init_repo

    root = init_repo(tmp_path / "proj", {"x": "schema = 1\n"})
    (root / "ledger" / "x.jsonl").write_text("{}\n")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "git").write_text(SLOW_GIT.format(git=shutil.which("git")))
    (shim / "git").chmod(0o755)
    mark = tmp_path / "committing"
    env = {**bench_env(), "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "SLOW_GIT_MARK": str(mark)}
    # A process group of its own, as a terminal's foreground job has.
    p = subprocess.Popen([sys.executable, "-c", COMMIT, str(root)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not mark.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), p.communicate()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert git(root, "log", "-1", "--format=%s") == "bench: ledger/x.jsonl row 0"
    assert git(root, "status", "--porcelain", "--", "ledger/x.jsonl") == ""


def test_watchdog_s_is_validated():
    from harness.errors import UserError
    from harness.measurement.timing import DEFAULT_WATCHDOG_S, TimingPolicy

    assert TimingPolicy().watchdog_s == DEFAULT_WATCHDOG_S >= 60
    with pytest.raises(UserError, match="watchdog_s"):
        TimingPolicy.from_mapping({"watchdog_s": 0})


# -- on the GPU --------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("fault", sorted(GPU_FAULTS))
def test_a_faulty_kernel_costs_only_its_own_pair_on_the_gpu(tmp_path, fault):
    root, env, line, res = _fault_sweep(tmp_path, fault, device="cuda", dtype="float16", tol="2e-2")
    assert res.returncode == 0, res.stdout + res.stderr
    _assert_survived(root, env, line, fault, GPU_FAULTS[fault], n_configs=2)
    rows = _outcomes(root, line)
    assert all(r["env"]["gpu"] and r["env"]["gpu_uuid"] and r["env"]["gpu_index"] is not None for r in rows)


def test_executor_ray_without_ray_says_how_to_install_it(repo):
    """Ray is an optional extra: where it cannot be imported (``sys.modules['ray'] = None`` is
    how Python marks a module absent), `--executor ray` is one line, exit 2, nothing written."""
    from conftest import run_bench

    assert run_bench(repo, "register", "tiny").returncode == 0
    code = "import sys; sys.modules['ray'] = None; from harness.cli import run; run()"
    res = subprocess.run([sys.executable, "-c", code, "sweep", "tiny", "--device", "cpu", "--executor", "ray"],
                         cwd=repo, capture_output=True, text=True, timeout=300, env=bench_env())
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stdout + res.stderr
    assert 'pip install -e ".[ray]"' in res.stderr, res.stderr
    assert [r["kind"] for r in _rows(repo, "tiny")] == ["registered"]
    bad = run_bench(repo, "sweep", "tiny", "--device", "cpu", "--address", "127.0.0.1:6379")
    assert bad.returncode == 2 and "--executor ray" in bad.stderr, bad.stderr


def test_cpu_workers_get_disjoint_shares_of_the_cores():
    import os

    from harness.execution.workers import core_shares

    cores = sorted(os.sched_getaffinity(0))
    shares = core_shares(len(cores))
    assert sorted(c for s in shares for c in s) == cores and all(len(s) == 1 for s in shares)
    assert core_shares(1) == [tuple(cores)]
    over = core_shares(len(cores) + 1)  # more workers than cores: shares overlap, none empty
    assert len(over) == len(cores) + 1 and all(len(s) == 1 for s in over)


TINY_GATE = FAULT_LINE.format(fault="sdpa", dtype="float32", tol="1e-5", seq_lens="[32]", weak="[]", warmup=2,
                              watchdog=TEST_WATCHDOG_S).replace('["sdpa", "sdpa", "honest_stack"]', '["sdpa"]')


def test_the_profile_gate_runs_in_a_worker_under_the_watchdog(tmp_path, monkeypatch):
    """`bench profile` gates each kernel in a worker process, as a sweep does: a gate that
    outlasts the watchdog is killed there and is the kernel's failure, not the command's."""
    import dataclasses

    from harness.governance.line import open_line
    from harness.commands.profile import gate_worker

    root = _repo(tmp_path, "gated", TINY_GATE)
    assert _bench(root, bench_env(), "register", "gated").returncode == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "registered")
    monkeypatch.chdir(root)
    with open_line("gated", root=root, action="a profile") as line:
        cfg = line.reg.configs[0]
        with gate_worker(line, "cpu") as gate:
            ok = gate(cfg, "sdpa")
            assert ok["passed"] and ok["gate"]["passed"] and ok["tag"] is None, ok
        hasty = dataclasses.replace(line, reg=dataclasses.replace(
            line.reg, timing=dataclasses.replace(line.reg.timing, watchdog_s=0.001)))
        with gate_worker(hasty, "cpu") as gate:
            lost = gate(cfg, "sdpa")
    assert not lost["passed"] and lost["tag"] == "lost_worker" and "watchdog after 0.001 s" in lost["reason"], lost
