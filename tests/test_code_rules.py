"""The code's size, complexity and type rules, run in CI as a test: ``ruff check harness``
(the rules in pyproject.toml's [tool.ruff]: cyclomatic complexity, arguments per function),
a size check of every function and module, and ``mypy`` ([tool.mypy]). A long function or
module is where a change's reader loses the thread; the limits make splitting the default."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "harness"
# A function's lines (its decorators and docstring included), outside harness/cli/.
MAX_FUNCTION_LINES = 80
# A module's lines, every module of harness/.
MAX_MODULE_LINES = 500
# The command layer builds one typer command per function, a parameter per option: exempt.
EXEMPT_DIR = PACKAGE / "cli"
# ruff and mypy each take seconds; a hung one fails the test rather than CI's whole run.
TOOL_TIMEOUT_S = 300


def _tool(module: str, *args: str) -> tuple[int, str]:
    """Run ``python -m module args`` from the repository root: its exit status and output."""
    try:
        res = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 1, f"{module} ran past {TOOL_TIMEOUT_S} s"
    if res.returncode != 0 and f"No module named {module}" in res.stderr:
        return 1, f"{module} is not installed: pip install -e '.[test]' brings it"
    return res.returncode, res.stdout + res.stderr


def _size_offenders() -> list[str]:
    """Modules over MAX_MODULE_LINES, and functions outside harness/cli/ over MAX_FUNCTION_LINES."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            out.append(f"{rel}: module of {n} lines (> {MAX_MODULE_LINES})")
        if EXEMPT_DIR in path.parents:
            continue
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = (node.end_lineno or node.lineno) - start + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{rel}:{start}: function {node.name} of {n} lines (> {MAX_FUNCTION_LINES})")
    return out


def _ruff_offenders() -> list[str]:
    rc, said = _tool("ruff", "check", "harness", "--output-format", "concise", "--no-cache")
    if rc == 0:
        return []
    found = [line for line in said.splitlines() if line.startswith("harness/")]
    return found or [f"ruff check harness failed: {said.strip()}"]


def _mypy_offenders(cache: Path) -> list[str]:
    rc, said = _tool("mypy", "--cache-dir", str(cache))
    if rc == 0:
        return []
    found = [line for line in said.splitlines() if ": error:" in line]
    return found or [f"mypy failed: {said.strip()}"]


def test_harness_meets_the_size_complexity_and_type_rules(tmp_path):
    offenders = {
        f"size (functions <= {MAX_FUNCTION_LINES} lines outside harness/cli/, modules <= {MAX_MODULE_LINES})":
            _size_offenders(),
        "ruff check harness (complexity, arguments: pyproject.toml [tool.ruff])": _ruff_offenders(),
        "mypy (pyproject.toml [tool.mypy])": _mypy_offenders(tmp_path / "mypy-cache"),
    }
    report = [f"{rule}:\n  " + "\n  ".join(found) for rule, found in offenders.items() if found]
    if report:
        pytest.fail("harness/ breaks the code rules — split or fix each offender:\n" + "\n".join(report), pytrace=False)


def test_the_size_check_names_a_long_function_and_module(tmp_path, monkeypatch):
    """The size check finds what it should: a long function, a long module, and not harness/cli/."""
    pkg = tmp_path / "harness"
    (pkg / "cli").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def long_one():\n{body}\n")
    (pkg / "cli" / "cmd.py").write_text(f"def command():\n{body}\n")
    (pkg / "big.py").write_text("\n".join(f"Y{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    monkeypatch.setattr(sys.modules[__name__], "EXEMPT_DIR", pkg / "cli")
    found = _size_offenders()
    assert found == [f"harness/big.py: module of {MAX_MODULE_LINES + 1} lines (> {MAX_MODULE_LINES})",
                     f"harness/long.py:1: function long_one of {MAX_FUNCTION_LINES + 1} lines (> {MAX_FUNCTION_LINES})"]
