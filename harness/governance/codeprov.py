"""Which code a bench process runs: the commit stamp covers only the checkout being measured.

A process that imports ``harness``/``kernels`` from another checkout (an editable install of
clone A run in clone B, ``PYTHONPATH``) runs code B's commit does not hold; a ``.pyc`` planted
in ``__pycache__`` runs code no commit holds. ``harness/__init__.py`` makes every later module
of the two packages load from its source only (``SourceOnlyLoader``); this module checks, in
the driver and in every worker, that it did and that the modules come from the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.errors import UserError

# The packages whose code the commit stamp must cover.
CODE_PACKAGES = ("harness", "kernels")
# Where a pyc's code object starts: magic, flags and two 4-byte fields (PEP 552).
PYC_HEADER_BYTES = 16


def code_modules() -> dict[str, object]:
    """The loaded modules of the code packages, by name."""
    return {name: mod for name, mod in list(sys.modules.items())
            if mod is not None and name.partition(".")[0] in CODE_PACKAGES}


def loaded_files() -> dict[str, Path]:
    """The resolved files of the loaded code-package modules, by module name (the Ray actors
    hash these; the driver and local workers check where they lie)."""
    out = {}
    for name, mod in code_modules().items():
        f = getattr(mod, "__file__", None)
        if isinstance(f, str):
            out[name] = Path(f).resolve()
    return out


def _fix(top: Path) -> str:
    return f"run `python -m harness` from {top}, or `pip install -e .` there"


def require_from_repository(root: Path) -> None:
    """Refuse a code package loaded from outside the repository that holds it: for each of
    ``harness``/``kernels`` that the repository holds, every loaded module must lie in it."""
    top = Path(root).resolve()
    files = loaded_files()
    for pkg in CODE_PACKAGES:
        here = top / pkg
        if not (here / "__init__.py").is_file():
            continue  # this repository holds no such package: it comes from elsewhere (an installed bench)
        for name, path in sorted(files.items()):
            if name.partition(".")[0] == pkg and not path.is_relative_to(here):
                raise UserError(f"{name} is loaded from {path}, outside the repository being measured ({top}), "
                                f"whose commit would stamp the rows: {_fix(top)}")


def _bytecode_matches(mod) -> bool:
    """Whether the module's cached ``.pyc``, if there is one, holds what its source compiles to."""
    import marshal

    cached, src = getattr(mod, "__cached__", None), getattr(mod, "__file__", None)
    if not cached or not src or not Path(cached).is_file() or not Path(src).is_file():
        return True
    try:
        code = marshal.loads(Path(cached).read_bytes()[PYC_HEADER_BYTES:])
    except (ValueError, EOFError, TypeError):
        return False
    # Code objects compare by their bytecode, constants, names and line tables (not their file name).
    return code == compile(Path(src).read_bytes(), src, "exec", dont_inherit=True)


def require_source_loaded() -> None:
    """Refuse a code-package module that may have run from bytecode: each is loaded by the
    source-only loader, or (``harness`` itself, loaded before that loader existed) its cached
    bytecode is what its source compiles to. Only the source is in the commit."""
    from harness import SourceOnlyLoader

    for name, mod in sorted(code_modules().items()):
        spec = getattr(mod, "__spec__", None)
        if spec is None or isinstance(spec.loader, SourceOnlyLoader) or not getattr(mod, "__file__", None):
            continue  # __main__-less specs, namespace packages: no file to run from
        if not _bytecode_matches(mod):
            raise UserError(f"{name} may have run from {mod.__cached__}, bytecode its source {mod.__file__} does "
                            f"not compile to (no commit holds it): delete it and run again")


def require_code_from(root: Path) -> None:
    """Every check: the code packages come from ``root`` (where it holds them) and from source."""
    require_from_repository(root)
    require_source_loaded()
