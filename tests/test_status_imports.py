"""Issue 51 item 2: `bench status` stays quick by what it imports, not by a timed test (a
shared host's timings are noise). Once every line's row is stored beside its ledger's clean
verification (analysis/verify_cache.py), a status reads them back (analysis/status_view.py)
and loads none of the checks that made them, nor pydantic (typer's coercion of a str or
bool option: harness/cli's ``_Plain``), nor any array or plotting library."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, bench_env

# What a status with every row stored must not import: third-party packages (by top-level
# name) and the harness modules of a row's full check (a package stands for its modules). The
# ledger verification is not among them: the history verifies a re-opened or GONE ledger's
# committed rows (ledger.verify, and the bar parser and workload registry it reaches).
NOT_FOR_STATUS = ("pydantic", "pydantic_core", "pandas", "numpy", "matplotlib", "torch", "scipy", "pyarrow",
                  "harness.reporting.analysis.status", "harness.reporting.analysis.replication",
                  "harness.governance", "harness.registration.schema", "harness.execution", "harness.pipeline")
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)


def _bench(cache: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`python -X importtime -m harness ARGS` in this repository, with its caches under
    ``cache``: the result and every module it imported."""
    env = {**bench_env(), "XDG_CACHE_HOME": str(cache)}
    env.pop("PYTHONPYCACHEPREFIX", None)  # bench's .pth sets it under ``cache``
    env.pop("BENCH_NO_VERIFY_CACHE", None)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=600, env=env)
    return r, set(IMPORTED.findall(r.stderr))


def _offenders(modules: set[str]) -> list[str]:
    return sorted(m for m in modules for bad in NOT_FOR_STATUS if m == bad or m.startswith(bad + "."))


def test_a_status_with_every_row_stored_imports_no_check_nor_heavy_library(tmp_path):
    first, checked = _bench(tmp_path, "status")
    assert first.returncode == 0, first.stderr[-3000:]
    # The first status checks every line in full (nothing stored yet) and stores its rows.
    assert "harness.reporting.analysis.status" in checked
    again, modules = _bench(tmp_path, "status")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == first.stdout
    assert "harness.reporting.analysis.status_view" in modules
    assert _offenders(modules) == []
    lineage, modules = _bench(tmp_path, "status", "--lineage", "--format", "table")
    assert lineage.returncode == 0, lineage.stderr[-3000:]
    assert _offenders(modules) == []


def test_help_imports_no_pydantic(tmp_path):
    r, modules = _bench(tmp_path, "--help")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "typer" in modules and not {"pydantic", "pydantic_core"} & modules
