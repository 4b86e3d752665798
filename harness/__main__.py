"""`python -m harness` is `bench`."""

from harness.cli import run

# Guarded: sweep workers are spawned processes, which import the parent's main module.
if __name__ == "__main__":
    run()
