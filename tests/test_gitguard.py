"""The git guard on real temporary repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.provenance import git as gitguard
from harness.ledger.store import Ledger, anchor, require_anchorable
from tests.conftest import git, run_bench


def test_clean_repo_passes_and_gives_full_sha(repo):
    tree = gitguard.require_clean(repo)
    assert tree.commit == git(repo, "rev-parse", "HEAD")
    assert len(tree.commit) == 40


@pytest.mark.parametrize("how", ["modified", "staged", "untracked", "deleted"])
def test_dirty_tree_refused_with_paths(repo, how):
    target = repo / "registrations" / "tiny.toml"
    if how == "modified":
        target.write_text(target.read_text() + "\n# tweak\n")
    elif how == "staged":
        (repo / "kernel.py").write_text("x = 1\n")
        git(repo, "add", "kernel.py")
    elif how == "untracked":
        (repo / "sub").mkdir()
        (repo / "sub" / "new.py").write_text("x = 1\n")
    elif how == "deleted":
        target.unlink()
    with pytest.raises(UserError) as err:
        gitguard.require_clean(repo)
    msg = str(err.value)
    assert "uncommitted changes" in msg
    expected = {"modified": "registrations/tiny.toml", "staged": "kernel.py", "untracked": "sub/new.py",
                "deleted": "registrations/tiny.toml"}[how]
    assert expected in msg


def test_ledger_is_exempt_but_ignored_files_do_not_count(repo):
    (repo / "ledger" / "tiny.jsonl").write_text("{}\n")
    (repo / "ledger" / "other.jsonl").write_text("{}\n")
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__" / "x.pyc").write_bytes(b"\0")
    gitguard.require_clean(repo)


def test_ledger_like_name_elsewhere_is_not_exempt(repo):
    (repo / "ledgerx").mkdir()
    (repo / "ledgerx" / "a.jsonl").write_text("{}\n")
    with pytest.raises(UserError, match="ledgerx/a.jsonl"):
        gitguard.require_clean(repo)


def test_outside_git_and_without_commit(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UserError, match="not inside a git repository"):
        gitguard.require_clean(plain)
    git(plain, "init", "-q")
    with pytest.raises(UserError, match="no commit yet"):
        gitguard.require_clean(plain)


def test_file_commit_requires_tracked_file(repo):
    assert gitguard.file_commit(repo, repo / "registrations" / "tiny.toml") == git(repo, "rev-parse", "HEAD")
    (repo / "registrations" / "new.toml").write_text("x")
    with pytest.raises(UserError, match="not committed"):
        gitguard.file_commit(repo, repo / "registrations" / "new.toml")


def test_a_rename_into_the_ledger_still_counts(repo):
    (repo / "helper.py").write_text("x = 1\n")
    git(repo, "add", "helper.py")
    git(repo, "commit", "-qm", "helper")
    git(repo, "mv", "helper.py", "ledger/helper.py")
    with pytest.raises(UserError, match="helper.py -> ledger/helper.py"):
        gitguard.require_clean(repo)


def test_assume_unchanged_files_are_not_hidden(repo):
    target = repo / "registrations" / "tiny.toml"
    git(repo, "update-index", "--assume-unchanged", "registrations/tiny.toml")
    target.write_text(target.read_text() + "\n# edited behind git's back\n")
    with pytest.raises(UserError, match="assume-unchanged registrations/tiny.toml"):
        gitguard.require_clean(repo)


def test_a_file_outside_the_repository_is_one_clear_error(repo, tmp_path):
    outside = tmp_path / "elsewhere.toml"
    outside.write_text("x")
    with pytest.raises(UserError, match="outside the repository"):
        gitguard.file_commit(repo, outside)


def test_the_stamp_is_the_code_commit_not_a_ledger_only_commit(repo):
    code = git(repo, "rev-parse", "HEAD")
    (repo / "ledger" / "tiny.jsonl").write_text("{}\n")
    git(repo, "add", "ledger/tiny.jsonl")
    git(repo, "commit", "-qm", "rows")
    assert git(repo, "rev-parse", "HEAD") != code
    assert gitguard.require_clean(repo).commit == code == gitguard.code_commit(repo)
    (repo / "kernel.py").write_text("x = 1\n")
    git(repo, "add", "kernel.py")
    git(repo, "commit", "-qm", "code")
    assert gitguard.code_commit(repo) == git(repo, "rev-parse", "HEAD")


def test_commit_file_commits_one_file_and_leaves_the_index_alone(repo):
    (repo / "ledger" / "tiny.jsonl").write_text("{}\n")
    (repo / "ledger" / "other.jsonl").write_text("{}\n")
    git(repo, "add", "ledger/other.jsonl")  # staged by the user, not bench's to commit
    head = gitguard.commit_file(repo, "ledger/tiny.jsonl", "bench: ledger/tiny.jsonl row 0")
    assert head == git(repo, "rev-parse", "HEAD")
    assert git(repo, "show", "--name-only", "--format=%s|%an", "HEAD").splitlines() == [
        "bench: ledger/tiny.jsonl row 0|test", "", "ledger/tiny.jsonl"]
    assert git(repo, "status", "--porcelain", "--", "ledger") == "A  ledger/other.jsonl"


def test_commit_file_falls_back_to_a_bench_identity(tmp_path, monkeypatch):
    """CI machines have no git identity: the commit is made as bench <bench@localhost>."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "ci"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.useConfigOnly", "true")  # no guessing from the host name either
    (root / "a.txt").write_text("a\n")
    with pytest.raises(subprocess.CalledProcessError):
        git(root, "commit", "-qm", "x", "--allow-empty")
    gitguard.commit_file(root, "a.txt", "bench: a")
    assert git(root, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == "bench <bench@localhost>|bench <bench@localhost>"
    unset = subprocess.run(["git", "config", "--get", "user.name"], cwd=root, capture_output=True)
    assert unset.returncode == 1  # nothing written to the config


# --- git's commit policy, found before any work (issue 47): a real test commit ---------------

def _hook(repo: Path, name: str, body: str) -> Path:
    """A real, executable git hook of ``repo``."""
    path = repo / ".git" / "hooks" / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _git_state(repo: Path) -> dict:
    """What a test commit must leave as it was: refs, every reflog, the index's bytes, the
    object store's loose objects, the git directory's entries and the work tree's status."""
    logs = repo / ".git" / "logs"
    return {"refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
            "head": (repo / ".git" / "HEAD").read_text(),
            "reflogs": {p.relative_to(logs).as_posix(): p.read_bytes() for p in logs.rglob("*") if p.is_file()},
            "index": (repo / ".git" / "index").read_bytes(),
            "objects": git(repo, "count-objects", "-v"),
            "git_dir": sorted(p.name for p in (repo / ".git").iterdir()),
            "status": git(repo, "status", "--porcelain", "--ignored")}


def _committed_line(repo: Path, line: str = "tiny") -> Ledger:
    """``line``'s ledger with one row, committed."""
    led = Ledger(repo, line)
    led.append("registered", {"commit": "c" * 40})
    git(repo, "add", led.rel)
    git(repo, "commit", "-qm", f"ledger {line}")
    return led


@pytest.mark.parametrize("hook,body,said", [
    # A branch guard: the test commit's branch has the user's branch's name.
    ("pre-commit",
     'b=$(git rev-parse --abbrev-ref HEAD)\n[ "$b" != main ] || { echo "no direct commits to $b"; exit 1; }\n',
     "no direct commits to main"),
    ("commit-msg", 'grep -q "^JIRA-" "$1" || { echo "the message must start with JIRA-" >&2; exit 1; }\n',
     "the message must start with JIRA-"),
    ("prepare-commit-msg", "exit 3\n", "it failed and said nothing"),
    ("reference-transaction", '[ "$1" != prepared ] || { cat >/dev/null; echo "refs are frozen" >&2; exit 1; }\n',
     "refs are frozen"),
])
def test_a_hook_that_fails_is_named_before_any_work_and_leaves_no_trace(repo, hook, body, said):
    led = _committed_line(repo)
    (repo / "ledger" / "staged.txt").write_text("the user's\n")
    git(repo, "add", "ledger/staged.txt")  # staged by the user: stays staged, uncommitted
    _hook(repo, hook, body)
    before = _git_state(repo)
    with pytest.raises(UserError) as err:
        require_anchorable(led)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"git's {hook} hook (.git/hooks/{hook}) refused a test commit of "
                                              f"ledger/tiny.jsonl ({said}): "), msg
    assert msg.endswith("make the hook accept bench's commits of ledger/, or pass --no-commit"), msg
    assert _git_state(repo) == before


