"""Which code a bench process runs: the commit stamp covers only the checkout being measured.

A process that imports ``harness``/``bench_kernels`` (the ``kernels/`` folder) from another
checkout (an editable install of clone A run in clone B, ``PYTHONPATH``) runs code B's commit
does not hold; a ``.pyc`` planted in ``__pycache__`` runs code no commit holds.
Every bench process caches bytecode only in bench's private cache (``harness.pycache``, set
at start-up by bench's ``.pth``), so no ``__pycache__`` of a repository is read, and
``harness/__init__.py`` makes every later module of the two packages load from its source
only (``SourceOnlyLoader``); this module checks, in the driver and in every worker, that both
held and that the modules come from the repository.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from harness import CODE_PACKAGES  # import name -> repository folder: the code the commit stamp must cover
from harness import pycache
from harness.errors import UserError
from harness.provenance import git as gitguard
from harness import SourceOnlyLoader

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


def module_path(p: Path) -> str:
    """``p`` relative to the deepest import path holding it (``bench_kernels/sdpa.py`` of an installed
    bench, ``mypkg/attn.py`` of a plugin), else its file name: how a row names a file outside
    the repository without naming a directory of a machine."""
    f = Path(p).resolve()
    roots = [Path(e).resolve() for e in sys.path if e]
    held = [r for r in roots if f.is_relative_to(r)]
    return f.relative_to(max(held, key=lambda r: len(r.parts))).as_posix() if held else f.name


def _fix(top: Path) -> str:
    return f"run `python -m harness` from {top}, or `pip install -e .` there"


def require_from_repository(root: Path) -> None:
    """Refuse a code package loaded from outside the repository that holds bench (its
    ``harness/``): every loaded module of ``harness`` and ``bench_kernels`` must lie in the
    repository's folder for it (``harness/``, ``kernels/``)."""
    top = Path(root).resolve()
    if not (top / CODE_PACKAGES["harness"] / "__init__.py").is_file():
        return  # a repository of registrations and ledgers (its own kernels/ is not bench's): bench is installed
    files = loaded_files()
    for pkg, folder in CODE_PACKAGES.items():
        here = top / folder
        for name, path in sorted(files.items()):
            if name.partition(".")[0] == pkg and not path.is_relative_to(here):
                raise UserError(f"{name} is loaded from {path}, outside the repository being measured ({top}), "
                                f"whose commit would stamp the rows: {_fix(top)}")


def python_env_dirs(top: Path) -> set[Path]:
    """The Python environment's directories that lie inside the repository ``top`` (a
    ``.venv/`` there): the modules installed in them are an environment's, not the repository's."""
    import sysconfig

    env = set()
    for p in {sys.prefix, sys.exec_prefix, sys.base_prefix, *sysconfig.get_paths().values()}:
        q = Path(p).resolve()
        if q != top and q.is_relative_to(top):
            env.add(q)
    return env


def _pyc_holds(cached: Path, src: Path) -> bool:
    """Whether the ``.pyc`` at ``cached`` holds what ``src`` compiles to."""
    import marshal

    try:
        code = marshal.loads(Path(cached).read_bytes()[PYC_HEADER_BYTES:])
    except (ValueError, EOFError, TypeError):
        return False
    # Code objects compare by their bytecode, constants, names and line tables (not their file name).
    return code == compile(Path(src).read_bytes(), str(src), "exec", dont_inherit=True)


def _bytecode_matches(mod) -> bool:
    """Whether the module's cached ``.pyc``, if there is one, holds what its source compiles to."""
    cached, src = getattr(mod, "__cached__", None), getattr(mod, "__file__", None)
    if not cached or not src or not Path(cached).is_file() or not Path(src).is_file():
        return True
    return _pyc_holds(Path(cached), Path(src))


def own_bytecode(path: Path) -> bool:
    """Whether a file under a code package's ``__pycache__`` is this interpreter's cache of a
    source beside it, holding exactly what that source compiles to: the one bytecode Python
    itself writes there (for the packages' ``__init__``, loaded before the source-only loader
    exists). Anything else there — planted, stale, another interpreter's — is refused like
    any untracked file."""
    import importlib.util

    path = Path(path)
    if path.parent.name != "__pycache__" or not path.name.endswith(f".{sys.implementation.cache_tag}.pyc"):
        return False
    try:
        src = Path(importlib.util.source_from_cache(str(path)))
    except ValueError:
        return False
    return src.is_file() and _pyc_holds(path, src)


