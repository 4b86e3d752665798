"""The CLI's edges, through real `bench` subprocesses in real git repositories: signals,
what a sweep prints where no terminal watches, and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from harness.provenance import git as gitguard
from harness.ledger.verify import verify
from harness.vocab.outcomes import OUTCOME_KINDS
from tests.conftest import TINY, bench_env, git, reported_configs, run_bench

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
    """Start `bench sweep tiny`, send ``sig`` once ``n_results`` result rows are on disk and
    this run has written one of them (a signal before bench installs its handlers would
    test nothing of bench)."""
    n_results = max(n_results, len(results(repo)) + 1)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", "tiny"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=bench_env(), preexec_fn=_default_sigint)
    deadline = time.time() + 300
    while time.time() < deadline and len(results(repo)) < n_results and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.serial  # signals and a kill timed against a running sweep
def test_sigint_and_sigterm_print_the_summary_and_the_resume_line_keep_every_row_and_resume(repo):
    p = repo / "registrations" / "tiny.toml"
    text = p.read_text().replace("seq_len = [32, 48]", SIX_CONFIGS[0])
    text = text.replace("min_time_ms = 5", SIX_CONFIGS[1]).replace("warmup_ms = 5", SIX_CONFIGS[2])
    p.write_text(text)
    git(repo, "commit", "-qam", "six configs")
    assert run_bench(repo, "register", "tiny").returncode == 0

    for sig, code, n, how in ((signal.SIGINT, 130, 1, "stopped by Ctrl-C after the config(s) in flight finished"),
                              (signal.SIGTERM, 143, 2, "stopped at once by SIGTERM")):
        r = sweep_until(repo, n, sig)
        assert r.returncode == code, (sig, r.returncode, r.stderr)
        assert r.stderr.strip().splitlines()[-1] == ("bench: interrupted — every row reported written is on disk; "
                                                     "to resume, run: bench sweep tiny"), r.stderr
        said = r.stdout.replace("\n", " ")
        assert "sweep of line tiny at" in said and how in said and "to resume, run: bench sweep tiny" in said, r.stdout
        assert "Traceback" not in r.stderr
        assert n <= len(results(repo)) < 6, "the signal must arrive while configs remain"
        on_disk = {x["config_key"] for x in complete_rows(repo) if x["kind"] in OUTCOME_KINDS}
        assert reported_configs(r.stdout) <= on_disk, "a config reported written is not on disk"
        assert git(repo, "status", "--porcelain", "--", "ledger") == ""  # and committed
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
    s = run_bench(repo, "sweep", "tiny", "--no-commit")  # stdout is a pipe: no terminal
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
    # the two configs by what tells them apart (every config's shared fields in the title)
    assert "every config: attention/b1/h2/kv2/d16/float32/full" in table and "×" in table
    assert sum(line.startswith(("n32 ", "n48 ")) for line in table.splitlines()) == 2
    assert "ledger/tiny.jsonl has rows no commit holds yet" in " ".join(lines[-4:])

    # The hint shows only while git says the ledger has rows no commit holds (--no-commit).
    ledger = repo / "ledger" / "tiny.jsonl"
    assert gitguard.has_uncommitted(repo, ledger)
    # Issue 47: the ceilings row that run measured is no later run's to commit (nor to use): refused
    # until the user commits it, vouching for it, as the summary says.
    refused = run_bench(repo, "sweep", "registrations/tiny.toml")
    assert refused.returncode == 2 and "ledger/_device_ceilings.jsonl row 0 not committed" in refused.stderr
    git(repo, "add", "ledger/_device_ceilings.jsonl")
    git(repo, "commit", "-qm", "the ceilings my --no-commit sweep measured", "--", "ledger/_device_ceilings.jsonl")
    again = run_bench(repo, "sweep", "registrations/tiny.toml")  # the same commit: nothing left to run
    assert again.returncode == 0, again.stderr
    assert "0/0" not in again.stdout and "ETA" not in again.stdout and "to run" not in again.stdout
    assert "2 already done" in again.stdout and "outcomes at this commit" in again.stdout
    # Without --no-commit the sweep commits what an earlier run left uncommitted, and says so.
    assert not gitguard.has_uncommitted(repo, ledger)
    assert "has rows no commit holds yet" not in again.stdout and "rows committed to git" in again.stdout


def test_the_commit_hint_is_printed_only_for_an_uncommitted_ledger(capsys):
    from harness.reporting.render.sweep import render_sweep_summary

    summary = {"line": "x", "commit": "0" * 40, "counts": {}, "rejections": {}, "resumed": 0, "control": None,
               "notes": []}
    render_sweep_summary(summary, [], None)
    assert "commit" not in capsys.readouterr().out.replace("sweep of line x at", "")
    render_sweep_summary(summary, [], "ledger/x.jsonl")
    assert "git add ledger/x.jsonl" in " ".join(capsys.readouterr().out.split())


def test_the_terminal_bar_is_not_drawn_when_nothing_is_to_run(capsys):
    from harness.reporting.render.progress import SweepProgress

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


def test_version_help_and_a_bare_bench(repo):
    v = run_bench(repo, "--version")
    assert v.returncode == 0 and v.stdout.strip().startswith("bench ")
    h = run_bench(repo, "-h")
    assert h.returncode == 0 and "Usage: bench" in h.stdout and "--version" in h.stdout
    for args in ((), ("ledger",)):
        bare = run_bench(repo, *args)
        assert bare.returncode == 0 and "Usage: bench" in bare.stdout and bare.stderr == "", (args, bare.stderr)
    sub = run_bench(repo, "sweep", "-h")
    assert sub.returncode == 0 and "Usage: bench sweep" in sub.stdout


def test_help_lists_commands_in_workflow_order_and_each_shows_an_example():
    """`bench --help` reads in the order a line is worked (register → sweep → verdict → reading
    the results → the tools), and every command's own help ends with a command to copy."""
    import typer.main

    from harness.cli import app

    group = typer.main.get_command(app)
    every = list(group.list_commands(None))
    # Plumbing (`bench probe`, which `bench bisect` runs in each probed commit) is hidden from the help.
    assert [n for n in every if group.get_command(None, n).hidden] == ["probe"]
    names = [n for n in every if not group.get_command(None, n).hidden]
    workflow = ["new", "register", "sweep", "verdict", "replicate", "report", "site", "compare", "route", "bisect",
                "status", "profile", "kernels", "ceilings", "warm"]
    assert [n for n in names if n in workflow] == workflow and set(names) == {*workflow, "ledger"}
    subs = [(n, group.get_command(None, n)) for n in names]
    subs += [(f"ledger {n}", c) for n, c in subs[-1][1].commands.items()] if names[-1] == "ledger" else []
    for name, cmd in subs:
        if name == "ledger":
            continue
        assert f"Example: bench {name}" in (cmd.help or ""), name


