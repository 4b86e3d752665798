"""Clones git cannot fully back: shallow clones (CI checkouts), a .git that cannot be written,
and git lock files another git command holds. Real repositories, real git, no mocks."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.provenance import git as gitguard, gitcmd
from harness.governance import line as gl
from harness.ledger.store import Ledger
from harness.ledger.format import read_rows
from harness.ledger.verify import verify
from tests.conftest import TINY, git, init_repo, run_bench

ENV = {"host": "test"}


def commit_all(root: Path, msg: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-qm", msg)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def reopened(tmp_path, monkeypatch) -> Path:
    """A repository whose line `example` was registered, deleted and re-opened (as the shipped
    example was), then one more commit: its row 0 names a commit a depth-1 clone lacks."""
    src = init_repo(tmp_path / "src", {"example": TINY})
    monkeypatch.chdir(src)
    gl.register("example", env=ENV)
    commit_all(src, "register example")
    git(src, "rm", "-q", "ledger/example.jsonl")
    commit_all(src, "drop its ledger to re-register")
    gl.register("example", env=ENV, reopen=True)
    commit_all(src, "re-open example")
    (src / "NOTES").write_text("a later commit\n")
    commit_all(src, "notes")
    monkeypatch.chdir(tmp_path)
    return src


def shallow_clone(src: Path, dst: Path, depth: int = 1) -> Path:
    # file://: a local path would hard-link the whole object store and ignore --depth.
    subprocess.run(["git", "clone", "-q", "--depth", str(depth), f"file://{src}", str(dst)], check=True,
                   capture_output=True)
    git(dst, "config", "user.email", "test@example.com")
    git(dst, "config", "user.name", "test")
    assert git(dst, "rev-parse", "--is-shallow-repository") == "true"
    return dst


def test_a_shallow_clone_verifies_its_chain_and_names_what_it_could_not_check(reopened, tmp_path):
    full = verify(reopened / "ledger" / "example.jsonl")
    assert full.ok and full.unchecked is None  # a full clone checks everything, the re-open included
    clone = shallow_clone(reopened, tmp_path / "ci")
    head = git(clone, "rev-parse", "HEAD")
    res = verify(clone / "ledger" / "example.jsonl")
    assert res.ok, res.reason
    assert res.unchecked.startswith(f"history before {head[:12]} is not in this clone (shallow): could not check ")
    assert "row 0's re-open of" in res.unchecked

    r = run_bench(clone, "ledger", "verify")
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = [x for x in r.stdout.splitlines() if "example.jsonl" in x]
    assert line.startswith("ok   example.jsonl: 1 row, chain intact; history before") and "(shallow)" in line

    r = run_bench(clone, "ledger", "verify", "--strict")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("bench: error: --strict: 1 ledger could not be checked") and "--unshallow" in r.stderr
    assert run_bench(reopened, "ledger", "verify", "--strict").returncode == 0  # nothing unchecked in a full clone

    r = run_bench(clone, "status")
    assert r.returncode == 0 and "BROKEN" not in r.stdout, r.stdout
    assert "registered (shallow clone: older history unchecked)" in r.stdout
    assert "note: this clone is shallow" in r.stdout


@pytest.fixture
def ledger_on_top(tmp_path, monkeypatch) -> tuple[Path, str]:
    """A repository whose two newest commits change only ledger/ (a registration's row, then a
    note), over the code commit every row is stamped with: (the repository, that commit)."""
    src = init_repo(tmp_path / "src", {"tiny": TINY, "two": TINY})
    (src / "NOTES").write_text("the code commit\n")
    code = commit_all(src, "notes")
    monkeypatch.chdir(src)
    gl.register("tiny", env=ENV)
    commit_all(src, "register tiny")
    (src / "ledger" / "notes.txt").write_text("ledger-only\n")
    commit_all(src, "a ledger note")
    monkeypatch.chdir(tmp_path)
    return src, code


def test_a_shallow_clone_stamps_the_code_commit_a_full_clone_does_or_refuses(ledger_on_top, tmp_path):
    """Depth 1, 2 and 3 end at HEAD, at the ledger-only commit below it, and at the code commit
    itself: its parent is cut off, so whether it changed the code cannot be told. Depth 4 holds
    the code commit's parent (the root): the stamp is found, the full clone's."""
    src, code = ledger_on_top
    full = tmp_path / "full"
    subprocess.run(["git", "clone", "-q", f"file://{src}", str(full)], check=True, capture_output=True)
    assert gitguard.code_commit(src) == gitguard.code_commit(full) == code
    for depth in (1, 2, 3):
        clone = shallow_clone(src, tmp_path / f"depth{depth}", depth)
        with pytest.raises(UserError) as err:
            gitguard.require_clean(clone)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith("this clone is shallow and its history stops at "), msg
        assert "git fetch --unshallow" in msg and "git fetch --deepen N" in msg, msg
    deep = shallow_clone(src, tmp_path / "depth4", 4)
    assert gitguard.shallow_boundary(deep)  # the root commit is its boundary: a commit with no parent to cut
    assert gitguard.require_clean(deep).commit == code

    # A root commit at the boundary hides nothing: it is the code commit of ledger-only commits above it.
    root_only = init_repo(tmp_path / "root-only", {"tiny": TINY})
    first = git(root_only, "rev-parse", "HEAD")
    (root_only / "ledger" / "notes.txt").write_text("ledger-only\n")
    commit_all(root_only, "a ledger note")
    clone = shallow_clone(root_only, tmp_path / "root-only-clone", 2)
    assert gitguard.shallow_boundary(clone) == (first,) and gitguard.code_commit(clone) == first


def test_register_in_a_depth_1_clone_refuses_and_a_deepened_one_stamps_as_a_full_clone(ledger_on_top, tmp_path):
    src, code = ledger_on_top
    clone = shallow_clone(src, tmp_path / "ci")
    r = run_bench(clone, "register", "two")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert "this clone is shallow" in r.stderr and "git fetch --unshallow" in r.stderr, r.stderr
    assert not list((clone / "ledger").glob("two*")) and git(clone, "status", "--porcelain", "--ignored") == ""

    git(clone, "fetch", "-q", "--deepen", "3")  # now the code commit's parent is here
    assert git(clone, "rev-parse", "--is-shallow-repository") == "true"
    full = tmp_path / "full"
    subprocess.run(["git", "clone", "-q", f"file://{src}", str(full)], check=True, capture_output=True)
    for where in (clone, full):
        r = run_bench(where, "register", "two")
        assert r.returncode == 0, r.stdout + r.stderr
    stamps = {read_rows(where / "ledger" / "two.jsonl")[0].commit for where in (clone, full)}
    assert stamps == {code}


def test_a_shallow_clone_still_catches_what_it_can_check(reopened, tmp_path):
    clone = shallow_clone(reopened, tmp_path / "ci")
    path = clone / "ledger" / "example.jsonl"
    Ledger(clone, "example").append("result", {"commit": "c" * 40})
    commit_all(clone, "a row")
    good = path.read_bytes()
    rows = good.split(b"\n")
    path.write_bytes(b"\n".join([rows[0], rows[1].replace(b'"c', b'"d', 1), *rows[2:]]))  # an edited byte: the chain
    assert verify(path).reason == "row 1 was edited: its content no longer matches its hash"
    path.write_bytes(good[:good.index(b"\n") + 1])  # a committed row cut off: git at HEAD
    res = verify(path)
    assert not res.ok and "committed at HEAD are missing" in res.reason
    path.write_bytes(good)
    assert verify(path).ok


# --- a .git that cannot be written ------------------------------------------------------

def _chattr(flag: str, path: Path) -> bool:
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def test_a_git_directory_that_cannot_be_written_is_refused_before_any_work(repo, monkeypatch):
    """``chattr +i .git``: no file can be created in it, by root either — what a read-only
    mount or another user's clone does to git's index.lock (tests run as root here, where
    chmod stops nothing). Permissions still read as writable: only a real write finds it."""
    monkeypatch.chdir(repo)
    gl.register("tiny", env=ENV)
    commit_all(repo, "register tiny")
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    if not _chattr("+i", repo / ".git"):
        pytest.skip("chattr +i is not available here (file system, or not root)")
    try:
        t = time.monotonic()
        r = run_bench(repo, "sweep", "tiny")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("bench: error: git cannot write in this clone: creating a file in .git/ failed "
                                   "(Operation not permitted)"), r.stderr
        assert "chattr -i" in r.stderr and "or pass --no-commit" in r.stderr
        assert "sweep of line" not in r.stdout and time.monotonic() - t < 30  # no config ran
        assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before
        (repo / "registrations" / "two.toml").write_text(TINY)
        with pytest.raises(UserError, match="git cannot write in this clone"):  # register's pre-flight too
            gitguard.require_git_writable(repo, fallback="register in a clone you can commit to")
    finally:
        _chattr("-i", repo / ".git")
    gitguard.require_git_writable(repo, fallback="-")
    assert not list((repo / ".git").glob(".bench-write-probe-*"))


# --- git's lock files ---------------------------------------------------------------------

def _held_for(lock: Path, seconds: float) -> threading.Timer:
    """A real git lock file, as another git command holds it, removed after ``seconds``."""
    lock.write_text("")
    timer = threading.Timer(seconds, lock.unlink)
    timer.start()
    return timer


def test_a_commit_waits_for_a_git_lock_another_command_holds(repo):
    led = Ledger(repo, "line")
    led.append("registered", {"commit": "c" * 40})
    timer = _held_for(repo / ".git" / "index.lock", 1.0)
    t = time.monotonic()
    gitguard.require_committable(repo)  # the pre-flight waits too
    assert time.monotonic() - t >= 0.9
    timer.join()
    timer = _held_for(repo / ".git" / "index.lock", 1.0)
    t = time.monotonic()
    made = gitguard.commit_file(repo, led.rel, "bench: rows")
    timer.join()
    assert time.monotonic() - t >= 0.9 and made == git(repo, "rev-parse", "HEAD")
    assert git(repo, "status", "--porcelain", "--", led.rel) == ""
    led.append("result", {"commit": "c" * 40})
    timer = _held_for(repo / ".git" / "refs" / "heads" / "main.lock", 1.0)  # the branch's ref lock
    made = gitguard.commit_file(repo, led.rel, "bench: more rows")
    timer.join()
    assert made == git(repo, "rev-parse", "HEAD") and git(repo, "log", "-1", "--format=%s") == "bench: more rows"


def test_a_git_lock_held_past_the_bound_is_one_clear_error(repo, monkeypatch):
    monkeypatch.setattr(gitcmd, "LOCK_WAIT_S", 0.5)  # the shipped bound is 30 s
    led = Ledger(repo, "line")
    led.append("registered", {"commit": "c" * 40})
    (repo / ".git" / "index.lock").write_text("")  # left by a killed git command
    t = time.monotonic()
    with pytest.raises(UserError) as err:
        gitguard.commit_file(repo, led.rel, "bench: rows")
    assert 0.5 <= time.monotonic() - t < 5
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"git add {led.rel}: .git/index.lock exists and stayed for 0.5 s")
    assert "rm .git/index.lock" in msg and "its rows are written but not anchored" in msg
    (repo / ".git" / "index.lock").unlink()
    gitguard.commit_file(repo, led.rel, "bench: rows")
    assert read_rows(led.path) and git(repo, "status", "--porcelain", "--", led.rel) == ""


@pytest.mark.slow
def test_the_example_sweeps_in_a_shallow_clone_and_its_rows_verify(reopened, tmp_path):
    # Depth 2: the code commit (the notes) and its parent; a depth-1 clone cannot tell the
    # code commit and refuses (test_register_in_a_depth_1_clone_refuses_…). Row 0 still names a
    # commit this clone lacks, so what it cannot check is still named.
    clone = shallow_clone(reopened, tmp_path / "ci", 2)
    r = run_bench(clone, "sweep", "example")
    assert r.returncode == 0, r.stdout + r.stderr
    path = clone / "ledger" / "example.jsonl"
    res = verify(path)
    assert res.ok and res.unchecked is not None, res
    outcomes = [x for x in read_rows(path) if getattr(x, "config_key", None)]
    assert len({x.config_key for x in outcomes}) == 2  # both configs measured (a loaded host may skip timing)
    assert git(clone, "status", "--porcelain") == ""  # every row committed, the ceilings it measured too
    r = run_bench(clone, "ledger", "verify", "example")
    assert r.returncode == 0 and r.stdout.startswith("ok   example.jsonl:"), r.stdout + r.stderr
