"""`bench sweep --executor ray` on a local Ray cluster on the CPU: the rows a Ray sweep
writes are the local executor's (fault rows included), a Ray worker killed mid-config is a
fault row and the sweep goes on, a worker running other code refuses.

One Ray instance serves the module (started here with two CPUs); each sweep is a real
`bench` subprocess that connects to it with --address. Skipped where Ray is not installed
(`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, build_wheel, copy_project
from test_workers import FAULT_LINE, TEST_WATCHDOG_S, _bench, _outcomes, _plugin_env, _popen, _repo, _verified

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

RAY_CPUS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(address, the environment its workers run with, the file fault_hang writes its pid to)."""
    base = tmp_path_factory.mktemp("ray")
    env = _plugin_env(base)
    mark = base / "hang.pid"
    env["BENCH_FAULT_PID_FILE"] = str(mark)
    # fault_before_start kills the first actor that sets up a config of it (the test's own
    # `bench` commands are spared)
    env["BENCH_FAULT_START"] = str(base / "died-once")
    env["BENCH_FAULT_SPARE_PPID"] = str(os.getpid())
    saved = dict(os.environ)
    os.environ.update(env)  # the Ray workers inherit this process's environment
    try:
        ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False)
        if "RAY_AUTH_MODE" in os.environ:  # ray.init enabled token auth (a token exists): drivers need it too
            env["RAY_AUTH_MODE"] = os.environ["RAY_AUTH_MODE"]
        yield ray.get_runtime_context().gcs_address, env, mark
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def _line(tmp_path, name, candidates, *, watchdog, seq_lens="[32]"):
    text = FAULT_LINE.format(fault="x", dtype="float32", tol="1e-5", seq_lens=seq_lens, weak="[]", warmup=2,
                             watchdog=watchdog)
    text = text.replace('candidates = ["sdpa", "x", "honest_stack"]', f"candidates = {candidates!r}".replace("'", '"'))
    return _repo(tmp_path / name, "faults", text)


def _kinds(root) -> set:
    return {(r["config_key"], r["candidate"], r["kind"]) for r in _outcomes(root, "faults")}


def test_a_ray_sweep_writes_the_local_sweeps_rows_fault_rows_included(tmp_path, cluster):
    address, env, _ = cluster
    # An exception (the actor reports it and is replaced) and a SIGKILL (the actor dies)
    # between two honest candidates; one config (CI time).
    cands = ["sdpa", "fault_raise", "fault_sigkill", "honest_stack"]
    local = _line(tmp_path, "local", cands, watchdog=TEST_WATCHDOG_S)
    on_ray = _line(tmp_path, "ray", cands, watchdog=TEST_WATCHDOG_S)
    for root in (local, on_ray):
        assert _bench(root, env, "register", "faults").returncode == 0
    t0 = time.monotonic()
    res = _bench(on_ray, env, "sweep", "faults", "--device", "cpu", "--no-ceilings", "--executor", "ray",
                 "--address", address, "--workers", str(RAY_CPUS))
    ray_s = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 Ray actors" in res.stdout.replace("\n", " "), res.stdout
    loc = _bench(local, env, "sweep", "faults", "--device", "cpu", "--no-ceilings")
    assert loc.returncode == 0, loc.stdout + loc.stderr
    print(f"ray sweep {ray_s:.1f} s, local sweep {time.monotonic() - t0 - ray_s:.1f} s")
    assert _kinds(on_ray) == _kinds(local)
    assert len(_kinds(on_ray)) == 4
    causes = {r["candidate"]: r["reason"] for r in _outcomes(on_ray, "faults") if r["kind"] == "crashed"}
    assert sorted(causes) == ["fault_raise", "fault_sigkill"]
    assert "deliberate failure" in causes["fault_raise"]
    assert "the Ray actor died" in causes["fault_sigkill"]
    assert all(r["env"]["host"] for r in _outcomes(on_ray, "faults"))
    for root in (local, on_ray):
        _verified(root, "faults")
        check = _bench(root, env, "ledger", "verify", "faults")
        assert check.returncode == 0, check.stdout + check.stderr


def test_a_killed_or_hung_ray_worker_is_a_fault_row_and_the_sweep_goes_on(tmp_path, cluster):
    """Two configs on one actor: in the first the test kills the actor inside fault_hang's
    gate; in the second the watchdog does."""
    address, env, mark = cluster
    mark.unlink(missing_ok=True)
    root = _line(tmp_path, "killed", ["sdpa", "fault_hang", "honest_stack"], watchdog=TEST_WATCHDOG_S,
                 seq_lens="[32, 48]")
    assert _bench(root, env, "register", "faults").returncode == 0
    driver = _popen(root, env, "sweep", "faults", "--device", "cpu", "--no-ceilings", "--executor", "ray",
                    "--address", address)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (mark.exists() and mark.read_text()):
        assert driver.poll() is None, driver.communicate()
        time.sleep(0.1)
    os.kill(int(mark.read_text()), signal.SIGKILL)  # the actor, hung inside fault_hang's gate
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, out + err
    outs = _outcomes(root, "faults")
    assert sorted((r["candidate"], r["kind"]) for r in outs) == [
        ("fault_hang", "crashed"), ("fault_hang", "crashed"), ("honest_stack", "result"), ("honest_stack", "result"),
        ("sdpa", "result"), ("sdpa", "result")]
    hung = sorted((r["reason"] for r in outs if r["candidate"] == "fault_hang"), key=lambda why: "watchdog" in why)
    assert "the Ray actor died" in hung[0], hung
    assert f"watchdog after {TEST_WATCHDOG_S} s in gate of fault_hang" in hung[1], hung
    assert all(r["fault"]["phase"] == "gate" for r in outs if r["kind"] == "crashed")
    _verified(root, "faults")


