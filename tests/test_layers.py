"""The rooms' layers (docs/architecture.md, "Layers"): one ordered list, top first; a module
imports only from its own layer and the layers below it. Every import is read — at module
top, under ``if``/``try``, and inside functions — so a lazy import cannot point up either
(issue 49). And harness's own modules are imported at module top (issue 49, item 2): an
import of a harness module inside a function fails, except one of a module that imports a
heavy library (torch, triton, cupy, ray, matplotlib, jinja2) at its own top — importing it
is importing that library — and except where the documented allowlist (a room, or a module's
function: ``path::function``) says why.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Libraries imported only inside functions: their import takes seconds, or drags in a GPU stack.
HEAVY = ("torch", "triton", "cupy", "ray", "matplotlib", "jinja2")
ARCHITECTURE = REPO / "docs" / "architecture.md"
BLOCK = re.compile(r"<!-- (?P<name>[a-z-]+): begin -->\n```text\n(?P<body>.*?)```\n<!-- (?P=name): end -->", re.S)


def _block(name: str) -> list[str]:
    """The lines of the delimited block ``name`` of docs/architecture.md, comments dropped."""
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(ARCHITECTURE.read_text(encoding="utf-8"))}
    assert name in blocks, f"docs/architecture.md has no '<!-- {name}: begin -->' block"
    return [line.split("#", 1)[0].strip() for line in blocks[name].splitlines() if line.split("#", 1)[0].strip()]


def layers() -> dict[str, int]:
    """Module prefix -> its layer's height (0 the bottom)."""
    rows = _block("layers")
    return {prefix: len(rows) - 1 - i for i, row in enumerate(rows) for prefix in row.split()}


def lazy_allowed() -> list[str]:
    """Path prefixes (relative to the repository) whose function-level harness imports are allowed."""
    return [row.split()[0] for row in _block("lazy-imports")]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((REPO / "harness").rglob("*.py"))}


def layer_of(module: str, table: dict[str, int]) -> tuple[str, int]:
    """The longest prefix of ``module`` (on dots) the layer list names, and its height."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in table:
            return prefix, table[prefix]
    raise AssertionError(f"{module} is in no layer of docs/architecture.md")


def imports(path: Path, module: str | None = None, everything: bool = False):
    """(line, target module, the enclosing function or None) for every import of a harness
    module in ``path`` (the module ``module``, by default the one its path names); of every
    module, harness's or not, with ``everything``."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or (child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else
                                     "<lambda>" if isinstance(child, ast.Lambda) else None)
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for a in child.names:  # `from pkg import module` imports the module
                    found.append((child.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base,
                                  in_function))
            visit(child, nested)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return [(line, target, fn) for line, target, fn in found if everything or target.split(".")[0] == "harness"]


@functools.cache
def heavy_at_top(module: str) -> bool:
    """Whether ``module`` imports a heavy library at its own top (a Triton kernel module, Ray's executor)."""
    return any(fn is None and target.split(".")[0] in HEAVY for _, target, fn in imports(MODULES[module], everything=True))


def test_every_module_has_a_layer():
    table = layers()
    for name in MODULES:
        layer_of(name, table)
    unknown = [prefix for prefix in table if prefix not in MODULES]
    assert unknown == [], f"the layer list names modules that do not exist: {unknown}"


def test_no_import_points_up_a_layer():
    table = layers()
    upward = []
    for name, path in MODULES.items():
        src, height = layer_of(name, table)
        for line, target, _ in imports(path):
            dst, target_height = layer_of(target, table)
            if target_height > height:
                upward.append(f"{path.relative_to(REPO)}:{line}: {name} (layer {src}) imports {target} (layer {dst}, above)")
    assert upward == [], "imports that point up the layers:\n" + "\n".join(upward)


def test_harness_imports_are_at_module_top():
    allowed = lazy_allowed()
    lazy = []
    for name, path in MODULES.items():
        rel = path.relative_to(REPO).as_posix()
        if any(rel.startswith(prefix) for prefix in allowed if "::" not in prefix):
            continue
        lazy += [f"{rel}:{line}: {target} imported inside {fn}()" for line, target, fn in imports(path)
                 if fn is not None and f"{rel}::{fn}" not in allowed and not heavy_at_top(target)]
    assert lazy == [], ("harness modules imported inside functions (move them to the module top, or name the room "
                        "in docs/architecture.md's lazy-imports block with the reason):\n" + "\n".join(lazy))


def test_the_allowlist_names_only_what_exists():
    for entry in lazy_allowed():
        path, _, function = entry.partition("::")
        assert (REPO / path).exists(), f"lazy-imports block names {path}, which does not exist"
        if function:
            assert any(fn == function for _, _, fn in imports(REPO / path)), \
                f"lazy-imports block names {entry}, which imports no harness module inside that function"


def test_the_layer_test_sees_an_upward_lazy_import(tmp_path):
    """The test itself: a function-level import that points up is found, with file:line and both layers."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from harness.cli import app\n", encoding="utf-8")
    [(line, target, fn)] = imports(source, "harness.vocab.probe")
    assert (line, target, fn) == (2, "harness.cli", "f")
    table = layers()
    assert layer_of(target, table)[1] > layer_of("harness.vocab.probe", table)[1]



# docs/architecture.md draws the tree and the layer list this test reads: short enough to read
# in one sitting (issue 49).
ARCHITECTURE_MAX_LINES = 250


def test_the_architecture_page_stays_short():
    lines = (REPO / "docs" / "architecture.md").read_text().splitlines()
    assert len(lines) <= ARCHITECTURE_MAX_LINES, \
        f"docs/architecture.md is {len(lines)} lines (> {ARCHITECTURE_MAX_LINES}): tighten it or move detail to its own page"
