"""The hash-chained ledger: appends, verification of tampering, torn writes, DataFrame export."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.provenance import git as gitguard, gitcmd
from harness.ledger.store import Ledger, anchor, dataframe, require_anchorable, require_anchored
from harness.ledger.format import GENESIS_HASH, LEDGER_SCHEMA, canonical, read_rows, row_hash
from harness.ledger.verify import verify
from tests.conftest import REPO, bench_env, git, run_bench


def _fill(root: Path, n: int = 5) -> Ledger:
    led = Ledger(root, "line")
    led.append("registered", {"commit": "c" * 40, "amends": "first"})
    for i in range(1, n):
        led.append("result", {"commit": "c" * 40, "metrics": {"value": i * 1.5, "nan": float("nan")}})
    return led


def test_chain_fields_and_verify_ok(tmp_path):
    led = _fill(tmp_path)
    rows = led.rows()
    assert [r.seq for r in rows] == list(range(5))
    assert rows[0].prev_hash == GENESIS_HASH
    for a, b in zip(rows, rows[1:]):
        assert b.prev_hash == a.hash
    assert all(r.schema == LEDGER_SCHEMA and r.hash == row_hash(r.dump()) for r in rows)
    assert rows[1].metrics["nan"] == "NaN"  # strict JSON: non-finite numbers are spelled out
    res = verify(led.path)
    assert res.ok and res.n_rows == 5


def _lines(path):
    return path.read_bytes().split(b"\n")[:-1]


def _write(path, lines):
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_edited_byte_is_named(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    lines[2] = lines[2].replace(b'"value":3.0', b'"value":3.1')
    _write(led.path, lines)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 2 and "edited" in res.reason


def test_deleted_row_is_named(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    del lines[2]
    _write(led.path, lines)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 2 and "deleted" in res.reason


def test_swapped_pair_is_named(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    lines[1], lines[2] = lines[2], lines[1]
    _write(led.path, lines)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 1 and "reordered" in res.reason


def test_partial_last_row_is_named_and_append_recovers(tmp_path):
    led = _fill(tmp_path)
    data = led.path.read_bytes()
    led.path.write_bytes(data + b'{"schema":1,"seq":5,"kin')  # a write killed mid-row
    res = verify(led.path)
    assert not res.ok and res.bad_row == 5 and res.torn
    assert "incomplete final line" in res.reason and "bench ledger repair line" in res.reason
    assert len(read_rows(led.path)) == 5  # never acknowledged, so never a row
    led.append("result", {"commit": "c" * 40})
    assert verify(led.path).ok and len(led.rows()) == 6


def test_truncated_committed_tail_is_caught_through_git(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@e")
    git(tmp_path, "config", "user.name", "t")
    led = _fill(tmp_path)
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "ledger")
    lines = _lines(led.path)
    _write(led.path, lines[:3])  # the chain of the first 3 rows is still valid on its own
    res = verify(led.path)
    assert not res.ok and res.bad_row == 3 and "missing" in res.reason


def test_append_refuses_to_chain_onto_an_edited_last_row(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    lines[-1] = lines[-1].replace(b'"value":6.0', b'"value":7.0')
    _write(led.path, lines)
    with pytest.raises(UserError, match="fails its hash check"):
        led.append("result", {"commit": "c" * 40})


def test_newer_schema_refused_with_fix(tmp_path):
    led = _fill(tmp_path, 1)
    row = json.loads(_lines(led.path)[0])
    row["schema"] = LEDGER_SCHEMA + 1
    led.path.write_text(json.dumps(row) + "\n")
    with pytest.raises(UserError, match="upgrade bench"):
        read_rows(led.path)


def _appender(root, n):
    led = Ledger(Path(root), "line")
    for i in range(n):
        led.append("result", {"commit": "c" * 40, "metrics": {"i": i}})


def test_concurrent_writers_keep_one_chain(tmp_path):
    Ledger(tmp_path, "line").append("registered", {"commit": "c" * 40})
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_appender, args=(str(tmp_path), 15)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    res = verify(Ledger(tmp_path, "line").path)
    assert res.ok and res.n_rows == 46


def test_dataframe_flattens_rows(tmp_path):
    led = _fill(tmp_path, 3)
    led.append("result", {"commit": "c" * 40, "config": {"seq_len": 128}})
    df = dataframe(led.path)
    assert len(df) == 4
    assert "config.seq_len" in df.columns and df["config.seq_len"].iloc[-1] == 128


@pytest.mark.parametrize("last", [b'{"schema":1,"seq":', b'[1, 2, 3]'])
def test_a_garbled_last_row_is_one_clear_error(tmp_path, last):
    led = _fill(tmp_path, 2)
    led.path.write_bytes(led.path.read_bytes() + last + b"\n")
    with pytest.raises(UserError, match="restore the file from git"):
        led.append("result", {"commit": "c" * 40})
    with pytest.raises(UserError, match="row 2"):
        read_rows(led.path)


# --- torn rows, failed appends, repair --------------------------------------------------

def test_repair_removes_only_an_incomplete_final_line(tmp_path):
    led = _fill(tmp_path)
    good = led.path.read_bytes()
    led.path.write_bytes(good + b'{"schema":1,"seq":5,"kin')
    fixed = led.repair()
    assert fixed.removed_bytes == 24 and fixed.row == 5 and fixed.path == "ledger/line.jsonl"
    assert led.path.read_bytes() == good and verify(led.path).ok
    with pytest.raises(UserError, match="verifies .5 rows, chain intact.: nothing to repair"):
        led.repair()
    assert led.path.read_bytes() == good


def test_repair_refuses_any_other_damage(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    edited = lines[:]
    edited[2] = edited[2].replace(b'"value":3.0', b'"value":3.1')
    torn_and_edited = b"\n".join(edited) + b'\n{"schema":1,"se'
    led.path.write_bytes(torn_and_edited)
    with pytest.raises(UserError, match="row 2 was edited.*only an incomplete final line"):
        led.repair()
    assert led.path.read_bytes() == torn_and_edited
    # A complete, chaining row that only lacks its newline is a row: never removed.
    no_newline = b"\n".join(lines)
    led.path.write_bytes(no_newline)
    res = verify(led.path)
    assert not res.ok and not res.torn and "lacks its final newline" in res.reason
    with pytest.raises(UserError, match="lacks its final newline"):
        led.repair()
    assert led.path.read_bytes() == no_newline


_SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from harness.errors import UserError
from harness.provenance import git as gitguard
from harness.ledger.store import Ledger

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, write() returns short / EFBIG
led = Ledger(Path(sys.argv[1]), "line")
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (led.path.stat().st_size + int(sys.argv[2]), hard))
try:
    led.append("result", {"commit": "c" * 40, "reason": "x" * 4000})
except UserError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.parametrize("room", [100, 0])
def test_a_failed_append_leaves_no_partial_row(tmp_path, room):
    """A real kernel-enforced file size limit: a short write (room 100) or EFBIG (room 0)."""
    led = _fill(tmp_path)
    before = led.path.read_bytes()
    r = subprocess.run([sys.executable, "-c", _SHORT_WRITE, str(tmp_path), str(room)], capture_output=True,
                       text=True, env=bench_env(), timeout=60)
    assert r.returncode == 3, r.stderr
    assert "appending row 5 to ledger/line.jsonl failed" in r.stdout and "nothing of it was kept" in r.stdout
    assert "(File too large)" in r.stdout
    assert led.path.read_bytes() == before and verify(led.path).ok
    led.append("result", {"commit": "c" * 40})  # and the next append chains on as usual
    assert verify(led.path).ok and len(led.rows()) == 6


@pytest.fixture
def tiny_fs(tmp_path):
    """A 256 KiB tmpfs mounted at tmp_path/'small' (needs root with CAP_SYS_ADMIN; else skipped)."""
    where = tmp_path / "small"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_disk_full_leaves_no_partial_row_and_low_space_is_refused_first(tiny_fs):
    led = Ledger(tiny_fs, "line")
    led.append("registered", {"commit": "c" * 40})
    with pytest.raises(UserError, match=r"MiB free on the file system of ledger/, bench needs 64 MiB"):
        led.require_writable()
    before = led.path.read_bytes()
    with pytest.raises(UserError, match=r"appending row 1 to ledger/line.jsonl failed \(No space left on device\)"):
        led.append("result", {"commit": "c" * 40, "reason": "x" * 400_000})
    assert led.path.read_bytes() == before and verify(led.path).ok


def _chattr(flag: str, path: Path) -> bool:
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def test_an_immutable_ledger_is_refused_before_any_work(tmp_path):
    led = _fill(tmp_path, 2)
    if not _chattr("+i", led.path):
        pytest.skip("chattr +i is not available here (file system, or not root)")
    try:
        with pytest.raises(UserError, match=r"ledger/line.jsonl is not writable \(Operation not permitted\)"):
            led.require_writable()
        with pytest.raises(UserError, match="cannot open ledger/line.jsonl to append a row"):
            led.append("result", {"commit": "c" * 40})
    finally:
        _chattr("-i", led.path)
    led.require_writable()


_AS_NOBODY = """
import sys
from pathlib import Path
from harness.errors import UserError
from harness.provenance import git as gitguard
from harness.ledger.store import Ledger
try:
    Ledger(Path(sys.argv[1]), "line").require_writable()
