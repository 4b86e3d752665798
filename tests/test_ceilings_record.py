"""Ceilings are part of the record (issue 26, item 2): committed when measured, named by
each outcome row (``ceilings_ref``), and the link checked by ``ledger verify`` — in real git."""

from __future__ import annotations

import json

import pytest

from harness.cli.sweep import EXIT_NOTHING_USABLE

from harness.errors import UserError
from harness.ledger.store import Ledger, anchor
from harness.vocab.outcomes import CEILINGS, OUTCOME_KINDS
from harness.ledger.format import CEILINGS_LEDGER, canonical, read_rows, row_hash
from harness.ledger.verify import verify
from harness.vocab.outcomes import RESULT
from harness.pipeline.rows import ceilings_ref
from harness.commands.ceilings import append_ceilings, require_committable, stored_or_measured
from tests.conftest import TINY, copy_project, git, init_repo, run_bench

COPY_GBPS = 20.0
MATMUL = {"float32": 0.5}
GBPS = 2.0  # the result's rate: a fraction 0.1 of COPY_GBPS
FORGED_COPY_GBPS = 0.2  # what an edited ceilings row says, to make that fraction 10


@pytest.fixture
def proj(tmp_path):
    return init_repo(tmp_path / "proj", {"tiny": TINY})


def _ceilings(root, copy=COPY_GBPS):
    fp = {"device": "cpu", "name": "test cpu", "torch": "x"}
    return append_ceilings(root, fp, {"device": "cpu"}, {"device": "cpu", "fingerprint": fp, "copy_gbps": copy,
                                                        "matmul_tflops": dict(MATMUL), "method": {}})


def commit_ceilings(root, why: str) -> str | None:
    """Commit the ceilings rows this test appended (as `bench ceilings` commits what it measures)."""
    return anchor(Ledger(root, CEILINGS_LEDGER), why)


def _result(ceil, *, copy=COPY_GBPS) -> dict:
    """A result row's ceilings figures (the audit recomputes nothing else of it: no samples)."""
    frac = ceil is not None
    return {"config": {"dtype": "float32"}, "config_key": "k", "candidate": "sdpa",
            "ceilings_ref": ceilings_ref(ceil),
            "metrics": {"tflops": 0.1, "gbps": GBPS, "kv_gbps": GBPS,
                        "tflops_frac": 0.1 / MATMUL["float32"] if frac else None,
                        "gbps_frac": GBPS / copy if frac else None, "kv_gbps_frac": GBPS / copy if frac else None},
            "floor": {"rounds": {"copy_gbps": copy, "matmul_tflops": MATMUL["float32"]}, "sustained": None}
            if frac else None}


def _line(root, *rows: dict, commit: bool = True) -> Ledger:
    led = Ledger(root, "tiny")
    for r in rows:
        led.append(RESULT, r)
    if commit:
        anchor(led, "test rows")
    return led


def _rewrite(path, seq: int, **changes) -> None:
    """Edit row ``seq`` and re-hash the chain from it on: a valid chain, a forged row."""
    rows = [r.dump() for r in read_rows(path)]
    rows[seq].update(changes)
    prev = rows[seq]["prev_hash"]
    for r in rows[seq:]:
        r["prev_hash"] = prev
        r["hash"] = prev = row_hash(r)
    path.write_text("".join(canonical(r) + "\n" for r in rows))


def test_a_row_names_its_ceilings_row_and_verifies(proj):
    ceil = _ceilings(proj)
    commit_ceilings(proj, "test")
    led = _line(proj, _result(ceil), _result(None))
    res = verify(led.path)
    assert res.ok, res.reason
    assert read_rows(led.path)[0].ceilings_ref == {"seq": 0, "hash": ceil.hash}
    assert git(proj, "status", "--porcelain") == ""


def test_an_edited_rehashed_committed_ceilings_row_is_refused(proj):
    ceil = _ceilings(proj)
    commit_ceilings(proj, "test")
    led = _line(proj, _result(ceil))
    cpath = proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl"
    _rewrite(cpath, 0, copy_gbps=FORGED_COPY_GBPS)
    git(proj, "commit", "-qam", "better ceilings")
    own = verify(cpath)
    assert not own.ok and own.bad_row == 0 and "was rewritten or taken back" in own.reason
    line = verify(led.path)
    assert not line.ok and "_device_ceilings.jsonl" in line.reason and "fails verification" in line.reason


