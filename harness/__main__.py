"""`python -m harness` is `bench`."""

from harness.cli import run

run()
