"""The CLI's edges, through real `bench` subprocesses in real git repositories: signals,
what a sweep prints where no terminal watches, and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from harness.governance import gitguard
from harness.governance.ledger import verify
from tests.conftest import bench_env, git, run_bench

SIX_CONFIGS = ("seq_len = [32, 40, 48, 56, 64, 72]", "min_time_ms = 300", "warmup_ms = 100")


def complete_rows(repo, line="tiny") -> list[dict]:
    """Rows whose line is complete (a sweep may be appending the next one)."""
    text = (repo / "ledger" / f"{line}.jsonl").read_text()
    return [json.loads(x) for x in text.split("\n")[:-1] if x]


def results(repo, line="tiny") -> list[str]:
    return [r["config_key"] for r in complete_rows(repo, line) if r["kind"] == "result"]


def _default_sigint():
    # A test runner started in the background may ignore SIGINT; bench then would too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sweep_until(repo, n_results: int, sig: int) -> subprocess.CompletedProcess:
    """Start `bench sweep tiny`, send ``sig`` once ``n_results`` result rows are on disk."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", "tiny"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=bench_env(), preexec_fn=_default_sigint)
    deadline = time.time() + 300
    while time.time() < deadline and len(results(repo)) < n_results and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
def test_sigint_and_sigterm_print_the_resume_line_keep_every_row_and_resume(repo):
    p = repo / "registrations" / "tiny.toml"
    text = p.read_text().replace("seq_len = [32, 48]", SIX_CONFIGS[0])
    text = text.replace("min_time_ms = 5", SIX_CONFIGS[1]).replace("warmup_ms = 5", SIX_CONFIGS[2])
    p.write_text(text)
    git(repo, "commit", "-qam", "six configs")
    assert run_bench(repo, "register", "tiny").returncode == 0

    for sig, code, n in ((signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 2)):
        r = sweep_until(repo, n, sig)
        assert r.returncode == code, (sig, r.returncode, r.stderr)
        assert r.stderr.strip().splitlines()[-1] == ("bench: interrupted — every row reported written is on disk; "
                                                     "run the same command to resume"), r.stderr
        assert "Traceback" not in r.stderr
        assert n <= len(results(repo)) < 6, "the signal must arrive while configs remain"
        assert verify(repo / "ledger" / "tiny.jsonl").ok
        v = run_bench(repo, "ledger", "verify", "tiny")
        assert v.returncode == 0 and "chain intact" in v.stdout
        # The line lock was released: another command may take the line at once.
        again = run_bench(repo, "ledger", "show", "tiny", "--json")
        assert again.returncode == 0

    done_before = len(results(repo))
    last = run_bench(repo, "sweep", "tiny")
    assert last.returncode == 0, last.stderr
    assert f"{done_before} already done" in last.stdout
    got = results(repo)
    assert len(got) == 6 and len(set(got)) == 6  # resumed: nothing measured twice
    assert verify(repo / "ledger" / "tiny.jsonl").ok


@pytest.mark.slow
def test_a_sweep_without_a_terminal_prints_a_line_per_config_then_a_table_and_the_commit_hint(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    git(repo, "add", "ledger")
    git(repo, "commit", "-qm", "register tiny")
    s = run_bench(repo, "sweep", "tiny")  # stdout is a pipe: no terminal
    assert s.returncode == 0, s.stderr
    lines = s.stdout.splitlines()
    assert "sweep of line tiny: 2 configs to run" in lines
    for i, n in ((1, 32), (2, 48)):
        line = next(x for x in lines if x.startswith(f"[{i}/2] "))
        assert f"attention/b1/h2/kv2/n{n}/d16/float32/full (" in line and " s) — sdpa result: speedup " in line
        assert "control" in line
    assert "ETA" not in s.stdout
    assert "outcomes at this commit on this device" in s.stdout
    table = s.stdout[s.stdout.index("outcomes at this commit"):]
    assert table.count("attention/b1/h2/kv2/n") == 2 and "×" in table
    assert "ledger/tiny.jsonl has rows no commit holds yet" in " ".join(lines[-4:])

    again = run_bench(repo, "sweep", "tiny")  # the same commit: nothing left to run
    assert again.returncode == 0, again.stderr
    assert "0/0" not in again.stdout and "ETA" not in again.stdout and "to run" not in again.stdout
    assert "2 already done" in again.stdout and "outcomes at this commit" in again.stdout

    # The hint shows only while git says the ledger has rows no commit holds.
    ledger = repo / "ledger" / "tiny.jsonl"
    assert gitguard.has_uncommitted(repo, ledger)
    git(repo, "add", "ledger")
    git(repo, "commit", "-qm", "tiny measured")
    assert not gitguard.has_uncommitted(repo, ledger)


def test_the_commit_hint_is_printed_only_for_an_uncommitted_ledger(capsys):
    from harness.reporting.render import render_sweep_summary

    summary = {"line": "x", "commit": "0" * 40, "counts": {}, "rejections": {}, "resumed": 0, "control": None,
               "notes": []}
    render_sweep_summary(summary, [], None)
    assert "commit" not in capsys.readouterr().out.replace("sweep of line x at", "")
    render_sweep_summary(summary, [], "ledger/x.jsonl")
    assert "git add ledger/x.jsonl" in " ".join(capsys.readouterr().out.split())


def test_the_terminal_bar_is_not_drawn_when_nothing_is_to_run(capsys):
    from harness.reporting.progress import SweepProgress

    nothing = SweepProgress("x", live=True)
    nothing.start(0)
    nothing.stop()
    assert "0/0" not in capsys.readouterr().out
    one = SweepProgress("x", live=True)
    one.start(1)
    one.advance_to("cfg")
    one.done("cfg", [])
    one.stop()
    assert "1/1" in capsys.readouterr().out