def test_a_ceilings_row_forged_before_its_commit_is_caught_by_the_link(proj):
    """Git cannot see an edit made before the first commit; the rows that used the honest row can."""
    ceil = _ceilings(proj)
    led = _line(proj, _result(ceil), commit=False)
    cpath = proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl"
    _rewrite(cpath, 0, copy_gbps=FORGED_COPY_GBPS)
    commit_ceilings(proj, "test")
    anchor(led, "test rows")
    res = verify(led.path)
    assert not res.ok and "names ceilings row 0" in res.reason and "was changed" in res.reason


def test_a_ref_to_a_missing_row_or_disagreeing_figures_is_refused(proj):
    ceil = _ceilings(proj)
    commit_ceilings(proj, "test")
    ghost = {**_result(ceil), "ceilings_ref": {"seq": 7, "hash": ceil.hash}}
    led = _line(proj, _result(ceil), ghost)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 1 and "names ceilings row 7" in res.reason and "does not exist" in res.reason

    other = init_repo(proj.parent / "other", {"tiny": TINY})
    ceil = _ceilings(other)
    commit_ceilings(other, "test")
    forged = _result(ceil, copy=FORGED_COPY_GBPS)  # fractions against a copy ceiling the row does not hold
    led = _line(other, forged)
    res = verify(led.path)
    assert not res.ok and "whose figures it does not hold" in res.reason and "floor.rounds.copy_gbps" in res.reason


def test_a_null_ref_holds_no_ceilings_figures_and_old_rows_are_not_checked(proj):
    ceil = _ceilings(proj)
    commit_ceilings(proj, "test")
    old = {k: v for k, v in _result(ceil).items() if k != "ceilings_ref"}  # written before the field
    hidden = {**_result(ceil), "ceilings_ref": None}
    led = _line(proj, old, _result(None), hidden)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 2 and "names no ceilings row" in res.reason and "gbps_frac" in res.reason


def test_a_committed_row_naming_an_uncommitted_ceilings_row_is_refused(proj):
    ceil = _ceilings(proj)
    led = _line(proj, _result(ceil), commit=False)
    assert verify(led.path).ok  # a --no-commit sweep's rows: nothing committed yet
    anchor(led, "the line alone")
    res = verify(led.path)
    assert not res.ok and "not committed" in res.reason and "git commit" in res.reason
    commit_ceilings(proj, "test")
    assert verify(led.path).ok


@pytest.mark.slow
def test_a_sweep_commits_the_ceilings_it_measured_and_rows_name_them(proj):
    assert run_bench(proj, "register", "tiny").returncode == 0
    s = run_bench(proj, "sweep", "tiny")
    assert s.returncode == 0, s.stderr + s.stdout
    assert git(proj, "status", "--porcelain") == ""  # README command 1 leaves a clean tree
    (ceil,) = read_rows(proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl")
    subjects = git(proj, "log", "--format=%s").splitlines()
    assert any(x.startswith(f"bench: ledger/{CEILINGS_LEDGER}.jsonl row 0 (ceilings for the sweep of tiny")
               for x in subjects), subjects
    outcomes = [r for r in read_rows(proj / "ledger" / "tiny.jsonl") if r.kind in OUTCOME_KINDS]
    assert outcomes and all(r.ceilings_ref == {"seq": 0, "hash": ceil.hash} for r in outcomes)
    v = run_bench(proj, "ledger", "verify")
    assert v.returncode == 0, v.stdout
    assert f"{CEILINGS_LEDGER}.jsonl: 1 row" in v.stdout

    # --no-ceilings: rows name none; the ceilings file is untouched.
    (proj / "registrations" / "bare.toml").write_text(TINY.replace("seq_len = [32, 48]", "seq_len = [32]"))
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "bare")
    assert run_bench(proj, "register", "bare").returncode == 0
    b = run_bench(proj, "sweep", "bare", "--no-ceilings")
    assert b.returncode == 0, b.stderr + b.stdout
    bare = [r for r in read_rows(proj / "ledger" / "bare.jsonl") if r.kind in OUTCOME_KINDS]
    assert bare and all(r.ceilings_ref is None and r.floor is None for r in bare)
    assert run_bench(proj, "ledger", "verify", "bare").returncode == 0
    assert git(proj, "status", "--porcelain") == ""


