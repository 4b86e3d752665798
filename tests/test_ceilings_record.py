"""Ceilings are part of the record (issue 26, item 2): committed when measured, named by
each outcome row (``ceilings_ref``), and the link checked by ``ledger verify`` — in real git."""

from __future__ import annotations

import json

import pytest

from harness.governance.ledger import Ledger, anchor
from harness.governance.outcomes import OUTCOME_KINDS
from harness.governance.ledger_format import CEILINGS_LEDGER, canonical, read_rows, row_hash
from harness.governance.ledger_verify import verify
from harness.governance.outcomes import RESULT
from harness.pipeline.rows import ceilings_ref
from harness.record.ceilings import append_ceilings, commit_ceilings
from tests.conftest import TINY, git, init_repo, run_bench

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
    again = run_bench(proj, "ceilings")  # the stored row, now committed
    assert again.returncode == 0, again.stderr
    assert "stored" in again.stdout and "committed in" in again.stdout
    assert git(proj, "status", "--porcelain") == ""
    forced = run_bench(proj, "ceilings", "--force")
    assert forced.returncode == 0 and "measured" in forced.stdout and "committed in" in forced.stdout
    assert git(proj, "status", "--porcelain") == ""
    assert json.loads((proj / "ledger" / f"{CEILINGS_LEDGER}.jsonl").read_text().splitlines()[1])["seq"] == 1


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