def _variants(repo):
    """Bad registrations next to tiny, committed (a sweep needs a clean tree)."""
    from tests.conftest import TINY

    reg = repo / "registrations"
    go = 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"'
    files = {
        "empty.toml": "",
        "syntax.toml": "schema = 1\nfoo = [",
        "unknownkey.toml": TINY.replace('workload = "attention"', 'bogus = 1\nworkload = "attention"'),
        "badtype.toml": TINY.replace("batch = [1]", 'batch = ["x"]'),
        "nomatch.toml": TINY.replace(go, 'go = "min(speedup where seq_len >= 4096) >= 1"'),
        "huge.toml": TINY.replace("seq_len = [32, 48]", "seq_len = [32, 1048576]").replace("heads = [2]",
                                                                                       "heads = [64]"),
        "orphan.toml": TINY.replace('baseline = "torch_stack"', 'baseline = "torch_stack"\namends = "nosuch"'),
        "tiny.txt": TINY,
    }
    for name, text in files.items():
        (reg / name).write_text(text)
    (reg / "latin.toml").write_bytes(TINY.encode().replace(b"SDPA", b"SDP\xe9"))
    (repo / "some" / "dir").mkdir(parents=True)
    (repo / "some" / "dir" / "tiny.toml").write_text(TINY)  # a copy, not the registered file
    (reg / "dir.toml").mkdir()
    (reg / "dir.toml" / ".keep").write_text("")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "bad registrations")