def require_source_loaded() -> None:
    """Refuse a code-package module that may have run from bytecode: each is loaded by the
    source-only loader, or (``harness`` itself, loaded before that loader existed) its cached
    bytecode is what its source compiles to. Only the source is in the commit."""
    for name, mod in sorted(code_modules().items()):
        spec = getattr(mod, "__spec__", None)
        if spec is None or isinstance(spec.loader, SourceOnlyLoader) or not getattr(mod, "__file__", None):
            continue  # __main__-less specs, namespace packages: no file to run from
        if not _bytecode_matches(mod):
            raise UserError(f"{name} may have run from {mod.__cached__}, bytecode its source {mod.__file__} does "
                            f"not compile to (no commit holds it): delete it and run again")


def require_private_bytecode(cache: str | None = None, root: Path | None = None) -> None:
    """Refuse a process that may have read bytecode from outside bench's private cache
    (``harness.pycache``): its ``sys.pycache_prefix`` must be ``cache`` (default: this user's
    private cache; a Ray actor is handed the driver's), a directory only this user may enter,
    outside the repository ``root``, set before ``harness`` was imported. Otherwise a ``.pyc``
    planted beside any source — ``harness/__init__.py`` included, imported before any check —
    may have run in its place. Then every Python this process starts gets the same cache
    (``PYTHONPYCACHEPREFIX``)."""
    want = cache or pycache.private_cache()
    fix = (f"start bench as `bench` or `python -m harness` where it is installed (`pip install -e .` puts "
           f"{pycache.PTH_NAME} in site-packages, which sets it; install again if bench was installed without "
           f"it), or with {pycache.PREFIX_ENV}={want}")
    have = sys.pycache_prefix
    why = pycache.not_private(want)
    shared = (f"bench's bytecode cache {want} is not private ({why}), so a .pyc planted there could run as "
              f"bench's code: remove it and run a bench command (it creates the cache anew, mode 0700)")
    if why is not None and os.path.lexists(want):  # what kept the .pth from setting it
        raise UserError(shared)
    if have != want:
        missing = "" if os.path.lexists(want) else ", which does not exist: bench creates it at start-up unless it " \
                                                    "cannot (then set XDG_CACHE_HOME to a directory of yours)"
        raise UserError(f"bench runs without its private bytecode cache (sys.pycache_prefix is "
                        f"{'unset' if have is None else have}, not {want}{missing}), so a .pyc planted beside its "
                        f"sources may have run as its code: {fix}")
    if why is not None:  # set by hand to a directory that does not exist
        raise UserError(shared)
    spec = getattr(sys.modules.get("harness"), "__spec__", None)
    cached = getattr(spec, "cached", None)
    if cached and not Path(cached).is_relative_to(want):
        raise UserError(f"harness was imported before bench's bytecode cache was set (its cache is {cached}), so a "
                        f"planted .pyc may have run as bench's code: {fix}")
    if root is not None and Path(want).resolve().is_relative_to(Path(root).resolve()):
        raise UserError(f"bench's bytecode cache {want} lies inside the repository {Path(root).resolve()}, whose "
                        f"files are the ones a commit vouches for: set XDG_CACHE_HOME to a directory outside it")
    os.environ[pycache.PREFIX_ENV] = want


def require_code_from(root: Path) -> tuple[dict, ...]:
    """Every check: the code packages come from ``root`` (where it holds them) or from an
    installed distribution, and from source, read by a process whose bytecode comes only
    from bench's private cache. Returns ``outside_code``'s record."""
    require_private_bytecode(root=root)
    require_from_repository(root)
    require_source_loaded()
    return outside_code(root)


# -- code from an installed distribution --------------------------------------------------------
# The commit stamp covers only the repository's own files: a code package it does not hold
# (bench installed beside a repository of registrations and ledgers, a kernels plugin) must
# come from an installed distribution, and every row records which one, its version and a
# digest of the package's files, so the row still names the code that ran.

def _file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def digest(files: dict[str, str]) -> str:
    """One SHA-256 over (relative path, file SHA-256) pairs, in path order."""
    import hashlib

    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def _is_bytecode(rel: str) -> bool:
    return "__pycache__" in rel.split("/") or rel.endswith((".pyc", ".pyo"))


def _record_hash(entry) -> str | None:
    """A RECORD entry's SHA-256 as hex (RECORD stores urlsafe base64), or None."""
    import base64

    h = getattr(entry, "hash", None)
    if h is None or h.mode != "sha256":
        return None
    return base64.urlsafe_b64decode(h.value + "=" * (-len(h.value) % 4)).hex()