def test_a_failing_pre_commit_hook_refuses_a_sweep_before_any_config(repo):
    """It was bypassed (``commit --no-verify``) without a word: now it runs, first in the test commit."""
    r = run_bench(repo, "register", "tiny")
    assert r.returncode == 0, r.stdout + r.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "register tiny")
    _hook(repo, "pre-commit", 'echo "ledger/ changes need a review ticket" >&2\nexit 1\n')
    before, rows = _git_state(repo), (repo / "ledger" / "tiny.jsonl").read_bytes()
    r = run_bench(repo, "sweep", "tiny", "--device", "cpu")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert r.stderr.startswith("bench: error: git's pre-commit hook (.git/hooks/pre-commit) refused a test commit of "
                               "ledger/tiny.jsonl (ledger/ changes need a review ticket)"), r.stderr
    assert "[1/" not in r.stdout  # no config ran
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == rows
    assert _git_state(repo) == before  # no lock file either: refused before the line lock


def test_hooks_that_pass_run_for_the_test_commit_and_for_every_commit_of_rows(repo, tmp_path):
    """The test commit runs the blocking hooks from their own path (a hook that sources a helper
    beside itself works), never post-commit; bench's real commits run them all; nothing of the
    test commit is left."""
    led = _committed_line(repo)
    seen = tmp_path / "hooks.log"
    (repo / ".git" / "hooks" / "helper.sh").write_text(f'log() {{ echo "$1" >> {seen}; }}\n')
    _hook(repo, "pre-commit", '. "$(dirname "$0")/helper.sh"\nlog "pre-commit $(git rev-parse --abbrev-ref HEAD) '
                              '$(git diff --cached --name-only)"\n')
    _hook(repo, "commit-msg", f'echo "commit-msg $(head -1 "$1")" >> {seen}\n')
    _hook(repo, "post-commit", f'echo post-commit >> {seen}\n')
    (repo / "ledger" / "staged.txt").write_text("the user's\n")
    git(repo, "add", "ledger/staged.txt")
    before = _git_state(repo)
    require_anchorable(led)
    assert seen.read_text().splitlines() == [
        "pre-commit main ledger/tiny.jsonl", "commit-msg bench: ledger/tiny.jsonl test commit (never kept)"]
    assert _git_state(repo) == before

    seen.unlink()
    led.append("result", {"commit": "c" * 40})
    made = anchor(led, "sweep of tiny")
    assert made == git(repo, "rev-parse", "HEAD")
    assert seen.read_text().splitlines() == [
        "pre-commit main ledger/tiny.jsonl", "commit-msg bench: ledger/tiny.jsonl row 1 (sweep of tiny)", "post-commit"]
    assert git(repo, "status", "--porcelain", "--", "ledger/staged.txt") == "A  ledger/staged.txt"


