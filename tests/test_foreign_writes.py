"""Bytes in a ledger that bench did not write (issue 47, item 3): a kernel that appends to its
own ledger fails the sweep closed at the next append, naming the foreign bytes, and `bench
ledger repair` removes them — never a committed row, never a row bench wrote."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.errors import UserError
from harness.ledger.store import Ledger, anchor
from harness.ledger.format import read_rows
from harness.ledger.verify import verify
from tests.conftest import TINY, bench_env, git, init_repo, installed_dist, run_bench

# A correct kernel that appends a junk line to its own line's ledger on every call.
SCRIBBLER = '''\
from harness import kernel

LEDGER = {ledger!r}


def scribbler(q, k, v, out, *, causal, scale):
    import torch

    out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))
    with open(LEDGER, "ab") as fh:
        fh.write(b"junk from the kernel\\n")


kernel("scribbler", workloads=("attention",), dtypes=("float32",), devices=("cpu",))(scribbler)
'''


@pytest.mark.slow
@pytest.mark.parametrize("where", ["worker", "driver"])
def test_a_kernel_writing_to_its_ledger_fails_the_sweep_and_repair_removes_its_bytes(tmp_path, where):
    line = TINY.replace('candidate = "sdpa"', 'candidate = "scribbler"').replace("seq_len = [32, 48]", "seq_len = [32]")
    repo = init_repo(tmp_path / "proj", {"j": line})
    ledger = repo / "ledger" / "j.jsonl"
    plugin = installed_dist(tmp_path / "site", "scribbler", "0.1", "[bench.kernels]\nscribbler = scribbler_kernel\n",
                            {"scribbler_kernel": SCRIBBLER.format(ledger=str(ledger))})
    env = {**bench_env(), "PYTHONPATH": os.pathsep.join([str(plugin), bench_env()["PYTHONPATH"]])}

    def bench(*args):
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                              env=env, timeout=900)

    assert bench("register", "j").returncode == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registered")
    registered = ledger.read_bytes()
    s = bench("sweep", "j", "--no-ceilings", *(("--inline",) if where == "driver" else ()))
    assert s.returncode == 2, s.stdout + s.stderr
    err = s.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench: error: ledger/j.jsonl changed since bench last wrote it: "), err
    junk = ledger.read_bytes()[len(registered):]
    assert junk and set(junk.splitlines()) == {b"junk from the kernel"}  # nothing of bench's after them
    assert (f"{len(junk)} foreign bytes at offset {len(registered)} (after row 0, the last bench wrote)"
            in err[0]) and "`bench ledger repair j`" in err[0]
    assert ledger.read_bytes().startswith(registered)

    r = run_bench(repo, "ledger", "repair", "j")
    assert r.returncode == 0, r.stderr
    n = junk.count(b"\n")
    assert (f"removed {n} line{'s' if n > 1 else ''} bench did not write ({len(junk)} bytes from offset "
            f"{len(registered)}, after row 0, the last that chains); rows 0-0 are intact") in " ".join(r.stdout.split())
    assert ledger.read_bytes() == registered and verify(ledger).ok
    assert git(repo, "status", "--porcelain") == ""


def _line(root, n=3) -> Ledger:
    led = Ledger(root, "line")
    led.append("registered", {"commit": "c" * 40})
    for i in range(1, n):
        led.append("skipped", {"commit": "c" * 40, "reason": f"skip {i}"})
    return led


def test_the_writer_appends_only_to_the_bytes_it_left(repo):
    """Junk appended between two writes, and a cut, are refused before anything is appended;
    the honest path follows its own appends and commits as before."""
    from harness.commands.writer import write

    led = _line(repo)
    anchor(led, "rows")
    left = led.left()
    rows, made, left = write(led, [("skipped", {"commit": "c" * 40, "reason": "skip 3"})], why="one more", left=left)
    assert [r.seq for r in rows] == [3] and made == git(repo, "rev-parse", "HEAD") and left == led.left()
    clean = led.path.read_bytes()
    led.path.write_bytes(clean + b"x" * 10 + b"\n")
    with pytest.raises(UserError, match=rf"ledger/line.jsonl changed since bench last wrote it: 11 foreign bytes at "
                                        rf"offset {len(clean)} \(after row 3, the last bench wrote\)"):
        write(led, [("skipped", {"commit": "c" * 40, "reason": "skip 4"})], why="more", left=left)
    assert led.path.read_bytes() == clean + b"x" * 10 + b"\n"  # nothing appended to the tampered file
    with pytest.raises(UserError, match="11 foreign bytes"):  # nor committed
        write(led, [], why="commit what is there", left=left)
    assert git(repo, "status", "--porcelain") == "M ledger/line.jsonl"
    led.path.write_bytes(clean[:-5])
    with pytest.raises(UserError, match=rf"is 5 bytes shorter than bench left it \(cut at offset {len(clean) - 5}\)"):
        write(led, [("skipped", {"commit": "c" * 40, "reason": "skip 4"})], left=left)
    led.path.write_bytes(clean)
    rows, _, _ = write(led, [("skipped", {"commit": "c" * 40, "reason": "skip 4"})], left=left)
    assert rows[0].seq == 4 and verify(led.path).ok


def test_a_commit_holding_bytes_bench_did_not_write_is_named(repo):
    from harness.ledger.store import Left
    from harness.commands.writer import _require_committed

    led = _line(repo)
    left = led.left()
    led.path.write_bytes(led.path.read_bytes() + b"junk\n")
    made = anchor(led, "rows and junk")
    with pytest.raises(UserError, match=rf"ledger/line.jsonl: commit {made[:12]} holds 5 bytes bench did not write "
                                        rf"\(at offset {left.size}\)"):
        _require_committed(led, left, made)
    _require_committed(led, Left.of(led.path.read_bytes()), made)  # what it holds: no refusal


def test_repair_removes_junk_after_the_chain_and_never_a_row_bench_wrote(repo):
    led = _line(repo)
    anchor(led, "rows")
    committed = led.path.read_bytes()
    junk = b"".join(b"junk %d\n" % i for i in range(3000))
    led.path.write_bytes(committed + junk)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 3 and not res.torn
    fixed = led.repair()
    assert (fixed.foreign_lines, fixed.removed_bytes, fixed.offset, fixed.row) == (3000, len(junk), len(committed), 3)
    assert led.path.read_bytes() == committed and verify(led.path).ok

    # An uncommitted row bench wrote, then junk: the row stays, the junk goes.
    led.append("skipped", {"commit": "c" * 40, "reason": "skip 3"})
    written = led.path.read_bytes()
    led.path.write_bytes(written + b"{not json\n")
    assert led.repair().row == 4 and led.path.read_bytes() == written

    # An uncommitted row edited, with junk after it: a row bench wrote, never removed.
    edited = written.replace(b"skip 3", b"skip 9")
    led.path.write_bytes(edited + b"junk\n")
    with pytest.raises(UserError, match=r"row 3 was edited.*line 4 holds row 3 of this line, edited \(bench wrote "
                                        r"it\): restore the file from git"):
        led.repair()
    assert led.path.read_bytes() == edited + b"junk\n"

    # Damage inside the rows committed at HEAD: restored from git, not here.
    broken = committed.replace(b"skip 2", b"skip 7") + b"junk\n"
    led.path.write_bytes(broken)
    with pytest.raises(UserError, match="the damage starts at row 2, inside the 3 rows committed at HEAD"):
        led.repair()
    assert led.path.read_bytes() == broken
    assert len(read_rows(repo / "ledger" / "line.jsonl", as_far_as_it_reads=True)) == 3