def test_an_actor_lost_before_a_config_began_costs_no_pair(tmp_path, cluster):
    """An actor that dies before the config's first phase (as one that died idle is found out,
    when it is sent work) had not begun it: the config runs again on a fresh actor."""
    address, env, _ = cluster
    root = _line(tmp_path, "idle", ["fault_before_start"], watchdog=TEST_WATCHDOG_S)
    assert _bench(root, env, "register", "faults").returncode == 0
    res = _bench(root, env, "sweep", "faults", "--device", "cpu", "--no-ceilings", "--executor", "ray",
                 "--address", address)
    assert res.returncode == 0, res.stdout + res.stderr
    assert os.path.exists(env["BENCH_FAULT_START"])  # an actor did die
    assert [(r["candidate"], r["kind"]) for r in _outcomes(root, "faults")] == [("fault_before_start", "result")]
    _verified(root, "faults")


def test_a_ray_worker_running_other_code_refuses_naming_the_file(tmp_path, cluster):
    address, env, _ = cluster
    root = _line(tmp_path, "other", ["sdpa"], watchdog=TEST_WATCHDOG_S)
    assert _bench(root, env, "register", "faults").returncode == 0
    # The driver runs an installed bench with one harness file changed (code must come from the
    # repository or an installed distribution); the cluster's workers run the checkout itself.
    src = copy_project(tmp_path / "driver-src")
    run_py = src / "harness" / "pipeline" / "run.py"
    run_py.write_text(run_py.read_text() + "\n# changed on the driver's side only\n")
    site = tmp_path / "driver-site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                        str(site), str(build_wheel(src, tmp_path / "dist"))], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    path = [str(site) if p == str(REPO) else p for p in env["PYTHONPATH"].split(os.pathsep)]
    driver_env = {**env, "PYTHONPATH": os.pathsep.join(path)}
    res = _bench(root, driver_env, "sweep", "faults", "--device", "cpu", "--no-ceilings", "--executor", "ray",
                 "--address", address)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "harness/pipeline/run.py" in res.stderr and "driver's commit" in res.stderr, res.stderr
    assert [r["kind"] for r in _outcomes(root, "faults")] == []


@pytest.mark.gpu
def test_a_ray_sweep_on_the_gpu_writes_the_local_sweeps_rows(tmp_path, cluster):
    """One actor per GPU (num_gpus=1): the same rows as local workers, a poisoned CUDA context
    and a killed actor included, each row naming its GPU."""
    address, env, _ = cluster
    if not ray.cluster_resources().get("GPU"):
        pytest.fail("the Ray cluster sees no GPU on a machine where torch does")
    cands = ["sdpa", "fault_oob_write", "fault_sigkill", "honest_stack"]
    roots = {}
    for name in ("local", "ray"):
        text = FAULT_LINE.format(fault="x", dtype="float16", tol="2e-2", seq_lens="[32, 48]",
                                 weak='["scale_1pct", "drop_last_key"]', warmup=50, watchdog=TEST_WATCHDOG_S)
        text = text.replace('candidates = ["sdpa", "x", "honest_stack"]', f"candidates = {cands!r}".replace("'", '"'))
        roots[name] = _repo(tmp_path / name, "faults", text)
        assert _bench(roots[name], env, "register", "faults").returncode == 0
    res = _bench(roots["ray"], env, "sweep", "faults", "--device", "cuda", "--no-ceilings", "--executor", "ray",
                 "--address", address)
    assert res.returncode == 0, res.stdout + res.stderr
    loc = _bench(roots["local"], env, "sweep", "faults", "--device", "cuda", "--no-ceilings")
    assert loc.returncode == 0, loc.stdout + loc.stderr
    assert _kinds(roots["ray"]) == _kinds(roots["local"]) and len(_kinds(roots["ray"])) == 8
    rows = _outcomes(roots["ray"], "faults")
    assert all(r["env"]["gpu"] and r["env"]["gpu_uuid"] and r["env"]["host"] for r in rows)
    oob = [r for r in rows if r["candidate"] == "fault_oob_write"]
    assert all(r["kind"] == "crashed" and "illegal memory access" in r["reason"] for r in oob), oob
    for root in roots.values():
        _verified(root, "faults")
