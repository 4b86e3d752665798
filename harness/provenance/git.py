"""The git guard: no number is produced from a tree that differs from a commit.

This module is the one name the rest of bench imports git's answers by (``from
harness.provenance import git as gitguard``); the work is done in four rooms:
``gitcmd`` (running git, its locks), ``tree_state`` (the work tree against its commit: the
stamp rows carry), ``ledger_commits`` (bench's commits of ledger files and the checks that git
will take them) and ``commits`` (reading history: files as committed, revisions, worktrees).
"""

from __future__ import annotations

from harness.provenance.commits import (blobs, code_commits_between, deleted_files, file_history, files_at_head,
                                        is_ancestor, last_commit_holding, remove_worktree, resolve_commit,
                                        show_file, subject, worktree)
from harness.provenance.gitcmd import head_commit, repo_root
from harness.provenance.ledger_commits import (commit_file, require_committable, require_git_writable,
                                               require_ledger_commits, require_real_path)
from harness.provenance.tree_state import (LEDGER_DIR, CleanTree, code_commit, dirty_paths, file_commit,
                                           has_uncommitted, is_ignored, listed, relative, require_clean,
                                           shallow_boundary, unverified_files, untracked_files)

__all__ = [
    "LEDGER_DIR", "CleanTree", "blobs", "code_commit", "code_commits_between", "commit_file", "deleted_files",
    "dirty_paths", "file_commit", "file_history", "files_at_head", "has_uncommitted", "head_commit",
    "is_ancestor", "is_ignored", "last_commit_holding", "listed", "relative", "remove_worktree",
    "repo_root", "require_clean", "require_committable", "require_git_writable", "require_ledger_commits",
    "require_real_path", "resolve_commit", "shallow_boundary", "show_file", "subject", "unverified_files",
    "untracked_files", "worktree",
]
