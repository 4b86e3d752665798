"""The git guard on real temporary repositories."""

from __future__ import annotations

import subprocess

import pytest

from harness.errors import UserError
from harness.governance import gitguard
from tests.conftest import git


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