BAD = [
    (("register", "registrations/empty.toml"), "registrations/empty.toml: 'schema' must be an integer"),
    (("register", "registrations/syntax.toml"), "not valid TOML"),
    (("register", "registrations/unknownkey.toml"), "unknown field bogus in the top level"),
    (("register", "registrations/badtype.toml"), "[grid] batch = 'x' is not an integer"),
    (("register", "registrations/latin.toml"), "is not UTF-8 text"),
    (("register", "registrations/nomatch.toml"), "can never be decided"),
    (("register", "registrations/huge.toml"), "[grid] point attention/b1/h64/kv64/n1048576/d16/float32/full needs"),
    (("register", "registrations/orphan.toml"), "amends = \"nosuch\" but no line 'nosuch' is registered"),
    (("register", "registrations/dir.toml"), "registrations/dir.toml is a directory, not a registration"),
    (("register", "registrations"), "registrations is a directory, not a registration"),
    (("register", "registrations/tiny.txt"), "registrations/tiny.txt is not a registration (a .toml file)"),
    (("register", "bad id!"), "neither a line id"),
    (("register", "tiny"), "line 'tiny' is already registered"),
    (("register", "nosuch"), "no registration file at registrations/nosuch.toml"),
    (("sweep", "nosuch"), "line 'nosuch' is not registered"),
    (("sweep", "some/dir/x.toml"), "no registration file at some/dir/x.toml"),
    (("sweep", "some/dir/tiny.toml"), "some/dir/tiny.toml is not the registration of line 'tiny' (registered "
                                      "from registrations/tiny.toml)"),
    (("sweep", "registrations/dir.toml"), "is a directory, not a registration"),
    (("sweep", "tiny", "--device", "gpu"), "--device 'gpu': use auto, cuda or cpu"),
    (("verdict", "nosuch"), "line 'nosuch' is not registered"),
    (("verdict", "some/dir/x.toml"), "no registration file at some/dir/x.toml"),
    (("ledger", "verify", "some/dir/x.toml"), "no registration file at some/dir/x.toml"),
    (("ledger", "verify", "nosuch"), "no ledger for line 'nosuch'"),
    (("ledger", "show", "tiny", "--csv", "--json"), "--csv and --json both given"),
    (("ledger", "show", "tiny", "--kind", "bogus"), "--kind 'bogus' is not a row kind"),
    (("ledger", "show"), "Missing argument"),
    (("sweep", "--bogus", "tiny"), "No such option: --bogus"),
]