def _editable_dir(dist) -> Path | None:
    """The source directory of an editable install (PEP 610 ``direct_url.json``), else None."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(info.get("url") or "")
    return Path(unquote(url.path)).resolve() if url.scheme == "file" else None


def distribution_record(dist, top: str | None, where: Path) -> dict:
    """Name, version and file digest of package (or module) ``top`` of an installed
    distribution (None: all its installed files), loaded from ``where`` (the ``__init__.py``
    or module file of what was imported; an editable install hashes that). A regular
    install's files must be the ones pip recorded (RECORD hashes); an editable install's are
    hashed where they lie. Bytecode is never counted: bench never runs it."""
    name, version = dist.metadata["Name"], dist.version
    editable = _editable_dir(dist) is not None
    files: dict[str, str] = {}
    if editable:
        unit = where.parent if where.name == "__init__.py" else where
        for f in sorted(unit.rglob("*")) if unit.is_dir() else [unit]:
            rel = f.relative_to(unit.parent).as_posix()
            if f.is_file() and not _is_bytecode(rel):
                files[rel] = _file_sha256(f)
    else:
        if dist.files is None:
            raise UserError(f"installed distribution {name} {version} has no RECORD: bench cannot tell whether its "
                            f"files are the ones installed — reinstall it with pip")
        for entry in dist.files:
            rel = entry.as_posix()
            if _is_bytecode(rel) or rel.startswith("../") or ".dist-info/" in rel:
                continue  # bytecode never runs; scripts and metadata are not code bench imports
            if top is not None and rel.split("/")[0] not in (top, f"{top}.py"):
                continue
            path = Path(dist.locate_file(entry))
            want = _record_hash(entry)
            have = _file_sha256(path) if path.is_file() else None
            if have is None or (want is not None and have != want):
                raise UserError(f"{rel} of the installed distribution {name} {version} is "
                                f"{'missing' if have is None else 'not the file pip installed (RECORD hash differs)'}"
                                f": bench would run code no release holds — `pip install --force-reinstall "
                                f"{name}=={version}`")
            files[rel] = have
    return {"name": name, "version": version, "editable": editable, "files": len(files), "sha256": digest(files)}


@functools.lru_cache(maxsize=1)
def _packages() -> dict:
    """Top-level package -> distributions that claim it. A scan of every installed
    distribution's file list (seconds where torch's dependencies are installed): once per process."""
    from importlib.metadata import packages_distributions

    return packages_distributions()


@functools.lru_cache(maxsize=1)
def _declared() -> dict:
    """Top-level package -> names of the distributions whose ``top_level.txt`` lists it: one
    small file per distribution, where ``_packages`` reads every file list (issue 32: seconds
    of each sweep's start on the H200's host)."""
    from importlib.metadata import distributions

    out: dict = {}
    for dist in distributions():
        for top in (dist.read_text("top_level.txt") or "").split():
            out.setdefault(top, []).append(dist.metadata["Name"])
    return out


def _distribution_holding(pkg: str, where: Path):
    """The installed distribution whose files hold package ``pkg`` at ``where``, else None:
    looked for among those that declare it first, then among every claimant."""
    found = _holding(pkg, where, _declared().get(pkg, []))
    return found if found is not None else _holding(pkg, where, _packages().get(pkg, []))


def _holding(pkg: str, where: Path, names):
    from importlib.metadata import distributions

    # Every installed copy of each distribution that claims the name (one may be on PYTHONPATH).
    for dist in (d for name in dict.fromkeys(names) for d in distributions(name=name)):
        src = _editable_dir(dist)
        if src is not None:
            if where.is_relative_to(src):
                return dist
            continue
        if dist.read_text("RECORD") is None:
            continue  # not installed by pip: e.g. the bench.egg-info an editable build leaves in the checkout
        for entry in dist.files or []:
            if entry.as_posix() in (f"{pkg}/__init__.py", f"{pkg}.py") and \
                    Path(dist.locate_file(entry)).resolve() == where:
                return dist
    return None


# (package, file it loads from) -> its record: a loaded module's code does not change under a
# running process, so its distribution is found and hashed once.
_OUTSIDE: dict[tuple[str, Path], dict] = {}


def outside_code(root: Path) -> tuple[dict, ...]:
    """For each code package this process loaded from outside the repository ``root``: the
    installed distribution it comes from (``distribution_record``); anything else — a
    directory on ``PYTHONPATH``, another checkout no installed distribution points at — is
    refused by path."""
    import importlib.util

    top = Path(root).resolve()
    out = []
    for pkg in CODE_PACKAGES:
        mod = sys.modules.get(pkg)  # loaded, or where it will be loaded from (kernels are imported later)
        f = getattr(mod, "__file__", None) if mod is not None else getattr(importlib.util.find_spec(pkg), "origin", None)
        if not isinstance(f, str):
            continue
        where = Path(f).resolve()
        if where.is_relative_to(top):
            continue  # the repository's own: the commit stamp covers it
        key = (pkg, where)
        if key in _OUTSIDE:  # hashed once per process: workers check their code again after every config
            out.append(_OUTSIDE[key])
            continue
        dist = _distribution_holding(pkg, where)
        if dist is None:
            raise UserError(f"{pkg} is loaded from {where.parent}, which neither this repository ({top}) nor any "
                            f"installed distribution holds, so no row could name the code that ran: install it "
                            f"(`pip install -e {where.parent.parent}` or `pip install bench`), or run bench from "
                            f"that checkout")
        _OUTSIDE[key] = {"package": pkg, **distribution_record(dist, pkg, where)}
        out.append(_OUTSIDE[key])
    return tuple(out)


# -- a module named in a registration --------------------------------------------------------
# A registration may name code to run (``[integration] step = "module:function"``): like the
# kernels, it must be code a row can name — committed in the repository, or installed by a
# distribution the rows record — checked before anything of it is imported.

def _find_spec(name: str, path):
    """The spec the import system would use for ``name`` (``path``: its parent package's
    search locations), found without importing anything."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, path, None) if find is not None else None
        if spec is not None:
            return spec
    return None


