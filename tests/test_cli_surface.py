"""Issue 51 item 6: run-time dependencies (scipy only in the test extra, typer and rich
bounded), plain option help, and shell completion of line ids."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO, bench_env, init_repo, TINY, run_bench

TYPE_LABEL = re.compile(r"<(bool|str|int|float|path|list\[str\]|text)>")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _name(req: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()


def test_scipy_is_a_test_dependency_only():
    project = _pyproject()["project"]
    assert "scipy" not in {_name(r) for r in project["dependencies"]}
    assert "scipy" in {_name(r) for r in project["optional-dependencies"]["test"]}


def test_typer_and_rich_have_bounded_ranges():
    deps = {_name(r): r for r in _pyproject()["project"]["dependencies"]}
    for name in ("typer", "rich"):
        assert ">=" in deps[name] and "<" in deps[name].replace("<=", "<"), deps[name]


def test_nothing_bench_runs_imports_scipy():
    offenders = []
    for top in ("harness", "kernels"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names
                              if n == "scipy" or n.startswith("scipy.")]
    assert offenders == []


# Runs `bench sweep` in one process (--inline) where `import scipy` fails: the README's first
# command installs without the test extra, so its sweep must not need scipy.
NO_SCIPY = """
import sys
class _NoScipy:
    def find_spec(self, name, path=None, target=None):
        if name == "scipy" or name.startswith("scipy."):
            raise ImportError("scipy is not installed (test)")
        return None
sys.meta_path.insert(0, _NoScipy())
from harness.cli import main
rc = main(sys.argv[1:])
assert not any(m == "scipy" or m.startswith("scipy.") for m in sys.modules)
sys.exit(rc)
"""


@pytest.mark.slow
def test_a_sweep_runs_without_scipy(tmp_path):
    repo = init_repo(tmp_path / "proj", {"tiny": TINY})
    assert run_bench(repo, "register", "registrations/tiny.toml").returncode == 0
    r = subprocess.run([sys.executable, "-c", NO_SCIPY, "sweep", "tiny", "--device", "cpu", "--inline",
                        "--no-ceilings"], cwd=repo, capture_output=True, text=True, timeout=600, env=bench_env())
    # 0, or 4 on a host too busy to time anything: either way the sweep ran to its end.
    assert r.returncode in (0, 4), r.stdout + r.stderr
    assert "scipy" not in r.stderr, r.stderr


def _commands() -> list[list[str]]:
    import typer

    from harness.cli import app

    group = typer.main.get_command(app)
    out = [[]]
    for name, cmd in group.commands.items():
        out.append([name])
        out += [[name, sub] for sub in (getattr(cmd, "commands", None) or {})]
    return out


def test_help_shows_no_type_labels():
    for words in _commands():
        r = run_bench(REPO, *words, "--help")
        assert r.returncode == 0, (words, r.stderr)
        assert not TYPE_LABEL.search(r.stdout), (words, TYPE_LABEL.search(r.stdout).group(0))


def test_shell_completion_offers_the_line_ids(tmp_path):
    repo = init_repo(tmp_path / "proj", {"tiny": TINY, "tinier": TINY})
    (repo / "ledger" / "_device_ceilings.jsonl").write_text("")
    (repo / "ledger" / "old-line.jsonl").write_text("")
    env = {**bench_env(), "_BENCH_COMPLETE": "complete_bash", "COMP_WORDS": "bench sweep ti", "COMP_CWORD": "2"}
    r = subprocess.run([sys.executable, "-m", "harness"], cwd=repo, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tinier", "tiny"]
    env.update(COMP_WORDS="bench ledger show ", COMP_CWORD="3")
    r = subprocess.run([sys.executable, "-m", "harness"], cwd=repo, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.stdout.split() == ["old-line", "tinier", "tiny"], r.stdout
    assert "--install-completion" in run_bench(repo, "--help").stdout