def _signer(tmp_path: Path, *, works: bool) -> Path:
    """A gpg.program: one that signs as gpg reports it (a status line, an armored signature), or
    one that fails as gpg does without the key."""
    path = tmp_path / ("gpg-ok" if works else "gpg-broken")
    path.write_text("#!/bin/sh\ncat >/dev/null\n" + (
        'echo "[GNUPG:] SIG_CREATED D 1 8 00 1700000000 0" >&2\n'
        'printf -- "-----BEGIN PGP SIGNATURE-----\\n\\nfake\\n-----END PGP SIGNATURE-----\\n"\n' if works else
        'echo "gpg: signing failed: No secret key" >&2\nexit 2\n'))
    path.chmod(0o755)
    return path


def test_a_failing_signer_refuses_a_sweep_before_any_config(repo, tmp_path):
    r = run_bench(repo, "register", "tiny")
    assert r.returncode == 0, r.stdout + r.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "register tiny")
    git(repo, "config", "commit.gpgsign", "true")
    git(repo, "config", "gpg.program", str(_signer(tmp_path, works=False)))
    before, rows = _git_state(repo), (repo / "ledger" / "tiny.jsonl").read_bytes()
    r = run_bench(repo, "sweep", "tiny", "--device", "cpu")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert r.stderr.startswith("bench: error: git could not sign a test commit of ledger/tiny.jsonl (error: gpg "
                               "failed to sign the data): commit.gpgsign is on"), r.stderr
    assert "fix the signer (gpg.program, user.signingkey), or pass --no-commit" in r.stderr
    assert "[1/" not in r.stdout and (repo / "ledger" / "tiny.jsonl").read_bytes() == rows
    assert _git_state(repo) == before


