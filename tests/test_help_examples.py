"""Issue 51 item 4: every "Example:" of every command's --help runs as written against the
repository's own ledgers and registrations — in a temporary clone (commands that write do so
there), with this working tree's code, as real `python -m harness` subprocesses."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, git

# Where an example's exit is not 0 by its command's documented contract on this host:
# (codes allowed, text its output must hold for a non-zero one).
DOCUMENTED = {
    "ledger repair": ((2,), "nothing to repair"),  # the shipped ledgers are intact
    "verdict": ((0, 1), None),  # --show exits as the verdict did: 0 GO, 1 NO-GO
    "sweep": ((0, 4), "nothing usable"),  # 4: a host too busy to time anything, with its reason
    "bisect": ((0, 1), "unclear"),  # 1: the two ends not told apart (or not timed) on this host
}
# GPU-only examples on a host without CUDA: exit 2, naming why (their help says so).
GPU_ONLY = {"profile": "NVIDIA GPU", "replicate": "CPU"}
# The examples that write, in groups: each group in a clone of its own, in this order (`new`'s
# file is committed before `register`); the groups are separate tests, so that the two test
# processes of the README's test command run them side by side.
WRITING_GROUPS = (("new", "register"), ("probe",), ("sweep",), ("ceilings",), ("bisect",))
WRITING = tuple(c for group in WRITING_GROUPS for c in group)
# The tag bisect's example names: a user's release tag (its help says so), which a clone of this
# repository lacks, so the test puts it where a release would be, on the parent of the newest
# commit that changes something outside ledger/: the range then holds one code commit, and
# bisect measures its two ends only (a probe each).
RELEASE_TAG = "v1.0"


def tag_release(repo: Path) -> str:
    """Tag ``RELEASE_TAG`` in ``repo`` as above; the tagged commit."""
    newest = git(repo, "rev-list", "-n1", "--first-parent", "HEAD", "--", ":(top)", ":(top,exclude)ledger")
    tagged = git(repo, "rev-parse", f"{newest}^")
    git(repo, "tag", RELEASE_TAG, tagged)
    return tagged


# What a writing example needs in its clone first that a user would already have.
SETUP = {"bisect": tag_release}
# Not runnable as written in a clone: none.
LEFT: set[str] = set()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def help_examples() -> dict[str, list[list[str]]]:
    """Per command path ("ledger show"), the bench commands its --help's Example line gives."""
    import typer

    from harness.cli import app

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None) or {}
        if not subs:
            yield path, cmd.help or ""
        for name, sub in subs.items():
            yield from walk(sub, [*path, name])

    out = {}
    for path, text in walk(typer.main.get_command(app), []):
        m = re.search(r"Example:(.*?)(?:\n\s*\n|\Z)", text, re.S)
        assert m, f"bench {' '.join(path)} --help has no Example"
        line = re.sub(r"\([^)]*\)", "", " ".join(m.group(1).split()))
        cmds = [shlex.split(part[part.index("bench "):])[1:] for part in line.split(";") if "bench " in part]
        assert cmds, (path, line)
        out[" ".join(path)] = cmds
    return out


def clone(dest: Path) -> Path:
    """The repository's history, ledgers and registrations, with this working tree's code
    committed on top (so the examples run what is being tested)."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True, capture_output=True)
    git(dest, "config", "user.email", "test@example.com")
    git(dest, "config", "user.name", "test")
    for name in ("harness", "kernels"):
        shutil.rmtree(dest / name)
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(REPO / name, dest / name)
    git(dest, "add", "-A", "harness", "kernels", "pyproject.toml", "setup.py")
    if git(dest, "status", "--porcelain"):
        git(dest, "commit", "-q", "-m", "the working tree under test")
    return dest


def run_example(cwd: Path, args: list[str]) -> subprocess.CompletedProcess:
    # The clone's own code (cwd first on sys.path), never this checkout's through PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONUNBUFFERED="1", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)


def check(command: str, args: list[str], r: subprocess.CompletedProcess) -> None:
    shown = f"bench {shlex.join(args)} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    if command in GPU_ONLY and not _cuda():
        assert r.returncode == 2 and GPU_ONLY[command] in r.stderr, shown
        return
    codes, text = DOCUMENTED.get(command, ((0,), None))
    assert r.returncode in codes, shown
    if r.returncode != 0 and text is not None:
        assert text in r.stdout + r.stderr, shown


@pytest.fixture(scope="module")
def examples() -> dict[str, list[list[str]]]:
    return help_examples()


def test_every_command_has_a_runnable_example(examples):
    import typer

    from harness.cli import app

    assert set(examples) >= {n for n in typer.main.get_command(app).commands if n != "ledger"}
    assert set(WRITING) | set(GPU_ONLY) | set(DOCUMENTED) <= set(examples)


@pytest.fixture(scope="module")
def read_only_clone(tmp_path_factory) -> Path:
    """One clone for every read-only example (they write nothing tracked, checked after each)."""
    return clone(tmp_path_factory.mktemp("read-only") / "clone")


def _read_only_commands() -> list[str]:
    return [c for c in help_examples() if c not in WRITING and c not in LEFT]


@pytest.mark.parametrize("command", _read_only_commands())
def test_the_read_only_examples_run_on_the_shipped_ledgers(read_only_clone, examples, command):
    for args in examples[command]:
        check(command, args, run_example(read_only_clone, args))
    # Nothing written to tracked files.
    assert git(read_only_clone, "status", "--porcelain", "--untracked-files=no") == ""


@pytest.mark.slow
@pytest.mark.parametrize("group", WRITING_GROUPS, ids="+".join)
def test_the_writing_examples_run_in_a_clone(tmp_path, examples, group):
    repo = clone(tmp_path / "clone")
    for command in group:
        prepared = SETUP[command](repo) if command in SETUP else None
        for args in examples[command]:
            r = run_example(repo, args)
            check(command, args, r)
            if command == "bisect":  # it measured from the tagged commit and recorded each probe
                assert prepared[:12] in r.stdout + r.stderr, (r.stdout, r.stderr)
                probes = [json.loads(x) for x in (repo / "ledger" / "_bisect.jsonl").read_text().splitlines()]
                assert any(p.get("kind") == "probe" and p.get("commit") == prepared for p in probes), probes
        if command == "new":  # the file it wrote, reviewed and committed (its own message says so)
            git(repo, "add", "registrations")
            git(repo, "commit", "-q", "-m", "a new line")
