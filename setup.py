"""What pyproject.toml cannot say: the kernels/ folder installs as the package ``bench_kernels``,
and every install — editable or not — puts bench's ``.pth`` file in site-packages.

An installed bench must not claim the top-level import name ``kernels`` (Hugging Face's
kernel loader has it), and pyproject's ``packages.find`` cannot rename a folder. The folder
has no ``__init__.py`` (so a checkout does not shadow Hugging Face's ``kernels`` either): a
regular wheel gets one written here (``KERNELS_INIT``), so the installed ``bench_kernels`` is
a package whose ``__init__.py`` its RECORD names, as a row's ``code`` record finds it; an
editable install maps the folder as a namespace (setuptools' finder), and ``harness``'s own
finder does the same in a checkout.

The ``.pth`` (harness/pycache.py) sets bench's private bytecode cache at Python's start-up,
before ``bench`` or ``python -m harness`` imports anything from the repository: nothing
later can stop Python from running a ``.pyc`` planted beside ``harness/__init__.py``. A
regular wheel gets it from ``build_py``; an editable one (PEP 660) holds only what
setuptools' editable strategy writes, so the strategy is wrapped to write it too.
Everything else is in pyproject.toml.
"""

import runpy
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

# Import name -> folder; harness.CODE_PACKAGES says the same (tests/test_registry.py checks).
PACKAGE_DIR = {"bench_kernels": "kernels"}
PACKAGES = [*find_packages(include=["harness", "harness.*"]), *PACKAGE_DIR]
# The installed bench_kernels/__init__.py of a regular wheel (the folder holds none).
KERNELS_INIT = ('"""bench\'s shipped kernels (the repository\'s kernels/ folder), loaded through bench\'s own '
                '`bench.kernels` entry point: docs/kernels.md."""\n')
# The module whose source the .pth runs (read here as source: nothing of bench is imported).
PYCACHE_MODULE = Path(__file__).resolve().parent / "harness" / "pycache.py"


def pth_file() -> tuple[str, str]:
    """(name, text) of bench's .pth file."""
    module = runpy.run_path(str(PYCACHE_MODULE))
    return module["PTH_NAME"], module["pth_line"]()


class build_py_with_pth(build_py):
    """A regular wheel: the .pth at the root of build_lib, which installs into site-packages,
    and bench_kernels/__init__.py."""

    def check_package(self, package, package_dir):
        if package in PACKAGE_DIR:  # no __init__.py in the folder: run() writes the wheel's
            return None
        return super().check_package(package, package_dir)

    def run(self):
        super().run()
        if not self.editable_mode:  # an editable wheel is written by its strategy (below)
            name, text = pth_file()
            Path(self.build_lib, name).write_text(text, encoding="ascii")
            for package in PACKAGE_DIR:
                Path(self.build_lib, package, "__init__.py").write_text(KERNELS_INIT, encoding="ascii")


class _WithPth:
    """setuptools' own editable strategy (a finder or a path .pth), plus bench's .pth."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        name, text = pth_file()
        wheel.writestr(name, text.encode("ascii"))


class editable_wheel_with_pth(editable_wheel):
    """An editable wheel that holds bench's .pth; refuses to build one without it."""

    def run(self):
        if not callable(getattr(editable_wheel, "_select_strategy", None)):
            raise RuntimeError("this setuptools has no editable_wheel._select_strategy, so an editable bench would "
                               "lack its .pth (harness/pycache.py): build with a setuptools that has it (64 to 84 do), "
                               "or install without -e")
        super().run()

    def _select_strategy(self, *args, **kwargs):
        return _WithPth(super()._select_strategy(*args, **kwargs))


if __name__ == "__main__":
    setup(packages=PACKAGES, package_dir=PACKAGE_DIR,
          cmdclass={"build_py": build_py_with_pth, "editable_wheel": editable_wheel_with_pth})
