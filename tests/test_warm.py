"""`bench warm`: what it compiles ahead, where nothing can be, and its worker pool."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.measurement.device import detect_device
from harness.commands.warm import WarmPlan, WarmTask, warm
from harness.workloads import Config
from tests.conftest import bench_env, git, run_bench

# A decode line whose candidate is a Triton kernel: two configs, head_dim 64.
DECODE = textwrap.dedent('''\
    schema = 1
    hypothesis = "the Triton split-KV decode beats the stack"
    workload = "decode"
    candidate = "triton_decode"
    baseline = "torch_stack"

    [grid]
    batch = [1]
    heads = [4]
    kv_heads = [2]
    seq_len = [256, 512]
    head_dim = [64]
    dtype = ["float16"]
    causal = [false]

    [correctness]
    atol = 2e-2
    rtol = 2e-2
    seeds = [0]

    [bar]
    go = "geomean(speedup) >= 1.0"
    prediction = 1.5
    ''')


def _bench(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**bench_env(), **(env or {})})


@pytest.fixture
def decode_repo(repo: Path) -> Path:
    (repo / "registrations" / "dec.toml").write_text(DECODE)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "decode line")
    return repo


def test_a_line_of_non_compiling_kernels_warms_nothing_and_says_why(repo):
    r = run_bench(repo, "warm", "tiny")
    assert r.returncode == 0, r.stderr
    assert "sdpa: compiles nothing ahead (no triton code)" in r.stdout
    assert "torch_stack: compiles nothing ahead (no triton code)" in r.stdout
    assert f"nothing to warm: no kernel of line tiny compiles ahead on {detect_device()} here" in r.stdout
    assert sorted(p.name for p in (repo / "ledger").iterdir()) == [".gitkeep"]  # nothing written


@pytest.mark.skipif(detect_device() == "cuda", reason="on a GPU the kernel compiles (the gpu test below)")
def test_a_triton_kernel_on_the_cpu_is_not_usable_without_the_interpreter(decode_repo):
    env = {k: v for k, v in bench_env().items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-m", "harness", "warm", "dec"], cwd=decode_repo, capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert "triton_decode: not usable here: runs on cuda, not cpu" in r.stdout
    assert "nothing to warm: no kernel of line dec compiles ahead on cpu here" in r.stdout


def test_the_interpreter_compiles_nothing_so_nothing_is_warmed(decode_repo):
    r = _bench(decode_repo, "warm", "dec", env={"TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stderr
    assert "triton_decode: runs in Triton's interpreter here, which compiles nothing" in r.stdout
    assert "nothing to warm" in r.stdout


def test_bad_input_is_one_line_and_exit_2(repo):
    for args, msg in ((("warm", "nosuch"), "no registration file"),
                      (("warm", "tiny", "--workers", "0"), "--workers 0: give at least 1 worker process")):
        r = run_bench(repo, *args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_workers_call_each_task_once_and_report_a_failing_call(monkeypatch):
    # The pool path on the CPU: Triton's interpreter runs the kernel (compiling nothing) in
    # spawned workers, which inherit TRITON_INTERPRET. A head_dim the kernel refuses fails in
    # its worker and is reported with its reason, not raised.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("PYTHONPATH", bench_env()["PYTHONPATH"])
    good = Config("decode", 1, 4, 2, 128, 64, "float16", False)
    bad = Config("decode", 1, 4, 2, 128, 96, "float16", False)
    plan = WarmPlan("t", "cpu", (WarmTask("triton_decode", good), WarmTask("triton_decode", bad)), ())
    seen = []
    summary = warm(plan, workers=2, on_done=seen.append)
    assert sorted(w.config_key for w in summary.warmed) == sorted((good.key(), bad.key()))
    assert list(summary.warmed) == seen  # reported as each finished
    by_key = {w.config_key: w for w in summary.warmed}
    assert by_key[good.key()].error is None
    assert summary.failed == (by_key[bad.key()],)
    assert "UserError" in by_key[bad.key()].error and "head_dim" in by_key[bad.key()].error


@pytest.mark.gpu
def test_warm_fills_the_triton_cache_on_the_gpu(decode_repo, tmp_path):
    cache = tmp_path / "triton-cache"
    r = _bench(decode_repo, "warm", "dec", "--workers", "2", env={"TRITON_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stdout + r.stderr
    # 2 grid configs + 3 boundary seq_lens (1, 67, 131), one task each; torch_stack compiles nothing.
    assert "warmed 5 (kernel, config) pairs of line dec on cuda" in r.stdout, r.stdout
    assert "FAILED" not in r.stdout and "torch_stack: compiles nothing ahead" in r.stdout
    assert any(p.is_file() for p in cache.rglob("*")), "the warm-up compiled nothing into TRITON_CACHE_DIR"