def test_bad_input_is_one_line_exit_2_and_leaves_the_ledger_untouched(repo, monkeypatch, capsys):
    """Each refusal: one line naming the problem, exit 2, not one byte or lock file more in ledger/."""
    from harness.cli import main

    _variants(repo)
    assert run_bench(repo, "register", "tiny").returncode == 0
    for lock in (repo / "ledger").glob("*.lock"):
        lock.unlink()  # what a successful register leaves; refused commands must add none
    monkeypatch.chdir(repo)

    def snapshot():
        return {p.name: p.read_bytes() for p in (repo / "ledger").iterdir()}

    before = snapshot()
    for args, message in BAD:
        rc = main(list(args))
        err = capsys.readouterr().err
        assert rc == 2, (args, rc, err)
        assert message in err and err.startswith("bench: error: "), (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
        assert snapshot() == before, (args, sorted(set(snapshot()) ^ set(before)))


def test_the_registered_path_and_line_id_both_work_and_counts_are_singular(repo, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.chdir(repo)
    assert main(["register", "registrations/tiny.toml"]) == 0
    assert "2 configs" in capsys.readouterr().out
    assert main(["ledger", "verify", "registrations/tiny.toml"]) == 0
    assert "tiny.jsonl: 1 row, chain intact" in capsys.readouterr().out
    assert main(["ledger", "show", "tiny"]) == 0
    assert "ledger/tiny.jsonl — 1 row" in capsys.readouterr().out
    assert main(["ledger", "show", "./registrations/tiny.toml", "--kind", "registered", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "registered"
    # A path into the registrations of another directory is that file, and refused if absent.
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    assert main(["ledger", "verify", "../registrations/tiny.toml"]) == 0
    assert main(["ledger", "verify", "registrations/tiny.toml"]) == 2
    assert "no registration file at registrations/tiny.toml" in capsys.readouterr().err


def test_output_to_a_pipe_is_wide_enough_for_tables_unless_columns_says_otherwise():
    import subprocess
    import sys

    from harness.reporting.render.console import NON_TTY_WIDTH
    from tests.conftest import bench_env

    code = "from harness.reporting.render.console import console; print(console().width)"
    env = {k: v for k, v in bench_env().items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(piped.stdout) == NON_TTY_WIDTH
    narrow = subprocess.run([sys.executable, "-c", code], env={**env, "COLUMNS": "100"}, capture_output=True,
                            text=True, check=True)
    assert int(narrow.stdout) == 100


def test_a_baseline_failing_the_gate_stops_the_sweep_with_the_explanation_and_exit_3(repo):
    # rtol 1e-7 is above float32's own rounding (2^-24 ≈ 6e-8: `bench register` accepts it), but
    # below what the bmm-softmax-bmm baseline's float32 arithmetic achieves, and atol 0 leaves
    # its small outputs no slack.
    text = TINY.replace("atol = 1e-5\nrtol = 1e-4", "atol = 0\nrtol = 1e-7").replace(
        "seq_len = [32, 48]", "seq_len = [32, 48, 64]")
    (repo / "registrations" / "tiny.toml").write_text(text)
    git(repo, "commit", "-qam", "a tolerance the baseline cannot meet")
    assert run_bench(repo, "register", "tiny").returncode == 0
    git(repo, "add", "ledger")
    git(repo, "commit", "-qm", "register tiny")
    s = run_bench(repo, "sweep", "tiny", "--device", "cpu", "--no-ceilings")
    assert s.returncode == 3, s.stdout + s.stderr
    said = " ".join(s.stdout.split())
    first = "attention/b1/h2/kv2/n32/d16/float32/full"
    assert (f"stopped: baseline torch_stack fails the correctness gate at {first} [mismatch]: seed 0 family "
            in said), s.stdout
    assert "ulp float32) > atol 0 + rtol 1e-07·|ref|" in said and "elements out of tolerance" in said
    assert "so the sweep stops here with 2 configs not run" in said
    assert "Either the tolerance is wrong (atol 0, rtol 1e-07; its failing elements need at least atol" in said
    assert 'new line with amends = "tiny"' in said and "or the baseline is wrong" in said
    assert "Traceback" not in s.stderr
    # The stopping config's rows are written and committed; no later config ran.
    outs = [r for r in complete_rows(repo) if r["kind"] in ("incorrect", "skipped", "result")]
    assert {r["config_key"] for r in outs} == {first}
    assert sorted((r["kind"], r.get("role", "candidate")) for r in outs) == [("incorrect", "baseline"),
                                                                            ("skipped", "candidate")]
    assert git(repo, "status", "--porcelain", "--", "ledger") == ""
    assert verify(repo / "ledger" / "tiny.jsonl").ok
