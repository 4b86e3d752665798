"""bench: a pre-registered benchmark harness for GPU kernels.

Rooms: ``governance`` (git guard, registration, bar language, ledger, verdict),
``measurement`` (timing, clocks, memory model, correctness, ceilings),
``workloads`` (shapes, FLOP/byte formulas, inputs, float64 references),
``sweep`` (plan and run a registered grid), ``reporting`` (renderers), ``cli`` (thin).
"""

__version__ = "0.1.0"


# -- only source runs ------------------------------------------------------------------------
# A `.pyc` in the repository's __pycache__ is not covered by the commit stamp, and Python runs
# one whose header matches (or any UNCHECKED_HASH one) without reading the source. So every
# later module of the code packages, in every bench process (spawned workers and Ray actors
# import this package first), is compiled from its source: no bytecode is read or written.
# This module itself is loaded before this runs: its cached bytecode, if any, is checked
# against its source (harness.governance.codeprov). It lives here, not in a submodule, so
# nothing else is loaded the ordinary way first.
import sys as _sys
from importlib.machinery import PathFinder as _PathFinder
from importlib.machinery import SourceFileLoader as _SourceFileLoader
from importlib.machinery import SourcelessFileLoader as _SourcelessFileLoader

SOURCE_ONLY_PACKAGES = ("harness", "kernels")


class SourceOnlyLoader(_SourceFileLoader):
    """A source loader that compiles the source every time: it never reads nor writes bytecode."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


class SourceOnlyFinder:
    """Finds the code packages' modules as Python would, and loads them from their source only."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] not in SOURCE_ONLY_PACKAGES:
            return None
        spec = _PathFinder.find_spec(name, path, target)
        if spec is None:
            return None
        if isinstance(spec.loader, _SourcelessFileLoader):
            raise ImportError(f"{spec.origin}: bytecode without its source — bench runs only source; delete it")
        if type(spec.loader) is _SourceFileLoader:
            spec.loader = SourceOnlyLoader(spec.loader.name, spec.loader.path)
        return spec


if not any(getattr(f, "__name__", None) == "SourceOnlyFinder" for f in _sys.meta_path):
    _sys.meta_path.insert(0, SourceOnlyFinder)