def module_files(module: str, what: str) -> list[Path]:
    """The files importing ``module`` would run — each package's ``__init__`` along its dotted
    name, then the module's own — found without importing any of them. A module with no
    source file (built into Python, frozen, a bare namespace) or that cannot be found is refused."""
    files, path = [], None
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        loaded = sys.modules.get(name)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else _find_spec(name, path)
        if spec is None:
            raise UserError(f"{what}: cannot import {name} (no such module): commit the module in the repository, "
                            f"or fix the name")
        has_file = bool(spec.has_location and spec.origin)
        if has_file:
            files.append(Path(spec.origin).resolve())
        if i == len(parts) - 1 and not has_file:
            raise UserError(f"{what}: {name} has no source file (built into Python, frozen, or a bare namespace), "
                            f"so no commit or installed package names its code: name a module committed in the "
                            f"repository")
        if i < len(parts) - 1:
            if spec.submodule_search_locations is None:
                raise UserError(f"{what}: {name} is a module, not a package holding {parts[i + 1]}: fix the name")
            path = list(spec.submodule_search_locations)
    return files


def module_code(root: Path, module: str, what: str) -> tuple[dict, ...]:
    """Refuse ``module`` unless the commit stamp or an installed distribution covers every file
    importing it would run (``module_files``): those inside the repository (outside a Python
    environment living there) must be tracked and unchanged at HEAD; those outside must be an
    installed distribution's, whose record (``{"package", ...distribution_record}``, as
    ``outside_code`` records a code package) is returned for the rows to carry — () where the
    repository holds it all. The standard library, a directory only ``PYTHONPATH`` names and an
    uncommitted file are refused by name: no row could say what ran."""
    top = Path(root).resolve()
    env = python_env_dirs(top)
    files = module_files(module, what)
    inside = [f for f in files if f.is_relative_to(top) and not any(f.is_relative_to(e) for e in env)]
    bad = gitguard.unverified_files(top, [f.relative_to(top).as_posix() for f in inside])
    if bad:
        raise UserError(f"{what}: {gitguard.listed(bad)} is not committed as it is, so no commit stamp covers the "
                        f"code it runs: commit it (or delete it), then run the command again")
    if len(inside) == len(files):
        return ()
    pkg = module.partition(".")[0]
    dist = _distribution_holding(pkg, files[0])
    if dist is None or inside:
        where = next(f for f in files if f not in inside)
        raise UserError(f"{what}: {module} is loaded from {where}, which neither this repository's commit nor an "
                        f"installed distribution covers, so no row could name the code that ran: commit the module "
                        f"in the repository (e.g. kernels/), or install the package that holds it with pip")
    return ({"package": pkg, **distribution_record(dist, pkg, files[0])},)
