"""What pyproject.toml cannot say: the kernels/ folder installs as the package ``bench_kernels``.

An installed bench must not claim the top-level import name ``kernels`` (Hugging Face's
kernel loader has it), and pyproject's ``packages.find`` cannot rename a folder. Everything
else is in pyproject.toml.
"""

from setuptools import find_packages, setup

# Import name -> folder; harness.CODE_PACKAGES says the same (tests/test_registry.py checks).
PACKAGE_DIR = {"bench_kernels": "kernels"}
PACKAGES = [*find_packages(include=["harness", "harness.*"]), *PACKAGE_DIR]

if __name__ == "__main__":
    setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
