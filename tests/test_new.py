"""`bench new`: a commented registration from flags that `bench register` accepts as written."""

from __future__ import annotations

import tomllib

from tests.conftest import git, run_bench

SMALL = ("--baseline", "torch_stack", "--seq-len", "64", "--heads", "2", "--kv-heads", "2", "--head-dim", "16")


def test_new_writes_a_registration_that_registers_as_written(repo):
    r = run_bench(repo, "new", "fresh", "--candidate", "sdpa", *SMALL, "--dtype", "float32", "--prediction", "1.2")
    assert r.returncode == 0, r.stderr
    path = repo / "registrations" / "fresh.toml"
    assert "bench register registrations/fresh.toml" in r.stdout and "waived" not in r.stdout
    text = path.read_text()
    raw = tomllib.loads(text)
    assert raw["candidate"] == "sdpa" and raw["baseline"] == "torch_stack" and raw["bar"]["prediction"] == 1.2
    assert raw["grid"]["seq_len"] == [64] and raw["grid"]["causal"] == [False, True]
    assert raw["correctness"]["atol"] == {"float32": 1e-4} and "accept_weak" not in raw["correctness"]
    assert "geomean(speedup) >= 1.05" in raw["bar"]["go"] and "5% faster than torch_stack" in raw["hypothesis"]
    assert text.count("\n# ") >= 10  # every section says what it means
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fresh")
    reg = run_bench(repo, "register", "registrations/fresh.toml")
    assert reg.returncode == 0, reg.stderr
    assert "registered line fresh" in reg.stdout


def test_new_waives_only_the_canaries_its_tolerance_cannot_reject_and_says_why(repo):
    r = run_bench(repo, "new", "half", "--candidate", "sdpa", *SMALL, "--dtype", "bfloat16", "--causal", "false",
                  "--prediction", "1.1")
    assert r.returncode == 0, r.stderr
    raw = tomllib.loads((repo / "registrations" / "half.toml").read_text())
    waived = raw["correctness"]["accept_weak"]
    assert waived and all(f"waived canary {w}" in r.stdout for w in waived)
    text = (repo / "registrations" / "half.toml").read_text()
    assert all(f"#   {w}: " in text and "would reject it" in text for w in waived)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "half")
    reg = run_bench(repo, "register", "registrations/half.toml")
    assert reg.returncode == 0, reg.stderr


def test_new_refuses_bad_input_in_one_line_and_writes_nothing(repo):
    before = sorted(p.name for p in (repo / "registrations").iterdir())
    tiny = (repo / "registrations" / "tiny.toml").read_text()
    cases = [
        (("tiny", "--candidate", "sdpa", "--prediction", "1"), "registrations/tiny.toml exists"),
        (("x", "--candidate", "nosuch", "--prediction", "1"), "unknown kernel 'nosuch'"),
        (("x", "--candidate", "sdpa", "--causal", "maybe", "--prediction", "1"), "--causal 'maybe'"),
        (("x", "--candidate", "sdpa", "--go", "min(speedup) >= 2", "--prediction", "1"), "--go without --hypothesis"),
        (("x", "--candidate", "sdpa", "--workload", "prefill", "--prediction", "1"), "--workload 'prefill'"),
        (("Bad Name", "--candidate", "sdpa", "--prediction", "1"), "line id"),
    ]
    for args, why in cases:
        r = run_bench(repo, "new", *args)
        assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", (args, r.stderr)
    assert sorted(p.name for p in (repo / "registrations").iterdir()) == before
    assert (repo / "registrations" / "tiny.toml").read_text() == tiny