@pytest.mark.slow
def test_bench_ceilings_commits_what_it_measures_unless_no_commit(proj):
    r = run_bench(proj, "ceilings", "--no-commit")
    assert r.returncode == 0, r.stderr
    assert "not committed" in r.stdout
    assert git(proj, "status", "--porcelain") == f"?? ledger/{CEILINGS_LEDGER}.jsonl"
    # Issue 47: the row --no-commit left is not bench's to commit (nor to use): refused, kept as it is.
    left = (proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl").read_bytes()
    for args in (("ceilings",), ("ceilings", "--force")):
        again = run_bench(proj, *args)
        assert again.returncode == 2, again.stdout + again.stderr
        (said,) = again.stderr.strip().splitlines()
        assert f"ledger/{CEILINGS_LEDGER}.jsonl row 0 not committed" in said and f"rm ledger/{CEILINGS_LEDGER}" in said
        assert (proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl").read_bytes() == left
        assert git(proj, "status", "--porcelain") == f"?? ledger/{CEILINGS_LEDGER}.jsonl"
    (proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl").unlink()  # the fix it names
    measured = run_bench(proj, "ceilings")
    assert measured.returncode == 0 and "measured" in measured.stdout and "committed in" in measured.stdout
    again = run_bench(proj, "ceilings")  # the stored row, which a commit holds
    assert again.returncode == 0 and "stored" in again.stdout and "committed in" not in again.stdout, again.stderr
    assert git(proj, "status", "--porcelain") == ""
    forced = run_bench(proj, "ceilings", "--force")
    assert forced.returncode == 0 and "measured" in forced.stdout and "committed in" in forced.stdout
    assert git(proj, "status", "--porcelain") == ""
    assert json.loads((proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl").read_text().splitlines()[1])["seq"] == 1


# Issue 47's line: GO only when every pair reaches 90% of the copy ceiling, which TINY's honest
# pairs on a CPU do not come near (0.15-0.27 on the host of the report): only a forged ceiling could.
FRACTION_GO = 'go = "min(gbps_frac) >= 0.9 and pass_rate == 1.0"'


def _fraction_line(tmp_path):
    """A repository of this checkout's code with line `fr` registered and committed, and a CPU
    ceilings row that `bench ceilings --force --no-commit` left, forged as issue 47's was (copy
    0.01 GB/s, its chain re-hashed)."""
    # max_samples 300: the content refresh judges only with >= 10 kept calls on new and on seen
    # content, and a loaded host drops descheduled rounds (TINY's 40 left too few: `skipped` first).
    # The noise stop still ends timing as soon as both are there.
    fr = (TINY.replace('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"', FRACTION_GO)
          .replace("max_samples = 40", "max_samples = 300").replace("timeout_s = 5", "timeout_s = 60"))
    root = init_repo(copy_project(tmp_path / "proj"), {"fr": fr})  # it sweeps with its own code
    r = run_bench(root, "register", "fr")
    assert r.returncode == 0, r.stderr
    git(root, "add", "-A")
    git(root, "commit", "-qm", "register fr")
    left = run_bench(root, "ceilings", "--force", "--no-commit")
    assert left.returncode == 0 and "not committed" in left.stdout, left.stderr
    _rewrite(root / "ledger" / f"{CEILINGS_LEDGER}.jsonl", 0, copy_gbps=ATTACK_COPY_GBPS)
    return root


def _never_go(root, line: str) -> None:
    v = run_bench(root, "verdict", line)
    assert v.returncode != 0, v.stdout
    assert all(r.outcome != "GO" for r in read_rows(root / "ledger" / f"{line}.jsonl") if r.kind == "verdict")


@pytest.mark.slow
def test_issue_47_a_forged_uncommitted_ceilings_row_is_refused_never_committed_never_go(tmp_path):
    root = _fraction_line(tmp_path)
    cpath = root / "ledger" / f"{CEILINGS_LEDGER}.jsonl"
    v = run_bench(root, "ledger", "verify")
    assert v.returncode == 0, v.stdout  # the chain holds: only a commit could vouch for the row
    assert f"{CEILINGS_LEDGER}.jsonl: 1 row, chain intact; row 0 not committed: a chain can be re-hashed, so " \
           f"only a commit vouches for who wrote it" in " ".join(v.stdout.split())
    forged, head = cpath.read_bytes(), git(root, "rev-parse", "HEAD")
    s = run_bench(root, "sweep", "fr")
    assert s.returncode == 2, s.stdout + s.stderr
    (said,) = s.stderr.strip().splitlines()
    assert f"ledger/{CEILINGS_LEDGER}.jsonl row 0 not committed: bench did not measure it" in said
    assert f"drop it (rm ledger/{CEILINGS_LEDGER}.jsonl)" in said
    assert [r.kind for r in read_rows(root / "ledger" / "fr.jsonl")] == ["registered"]
    assert cpath.read_bytes() == forged and git(root, "rev-parse", "HEAD") == head  # never committed, never dropped
    _never_go(root, "fr")

    # --no-commit: the sweep measures this device itself and holds the bar and its rows to that row,
    # never the forged one. (On a loaded host this CPU's own short ceilings may read low enough that
    # the bar's reductio refuses the line before any config: it names the row it judged by, too.)
    n = run_bench(root, "sweep", "fr", "--no-commit")
    said = " ".join((n.stdout + n.stderr).split())
    assert n.returncode in (0, 2) and f"(ledger/{CEILINGS_LEDGER}.jsonl row 1)" in said, said
    assert f"{CEILINGS_LEDGER}.jsonl row 0" not in said
    forged_row, own = read_rows(cpath)
    assert forged_row.copy_gbps == ATTACK_COPY_GBPS and own.copy_gbps != ATTACK_COPY_GBPS
    outcomes = [r for r in read_rows(root / "ledger" / "fr.jsonl") if r.kind in OUTCOME_KINDS]
    assert (n.returncode == 0) == bool(outcomes)
    assert all(r.ceilings_ref == {"seq": 1, "hash": own.hash} for r in outcomes)
    assert git(root, "rev-parse", "HEAD") == head


@pytest.mark.slow
def test_issue_47_a_forged_ceilings_row_committed_by_hand_is_refuted_by_the_rates_the_sweep_measures(tmp_path):
    """The user commits the forged row (vouching for it): the sweep uses it, and the baseline's own
    measured byte rate, tens of times the forged copy ceiling, fails every pair closed, naming both."""
    root = _fraction_line(tmp_path)
    git(root, "add", f"ledger/{CEILINGS_LEDGER}.jsonl")
    git(root, "commit", "-qm", "ceilings (edited)")
    (ceil,) = read_rows(root / "ledger" / f"{CEILINGS_LEDGER}.jsonl")
    s = run_bench(root, "sweep", "fr")
    assert s.returncode == EXIT_NOTHING_USABLE, s.stdout + s.stderr  # every baseline refused: nothing usable
    outcomes = [r for r in read_rows(root / "ledger" / "fr.jsonl") if r.kind in OUTCOME_KINDS]
    assert len(outcomes) == 2
    for r in outcomes:
        assert r.kind == "skipped" and "[beyond_ceiling]" in r.reason, r.reason
        assert (f"the measured copy bandwidth 0.01 GB/s (the ceilings of ledger/{CEILINGS_LEDGER}.jsonl row 0 "
                f"({ceil.hash[:12]}); more than 10.00x is impossible") in r.reason
        assert r.reason.startswith("baseline torch_stack ran beyond the device's ceilings [beyond_ceiling]: "
                                   "baseline: gbps ")
    _never_go(root, "fr")


def test_ledger_verify_names_the_rows_no_commit_holds(proj):
    """Issue 47 item 3: a chain re-hashed after an edit verifies, so `ledger verify` names the rows
    only a commit could vouch for — of the ceilings file and of every line."""
    led = _line(proj, _result(_ceilings(proj)), commit=False)
    cpath = proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl"
    assert verify(cpath).uncommitted == (0, 0) and verify(led.path).uncommitted == (0, 0)
    v = run_bench(proj, "ledger", "verify")
    assert v.returncode == 0, v.stdout + v.stderr
    said = {line.split()[1]: line for line in v.stdout.splitlines()}
    for name in (cpath.name, led.path.name):
        assert said[f"{name}:"].startswith(f"ok   {name}: 1 row, chain intact")
        assert said[f"{name}:"].endswith("; row 0 not committed: a chain can be re-hashed, so only a commit vouches "
                                         "for who wrote it"), v.stdout
    commit_ceilings(proj, "test")
    anchor(led, "test rows")
    assert verify(cpath).uncommitted is None and verify(led.path).uncommitted is None
    v = run_bench(proj, "ledger", "verify")
    assert v.returncode == 0 and "not committed" not in v.stdout, v.stdout


# ----------------------------------------------------------------------------- issue 47: who wrote the row

# What the hostile user of issue 47 wrote over a CPU's measured copy ceiling (3.07 GB/s).
ATTACK_COPY_GBPS = 0.01


def _cpu_row() -> dict:
    """This CPU's ceilings, measured now (a fraction of a second)."""
    from harness.measurement.ceilings import measure_ceilings

    return measure_ceilings("cpu").to_row()


def test_a_ceilings_row_no_commit_holds_is_neither_used_nor_committed(proj):
    """A row a --no-commit run left, forged and re-hashed: its chain verifies, so only the
    commit can vouch for it. A committing command refuses, naming it and the fix, and writes
    nothing; a --no-commit one measures the device itself and names its own row; once the user
    commits the row (vouching for it), it is used."""
    from harness.measurement.ceilings import device_fingerprint

    fp = device_fingerprint("cpu")
    append_ceilings(proj, fp, {"device": "cpu"}, _cpu_row())
    cpath = proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl"
    _rewrite(cpath, 0, copy_gbps=ATTACK_COPY_GBPS)
    res = verify(cpath)
    assert res.ok and res.uncommitted == (0, 0)
    forged, head = cpath.read_bytes(), git(proj, "rev-parse", "HEAD")
    for attempt in (lambda: require_committable(proj),
                    lambda: stored_or_measured(proj, fp, {"device": "cpu"}, _cpu_row, why="ceilings for the sweep")):
        with pytest.raises(UserError) as refused:
            attempt()
        said = str(refused.value)
        assert said.startswith(f"ledger/{CEILINGS_LEDGER}.jsonl row 0 not committed: bench did not measure it"), said
        assert f"(rm ledger/{CEILINGS_LEDGER}.jsonl)" in said and "commit it yourself" in said
        assert cpath.read_bytes() == forged and git(proj, "rev-parse", "HEAD") == head  # nothing written, kept

    row, measured, made = stored_or_measured(proj, fp, {"device": "cpu"}, _cpu_row)  # --no-commit
    assert measured and made is None and row.seq == 1 and row.copy_gbps != ATTACK_COPY_GBPS
    assert cpath.read_bytes().startswith(forged) and git(proj, "rev-parse", "HEAD") == head
    assert verify(cpath).uncommitted == (0, 1)

    git(proj, "add", f"ledger/{cpath.name}")
    git(proj, "commit", "-qm", "the user vouches for rows 0 and 1")
    again, measured, made = stored_or_measured(proj, fp, {"device": "cpu"}, _cpu_row, why="ceilings for the sweep")
    assert (again.seq, measured, made) == (1, False, None) and verify(cpath).uncommitted is None


def test_a_ceilings_row_its_datasheet_rules_out_is_neither_stored_nor_used(proj):
    fp = {"device": "cuda", "name": "NVIDIA H200", "driver": "580.159.03", "cuda": "13.0", "torch": "2.11.0"}
    fast = {"device": "cuda", "fingerprint": fp, "copy_gbps": 9000.0, "matmul_tflops": {"bfloat16": 811.0},
            "method": {}}
    cpath = proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl"
    with pytest.raises(UserError) as refused:
        append_ceilings(proj, fp, {"device": "cuda"}, fast)
    assert "were not stored: its copy bandwidth 9000 GB/s is 1.88x the NVIDIA H200 datasheet's 4800 GB/s" in \
        str(refused.value)
    assert not cpath.exists()
    # Appended around bench (the ledger takes any row) and committed by the user: refused where it would be used.
    Ledger(proj, CEILINGS_LEDGER).append(CEILINGS, {"env": {"device": "cuda"}, **fast})
    commit_ceilings(proj, "by hand")
    for why in (None, "ceilings for the sweep"):
        with pytest.raises(UserError) as refused:
            stored_or_measured(proj, fp, {"device": "cuda"}, _cpu_row, why=why)
        said = str(refused.value)
        assert said.startswith(f"ledger/{CEILINGS_LEDGER}.jsonl row 0 (") and "cannot be NVIDIA H200's ceilings" in said
        assert "1.88x the NVIDIA H200 datasheet's 4800 GB/s" in said and "bench ceilings --force" in said
    assert len(read_rows(cpath)) == 1


def test_a_copy_outside_ledger_without_ceilings_beside_it_is_checked_without_the_link(proj, tmp_path):
    """A commit's version read back into a temporary file (``register --reopen``) still verifies."""
    ceil = _ceilings(proj)
    commit_ceilings(proj, "test")
    led = _line(proj, _result(ceil))
    copy = tmp_path / "elsewhere" / "tiny.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(led.path.read_bytes())
    assert verify(copy).ok
    (copy.parent / f"{CEILINGS_LEDGER}.jsonl").write_text("")  # a ceilings file beside it: the link is checked
    res = verify(copy)
    assert not res.ok and "does not exist" in res.reason
