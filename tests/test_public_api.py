"""The library surface: ``harness.__all__``, and the only names of harness that research/ and
the docs' examples import (issue 49, item 7).

Each research/*.py is parsed whole; each ```python block of docs/*.md (and the README) too, or,
where a block is a fragment that is no Python by itself (a signature), line by line: every
``import harness.x`` / ``from harness.x import`` and every ``from harness import N`` or
``harness.N`` whose N is not in ``harness.__all__`` is named with its file and line.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from tests.conftest import REPO, bench_env

RESEARCH = sorted((REPO / "research").glob("*.py"))
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "research" / "README.md"]
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)
IMPORT_LINE = re.compile(r"^\s*(from\s+\S+\s+import\b|import\s)")


def outside_surface(tree: ast.AST, public=frozenset(harness.__all__)) -> list[tuple[int, str]]:
    """(line, what) for every use of harness in ``tree`` that is not a name of ``harness.__all__``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("harness.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("harness."):
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "harness":
                found += [(node.lineno, f"from harness import {a.name}") for a in node.names if a.name not in public]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "harness":
            if node.attr not in public:
                found.append((node.lineno, f"harness.{node.attr}"))
    return found


def doc_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line, code) of every ```python block in the Markdown file ``path``."""
    text = path.read_text()
    return [(text[:m.start(1)].count("\n") + 1, m.group(1)) for m in PYTHON_BLOCK.finditer(text)]


def block_uses(first: int, code: str) -> list[tuple[int, str]]:
    """``outside_surface`` of one block, its lines numbered as in the Markdown file."""
    try:
        return [(first + n - 1, what) for n, what in outside_surface(ast.parse(code))]
    except SyntaxError:  # a fragment (the kernel signature): its import lines, each parsed alone
        found = []
        for n, line in enumerate(code.splitlines(), first):
            if IMPORT_LINE.match(line):
                found += [(n, what) for _, what in outside_surface(ast.parse(line.strip()))]
        return found


def test_every_public_name_resolves_to_the_object_its_module_defines():
    assert harness.__all__ == sorted(harness.PUBLIC_API) and len(set(harness.__all__)) == len(harness.__all__)
    for name, (module, attr) in harness.PUBLIC_API.items():
        assert getattr(harness, name) is getattr(importlib.import_module(module), attr), name
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        harness.no_such_name  # noqa: B018


def test_the_surface_does_the_four_things_it_promises():
    # load a registration, read a ledger's rows, run one config, measure a callable
    assert {"load_registration", "registration_from_table", "ledger_path", "read_rows", "latest_outcomes",
            "Config", "SweepContext", "run_config", "measure", "TimingPolicy", "HostTimer"} <= set(harness.__all__)
    assert {"kernel", "KernelSpec", "get_kernel", "load_kernels", "UserError"} <= set(harness.__all__)


def test_import_harness_loads_no_torch_and_the_surface_only_on_use():
    code = ("import sys, harness; print('torch' in sys.modules, [m for m in ('harness.registry', 'harness.pipeline.run', "
            "'harness.measurement.timing', 'harness.registration.schema') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == ["False", "[]"], r.stdout + r.stderr


@pytest.mark.parametrize("path", RESEARCH, ids=lambda p: p.name)
def test_research_imports_only_the_library_surface(path):
    uses = outside_surface(ast.parse(path.read_text(), str(path)))
    assert uses == [], [f"{path.name}:{n}: {what}" for n, what in uses]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_docs_examples_import_only_the_library_surface(path):
    uses = [u for first, code in doc_blocks(path) for u in block_uses(first, code)]
    assert uses == [], [f"{path.name}:{n}: {what}" for n, what in uses]


def test_the_check_sees_every_way_past_the_surface(tmp_path):
    tree = ast.parse("import harness.registry\nfrom harness.workloads import Config\nfrom harness import kernel, "
                     "_REGISTRY\nimport harness\nharness.CODE_PACKAGES\nharness.kernel\nfrom harness import Config\n")
    assert outside_surface(tree) == [(1, "import harness.registry"), (2, "from harness.workloads import ..."),
                                     (3, "from harness import _REGISTRY"), (5, "harness.CODE_PACKAGES")]
    page = tmp_path / "page.md"  # a fragment that is no Python, then an import past the surface
    page.write_text("text\n\n```python\nfn(q, *, causal: bool) -> None\nfrom harness.errors import UserError\n```\n")
    assert [u for first, code in doc_blocks(page) for u in block_uses(first, code)] == \
        [(5, "from harness.errors import ...")]


@pytest.mark.slow
def test_the_architecture_page_s_example_runs_on_the_cpu():
    """docs/architecture.md's library-surface example, as written, at the repository root (one
    config of the example line through every stage, on the CPU: tens of seconds)."""
    (code,) = [code for _, code in doc_blocks(REPO / "docs" / "architecture.md") if "load_registration" in code]
    r = subprocess.run([sys.executable, "-c", code + "\nprint(type(m).__name__, [o.kind for o in outcomes])"],
                       cwd=REPO, capture_output=True, text=True, timeout=600, env=bench_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "Measurement", r.stdout