def test_a_working_signer_signs_the_test_commit_and_every_commit_of_rows(repo, tmp_path):
    led = _committed_line(repo)
    git(repo, "config", "commit.gpgsign", "true")
    git(repo, "config", "gpg.program", str(_signer(tmp_path, works=True)))
    before = _git_state(repo)
    require_anchorable(led)
    assert _git_state(repo) == before
    led.append("result", {"commit": "c" * 40})
    anchor(led, "sweep of tiny")
    assert "\ngpgsig -----BEGIN PGP SIGNATURE-----" in git(repo, "cat-file", "commit", "HEAD")


def test_a_symlinked_ledger_is_refused_before_anything_is_written(repo, tmp_path, monkeypatch):
    """git refuses paths beyond a symbolic link (rows never committed), and commits a symlinked
    file as the link: both are refused up front, with --no-commit too."""
    from harness.governance import line as gl

    monkeypatch.chdir(repo)
    elsewhere = tmp_path / "elsewhere"
    (repo / "ledger").rename(elsewhere)
    (repo / "ledger").symlink_to(elsewhere)
    with pytest.raises(UserError) as err:
        gl.register("tiny", env={"host": "test"})
    assert str(err.value).startswith(f"ledger is a symbolic link (to {elsewhere}): git cannot commit rows written "
                                     f"through it — make ledger a real directory of this repository")
    assert sorted(p.name for p in elsewhere.iterdir()) == [".gitkeep"]

    (repo / "ledger").unlink()
    elsewhere.rename(repo / "ledger")
    led = _committed_line(repo)
    outside = tmp_path / "tiny.jsonl"
    led.path.rename(outside)
    led.path.symlink_to(outside)
    for check in (led.require_writable, lambda: require_anchorable(led)):
        with pytest.raises(UserError, match=r"^ledger/tiny\.jsonl is a symbolic link \(to .*\): git cannot commit "
                                            r"rows written through it — make ledger/tiny\.jsonl a real file"):
            check()
    r = run_bench(repo, "sweep", "tiny", "--device", "cpu", "--no-commit")
    assert r.returncode == 2 and "ledger/tiny.jsonl is a symbolic link" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (repo / "ledger" / "tiny.line.lock").exists()


def test_register_runs_the_test_commit_before_its_row_exists(repo, monkeypatch):
    """The row register writes is committed next, by the user, and every later row by bench: a
    hook that would refuse them refuses register, before the ledger (or its lock) exists."""
    from harness.governance import line as gl

    monkeypatch.chdir(repo)
    _hook(repo, "commit-msg", 'echo "commits need a ticket number" >&2\nexit 1\n')
    before = _git_state(repo)
    with pytest.raises(UserError, match=r"^git's commit-msg hook \(\.git/hooks/commit-msg\) refused a test commit of "
                                        r"ledger/tiny\.jsonl \(commits need a ticket number\): .* or register in a "
                                        r"clone you can commit to$"):
        gl.register("tiny", env={"host": "test"})
    assert _git_state(repo) == before and sorted(p.name for p in (repo / "ledger").iterdir()) == [".gitkeep"]
    (repo / ".git" / "hooks" / "commit-msg").unlink()
    assert gl.register("tiny", env={"host": "test"}).kind == "registered"
