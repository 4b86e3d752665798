"""bench's private bytecode cache: the only place a bench process reads (or writes) bytecode.

Python runs a ``__pycache__/*.pyc`` whose header matches its source's mtime and size (or any
UNCHECKED_HASH one) without reading the source, and ``harness/__init__.py`` is imported before
any of bench's own code can stop that (issue 47). With ``sys.pycache_prefix`` set, CPython
ignores every ``__pycache__`` of the source trees, for reading too, and keeps bytecode under
the prefix instead — here a directory bench creates, owned by the user, mode 0700, outside
any repository.

It must be set before the first import from the repository, so it is set by the ``.pth`` file
that ``pip install`` (editable or not) puts in site-packages (setup.py): at every Python start
it tests ``sys.argv`` and, for ``bench`` and ``python -m harness`` only, runs this file's
source (never bytecode) and ``install()``. Every Python a bench process starts inherits it
(``PYTHONPYCACHEPREFIX``). ``provenance.code.require_private_bytecode`` refuses a process that runs
without it. Standard library only: this file also runs before anything is importable.
"""

from __future__ import annotations

import os
import stat
import sys

# The environment variable CPython reads at start-up for sys.pycache_prefix: how the setting
# reaches every Python a bench process starts (spawned workers, bisect probes, ncu's worker).
PREFIX_ENV = "PYTHONPYCACHEPREFIX"
# The .pth file in site-packages that runs this file's source at start-up (setup.py installs it).
PTH_NAME = "bench-pycache.pth"
# Group and other permission bits: the cache holds code every bench process runs, so nobody
# but its owner may write — or enter — it (mode 0700).
SHARED_BITS = 0o077


def private_cache() -> str:
    """Where bench keeps bytecode: ``bench/pycache`` under the user's cache directory
    (``$XDG_CACHE_HOME`` where absolute, else ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "bench", "pycache")


def not_private(path: str) -> str | None:
    """Why ``path`` cannot hold bench's bytecode (a phrase), or None: it must be a directory,
    not a link, owned by this user, that no one else may enter."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & SHARED_BITS:
        return f"its mode is {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return None


def install() -> str | None:
    """Make bench's private cache this interpreter's bytecode cache and every child's (creating
    it, mode 0700, if missing). Returns why it could not, or None; never raises, since it
    runs inside Python's start-up, where a failure must not stop unrelated programs — the
    process is refused later (``provenance.code.require_private_bytecode``)."""
    path = private_cache()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"it cannot be created ({exc.strerror or exc})"
    why = not_private(path)
    if why is None:
        sys.pycache_prefix = path
        os.environ[PREFIX_ENV] = path
    return why


def started_as_bench(argv: list[str] | None = None, orig_argv: list[str] | None = None) -> bool:
    """Whether this interpreter was started to run bench: ``python -m harness`` (or one of its
    modules) or the ``bench`` console script."""
    argv = sys.argv if argv is None else argv
    orig_argv = sys.orig_argv if orig_argv is None else orig_argv
    if not argv:
        return False
    if argv[0] == "-m":  # until runpy replaces it; the module is the word before the arguments
        if len(orig_argv) < len(argv):
            return False
        word = orig_argv[-len(argv)]
        module = word.split("m", 1)[1] if word.startswith("-") else word  # `-mharness`, `-um harness`
        return module == "harness" or module.startswith("harness.")
    return os.path.basename(argv[0]) == "bench"


def pth_line() -> str:
    """The one line of bench's ``.pth`` file: at start-up, where ``sys.argv`` may name bench,
    run this file's source and ``install()``. Everything else a Python start pays is one
    comparison. The source is embedded (ASCII-escaped: a .pth is read in the locale's
    encoding), so nothing is read from a repository, nor any bytecode."""
    with open(__file__, encoding="utf-8") as f:
        source = f.read() + "\nif started_as_bench():\n    install()\n"
    return (f"import sys; exec({ascii(source)}, {{'__name__': 'bench_pycache'}}) "
            f"if (getattr(sys, 'argv', None) or [''])[0] == '-m' "
            f"or (getattr(sys, 'argv', None) or [''])[0].endswith('bench') else None\n")
