"""The read commands' verification cache (issue 51 item 2, analysis/verify_cache.py): a hit
serves what was stored, any change to the ledger, git or the code is a miss, a corrupt or
foreign cache file is a miss (fail closed), and `bench ledger verify` never reads it.

Correctness only, never speed (the figures are research/read_speed.py's, docs/benchmarks.md).
Real ledgers in a real git repository, `bench` as a subprocess, the cache under a temporary
``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.conftest import bench_env, git
from tests.test_site import chain

# A state no ledger can give: shows that `bench status` printed what the cache held.
PLANTED = "closed PLANTED-BY-TEST"


@pytest.fixture
def repo(tmp_path):
    """A committed repository holding the shipped A/A line as ``aa``, and a private cache home."""
    root = chain(tmp_path / "proj", {})
    return root, tmp_path / "xdg"


def bench(root, xdg, *args, **env):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, capture_output=True, text=True,
                          timeout=600, env={**bench_env(), "XDG_CACHE_HOME": str(xdg), **env})


def entries(xdg):
    d = xdg / "bench" / "verify"
    return sorted(d.glob("*.json")) if d.is_dir() else []


def plant(entry) -> None:
    """Rewrite the stored state of a cache entry (its key untouched): a hit prints PLANTED."""
    doc = json.loads(entry.read_text())
    doc["extra"]["status"]["fields"]["state"] = PLANTED
    entry.write_text(json.dumps(doc))


def test_a_hit_serves_the_stored_status_and_the_cache_is_private(repo):
    root, xdg = repo
    cold = bench(root, xdg, "status")
    assert cold.returncode == 0, cold.stderr
    (entry,) = entries(xdg)
    assert stat.S_IMODE(os.stat(entry.parent).st_mode) == 0o700
    assert not stat.S_IMODE(os.stat(entry).st_mode) & 0o077
    assert not any(p.name.endswith(".json") for p in root.rglob("*") if ".git" not in p.parts)  # never in the repo
    doc = json.loads(entry.read_text())
    assert doc["key"]["head"] == json.loads((root / "ledger" / "aa.jsonl").read_text().splitlines()[-1])["hash"]
    warm = bench(root, xdg, "status")
    assert warm.stdout == cold.stdout and warm.returncode == 0
    for fmt in ("json", "csv"):  # the stored state round-trips: the same document either way
        assert bench(root, xdg, "status", "--format", fmt).stdout == \
            bench(root, xdg, "status", "--format", fmt, BENCH_NO_VERIFY_CACHE="1").stdout
    plant(entry)
    assert PLANTED in bench(root, xdg, "status").stdout  # served from the cache: no re-audit


def test_an_edited_ledger_byte_is_re_audited_and_reported(repo):
    root, xdg = repo
    assert bench(root, xdg, "status").returncode == 0
    (entry,) = entries(xdg)
    plant(entry)
    path = root / "ledger" / "aa.jsonl"
    rows = path.read_text().splitlines()
    rows[2] = rows[2].replace('"result"', '"resulT"', 1) if '"result"' in rows[2] else rows[2][:-2] + " }"
    path.write_text("\n".join(rows) + "\n")
    r = bench(root, xdg, "status")
    assert PLANTED not in r.stdout and "BROKEN" in r.stdout, r.stdout


def test_a_new_commit_or_another_code_version_is_a_miss(repo):
    from harness.reporting.analysis import verify_cache

    root, xdg = repo
    assert bench(root, xdg, "status").returncode == 0
    (entry,) = entries(xdg)
    plant(entry)
    assert PLANTED in bench(root, xdg, "status").stdout
    git(root, "commit", "-q", "--allow-empty", "-m", "another HEAD")
    assert PLANTED not in bench(root, xdg, "status").stdout
    # The code's version is in every key: another version never matches a stored one.
    path = root / "ledger" / "aa.jsonl"
    key = verify_cache.ledger_key(path, path.read_bytes(), verify_cache.git_state(path))
    assert key["code"] == verify_cache.code_version() and len(key["code"]) == 64
    doc = json.loads(entry.read_text())
    assert doc["key"] == key
    doc["key"]["code"] = "0" * 64
    doc["extra"]["status"]["fields"]["state"] = PLANTED
    entry.write_text(json.dumps(doc))
    assert PLANTED not in bench(root, xdg, "status").stdout


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other format", "group-readable", "symlink"])
def test_a_corrupt_or_foreign_cache_file_is_a_miss(repo, damage):
    root, xdg = repo
    good = bench(root, xdg, "status")
    (entry,) = entries(xdg)
    plant(entry)
    text = entry.read_text()
    if damage == "garbage":
        entry.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif damage == "other format":
        doc = json.loads(text)
        doc["format"] = 999
        entry.write_text(json.dumps(doc))
    elif damage == "group-readable":
        entry.chmod(0o644)
    else:
        other = entry.parent.parent / "elsewhere.json"
        other.write_text(text)
        entry.unlink()
        entry.symlink_to(other)
    r = bench(root, xdg, "status")
    assert r.returncode == 0 and r.stdout == good.stdout and PLANTED not in r.stdout


def test_ledger_verify_ignores_the_cache(repo):
    root, xdg = repo
    r = bench(root, xdg, "ledger", "verify")
    assert r.returncode == 0, r.stderr
    assert entries(xdg) == []  # verify neither reads nor writes it
    assert bench(root, xdg, "status").returncode == 0
    (entry,) = entries(xdg)
    doc = json.loads(entry.read_text())
    doc["result"]["n_results"] = 987654
    entry.write_text(json.dumps(doc))
    again = bench(root, xdg, "ledger", "verify")
    assert again.returncode == 0 and again.stdout == r.stdout and "987654" not in again.stdout


def test_the_cache_folder_is_bounded(tmp_path):
    from harness.reporting.analysis.verify_cache import prune

    for i in range(5):
        f = tmp_path / f"{i}.json"
        f.write_text("{}")
        os.utime(f, ns=(i * 10**9, i * 10**9))
    (tmp_path / "other.txt").write_text("not an entry")
    assert prune(tmp_path, 3) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.json", "3.json", "4.json", "other.txt"]