except UserError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_ledger_refused_for_a_user_without_root(tmp_path, what):
    """Root writes a mode-0444 file regardless, so this runs as `nobody` (skipped where it cannot)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the check as nobody")
    base = Path(tempfile.mkdtemp(prefix="bench-ro-"))
    try:
        base.chmod(0o755)
        led = _fill(base, 2)
        for p in (base, led.path.parent, led.path):
            os.chown(p, 65534, 65534)
        (led.path if what == "file" else led.path.parent).chmod(0o444 if what == "file" else 0o555)
        # nobody may not read this checkout (a clone under a 0700 directory): it imports a copy.
        code = Path(tempfile.mkdtemp(prefix="bench-ro-code-"))
        code.chmod(0o755)
        shutil.copytree(REPO / "harness", code / "harness", ignore=shutil.ignore_patterns("__pycache__"))
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            _AS_NOBODY, str(base)], capture_output=True, text=True,
                           env={**bench_env(), "PYTHONPATH": str(code)}, timeout=60)
        shutil.rmtree(code)
        if "Permission denied" in r.stderr and "Traceback" not in r.stderr:
            pytest.skip(f"cannot run Python as nobody here: {r.stderr.strip()}")
        assert r.returncode == 3, r.stderr
        shown = "ledger/line.jsonl" if what == "file" else "ledger/"
        assert r.stdout.startswith(f"{shown} is not writable (Permission denied)"), r.stdout
    finally:
        led.path.parent.chmod(0o755)
        shutil.rmtree(base)


# --- anchoring in git ------------------------------------------------------------------

def test_anchor_commits_the_new_rows_and_a_verdict_refuses_uncommitted_ones(repo, monkeypatch):
    led = _fill(repo, 3)
    with pytest.raises(UserError, match=r"ledger/line.jsonl: rows 0-2 not committed; a verdict decides on "
                                        r"committed rows only — commit them: git add ledger/line.jsonl"):
        require_anchored(led, "a verdict")
    made = anchor(led, "sweep of line at abc")
    assert made == git(repo, "rev-parse", "HEAD")
    assert git(repo, "log", "-1", "--format=%s") == "bench: ledger/line.jsonl rows 0-2 (sweep of line at abc)"
    require_anchored(led, "a verdict")
    assert anchor(led, "nothing new") is None
    led.append("verdict", {"commit": "c" * 40})
    anchor(led, "verdict of line: GO")
    assert git(repo, "log", "-1", "--format=%s") == "bench: ledger/line.jsonl row 3 (verdict of line: GO)"
    assert git(repo, "status", "--porcelain") == ""
    (repo / ".git" / "index.lock").write_text("")  # left by a git command that was killed
    monkeypatch.setattr(gitcmd, "LOCK_WAIT_S", 0.3)  # bench waits this long for the lock to go
    with pytest.raises(UserError, match=r"\.git/index\.lock exists and stayed for 0.3 s: .* remove it "
                                        r"\(rm \.git/index\.lock\)"):
        require_anchorable(led)
    (repo / ".git" / "index.lock").unlink()
    require_anchorable(led)
    (repo / ".git" / "info" / "exclude").write_text("ledger/other.jsonl\n")
    with pytest.raises(UserError, match="ledger/other.jsonl is ignored by git .* or pass --no-commit"):
        require_anchorable(Ledger(repo, "other"))


def _verify_cli(repo, *line):
    return run_bench(repo, "ledger", "verify", *line)


def test_a_committed_row_taken_back_is_named_with_the_commit_that_took_it(repo):
    led = _fill(repo, 3)
    anchor(led, "sweep")
    led.append("verdict", {"commit": "c" * 40, "outcome": "NO-GO"})
    verdict_commit = anchor(led, "verdict of line: NO-GO")
    _write(led.path, _lines(led.path)[:3])  # the verdict row cut off, the line to be re-rolled
    git(repo, "commit", "-qam", "take the verdict back")
    taken = git(repo, "rev-parse", "HEAD")
    res = verify(led.path)
    assert not res.ok and res.bad_row == 3
    assert f"as committed in {verdict_commit[:12]}" in res.reason and f"taken back in commit {taken[:12]}" in res.reason
    led.append("result", {"commit": "c" * 40})  # re-rolled and committed: still caught
    anchor(led, "sweep again")
    r = _verify_cli(repo, "line")
    assert r.returncode == 1 and "BAD" in r.stdout and taken[:12] in r.stdout


def test_rows_rewritten_and_rehashed_after_their_commit_are_caught(repo):
    led = _fill(repo, 3)
    anchor(led, "sweep")
    rows = [r.dump() for r in led.rows()]
    prev = GENESIS_HASH
    for r in rows:  # a consistent chain, forged from scratch
        if r["kind"] == "result":
            r["metrics"]["value"] = 99.0
        r["prev_hash"] = prev
        r["hash"] = prev = row_hash(r)
    led.path.write_text("".join(canonical(r) + "\n" for r in rows))
    res = verify(led.path)
    assert not res.ok and res.bad_row == 1 and "differs from the row committed at HEAD" in res.reason


def test_deleted_ledgers_are_reported_by_verify(repo):
    led = _fill(repo, 2)
    anchor(led, "sweep")
    keep = _fill_line(repo, "kept")
    anchor(keep, "sweep")
    led.path.unlink()
    r = _verify_cli(repo)
    assert r.returncode == 1, r.stdout
    assert "ok   kept.jsonl" in r.stdout
    assert "GONE line.jsonl: committed at HEAD but deleted from the work tree: restore it with git checkout " \
           "HEAD -- ledger/line.jsonl" in r.stdout
    git(repo, "commit", "-qam", "drop the line")
    gone = git(repo, "rev-parse", "HEAD")
    for args in ((), ("line",)):
        r = _verify_cli(repo, *args)
        assert r.returncode == 1 and f"GONE line.jsonl: deleted in commit {gone[:12]} (drop the line)" in r.stdout
    show = run_bench(repo, "ledger", "show", "line")
    assert show.returncode == 2 and f"deleted in commit {gone[:12]}" in show.stderr


def _fill_line(root: Path, line: str) -> Ledger:
    led = Ledger(root, line)
    led.append("registered", {"commit": "c" * 40})
    return led


def _shown_ledger(root: Path) -> Ledger:
    """Rows the table renderer can show: a registration and two skips."""
    led = Ledger(root, "line")
    led.append("registered", {"commit": "c" * 40, "registration": {"go": "min(speedup) >= 1", "prediction": 1.2}})
    for i in (1, 2):
        led.append("skipped", {"commit": "c" * 40, "reason": f"skip {i}", "predicted_bytes": 1000 * i})
    return led


@pytest.mark.parametrize("fmt", [(), ("--csv",), ("--json",)])
def test_show_of_a_ledger_that_fails_verification_warns_and_exits_1(repo, fmt):
    led = _shown_ledger(repo)
    good = led.path.read_bytes()
    lines = _lines(led.path)
    lines[1] = lines[1].replace(b'"predicted_bytes":1000', b'"predicted_bytes":9000')
    _write(led.path, lines)
    r = run_bench(repo, "ledger", "show", "line", *fmt)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("bench: warning: ledger/line.jsonl fails verification (row 1 was edited")
    assert len(r.stderr.strip().splitlines()) == 1 and "skip 2" in r.stdout  # still shown, as far as it reads
    led.path.write_bytes(good)
    ok = run_bench(repo, "ledger", "show", "line", *fmt)
    assert ok.returncode == 0 and ok.stderr == "" and "skip 2" in ok.stdout


def test_ledger_repair_through_the_cli(repo):
    led = _shown_ledger(repo)
    good = led.path.read_bytes()
    led.path.write_bytes(good + b'{"schema":1,"seq":3,"ki')
    shown = run_bench(repo, "ledger", "show", "line")
    assert shown.returncode == 1 and "run `bench ledger repair line`" in shown.stderr
    r = run_bench(repo, "ledger", "repair", "line")
    assert r.returncode == 0, r.stderr
    assert "removed an incomplete final line (23 bytes, what would have been row 3); rows 0-2 are intact" in r.stdout
    assert led.path.read_bytes() == good
    again = run_bench(repo, "ledger", "repair", "line")
    assert again.returncode == 2 and "nothing to repair" in again.stderr


# --- a ledger's rows name its line (issue 47, item 2) ------------------------------------

def test_a_ledger_holding_another_lines_rows_is_refused_by_every_reader(repo, tmp_path):
    """An untracked copy of tiny's rows under another name verified, was listed by `status`
    and got a verdict as that line: every reader refuses it, naming the file, the row and the
    line the row names; with the copy gone, every reader works again."""
    assert run_bench(repo, "register", "tiny").returncode == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registered")
    copy = repo / "ledger" / "zz-unreg.jsonl"
    shutil.copy(repo / "ledger" / "tiny.jsonl", copy)
    before = copy.read_bytes()
    said = "ledger/zz-unreg.jsonl: row 0 names line 'tiny', not 'zz-unreg' (the file's name)"
    for args in (("ledger", "verify"), ("ledger", "verify", "zz-unreg"), ("status",), ("ledger", "show", "zz-unreg"),
                 ("ledger", "show", "zz-unreg", "--json"), ("verdict", "zz-unreg", "--no-commit"),
                 ("report", "zz-unreg", "--out", str(tmp_path / "rep")), ("compare", "tiny", "zz-unreg")):
        r = run_bench(repo, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert copy.read_bytes() == before and not (tmp_path / "rep").exists()  # nothing written
    copy.unlink()
    assert run_bench(repo, "ledger", "verify").returncode == 0
    st = run_bench(repo, "status")
    assert st.returncode == 0 and "tiny" in st.stdout and "zz-unreg" not in st.stdout


def test_a_rehashed_copy_naming_its_own_line_is_refused_by_its_registrations_name(repo, tmp_path):
    """Rows re-appended under a new name chain and name that line, but row 0 still registers
    another line's file (a line id is its registration's stem): refused by every reader."""
    assert run_bench(repo, "register", "tiny").returncode == 0
    (row0,) = read_rows(repo / "ledger" / "tiny.jsonl")
    Ledger(repo, "zz").append("registered", {k: v for k, v in row0.dump().items()
                                             if k not in ("kind", "line", "seq", "hash", "prev_hash")})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registered, and a re-hashed copy")
    said = "ledger/zz.jsonl: row 0 registers line 'tiny' (registrations/tiny.toml), not 'zz' (the file's name)"
    for args in (("verdict", "zz", "--no-commit"), ("sweep", "zz"), ("status",), ("ledger", "verify"),
                 ("report", "zz", "--out", str(tmp_path / "rep"))):
        r = run_bench(repo, *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert said in r.stderr, r.stderr
    assert [r.kind for r in read_rows(repo / "ledger" / "zz.jsonl")] == ["registered"]
    refused = run_bench(repo, "verdict", "tiny", "--no-commit")  # the line itself: refused for what it lacks
    assert refused.returncode == 2 and "no outcome yet" in refused.stderr


@pytest.mark.parametrize("fmt", [(), ("--csv",), ("--json",), ("--format", "tidy")])
def test_show_of_a_ledger_with_a_blank_line_shows_the_rows_before_it_and_exits_1(repo, fmt):
    """A blank line inserted after row 1 (issue 47, item 4): the rows before it are shown, as
    the README says of a ledger that fails verification, with the warning on stderr; exit 1."""
    led = _shown_ledger(repo)
    lines = _lines(led.path)
    _write(led.path, lines[:2] + [b""] + lines[2:])
    r = run_bench(repo, "ledger", "show", "line", *fmt)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("bench: warning: ledger/line.jsonl fails verification (row 2 is not valid JSON")
    assert len(r.stderr.strip().splitlines()) == 1
    if fmt == ("--json",):
        assert [json.loads(x)["seq"] for x in r.stdout.splitlines()] == [0, 1]
    elif fmt != ("--format", "tidy"):  # the tidy view holds outcomes only: skip 1's row, the only one read
        assert "skip 1" in r.stdout and "skip 2" not in r.stdout
    else:
        assert len(r.stdout.strip().splitlines()) == 2 and "skip 2" not in r.stdout  # the header and row 1
