"""research/: outside the installed package, public imports only, every script runs."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, bench_env

SCRIPTS = sorted(p for p in (REPO / "research").glob("*.py") if p.name != "__init__.py")
# Modules of this project whose private names research must not use.
PROJECT = ("harness", "bench_kernels", "research")


def _private_uses(path) -> list[str]:
    """Private modules or names of this project imported by ``path``, and sys.path edits."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
            names = []
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            found.append(f"line {node.lineno}: sys.path")
            continue
        else:
            continue
        for mod in mods:
            parts = mod.split(".")
            if parts[0] not in PROJECT:
                continue
            if any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
                found.append(f"line {node.lineno}: {mod} {names}")
    return found


def test_research_is_not_installed(monkeypatch):
    import runpy

    monkeypatch.chdir(REPO)  # setup.py finds the packages from the project root, as a build does
    packages = runpy.run_path(str(REPO / "setup.py"), run_name="packages")["PACKAGES"]
    assert "harness.governance" in packages and "bench_kernels" in packages, packages
    assert not any(p.partition(".")[0] in ("research", "kernels", "tests") for p in packages), packages


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_research_imports_nothing_private(path):
    assert _private_uses(path) == []


# What a script of its own correctness criterion would hold: a tolerance, a closeness test, a
# relative error, or a reference computed outside the harness's gate.
OWN_CRITERION = re.compile(r"\bTOLERANCE\b|allclose|isclose|rel_err|measurement\.reference import")


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_research_judges_correctness_only_through_the_harness(path):
    """A kernel a script times has passed the harness's own gate (research/bench_decode.py
    ``gated``, a sweep's pipeline): no script decides by a criterion of its own."""
    found = [f"line {n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
             if OWN_CRITERION.search(line)]
    assert found == [], found


def test_the_check_sees_a_private_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, '.')\nfrom harness.registry import _REGISTRY\n"
                   "from bench_kernels.triton_decode import _supports\nimport torch._dynamo\n")
    assert sorted(f.split(":")[0] for f in _private_uses(bad)) == ["line 2", "line 3", "line 4"]


@pytest.mark.parametrize("path", [p for p in SCRIPTS if "argparse" in p.read_text()], ids=lambda p: p.name)
def test_research_script_help_runs(path):
    r = subprocess.run([sys.executable, "-m", f"research.{path.stem}", "--help"], cwd=REPO, capture_output=True,
                       text=True, timeout=300, env=bench_env())
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr


def _page_section() -> str:
    from research.results_page import BEGIN, END, PAGE

    page = (REPO / PAGE).read_text()
    return page.split(BEGIN, 1)[1].split(END, 1)[0]


@pytest.fixture(scope="module")
def page_root(tmp_path_factory) -> Path:
    """The ledgers and registrations as of the commit that last wrote the results page.

    The page states what the ledgers held when it was written and committed: a sweep run in
    this checkout since (the README's first command sweeps the example) moves the ledgers on
    without making the page wrong about its own commit. An uncommitted page is checked
    against the working tree."""
    from research.results_page import PAGE

    def git(*args):
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)

    edited = git("status", "--porcelain", "--", PAGE)
    commit = git("log", "-1", "--format=%H", "--", PAGE)
    if edited.returncode or edited.stdout.strip() or not commit.stdout.strip():
        return REPO
    root = tmp_path_factory.mktemp("page_commit")
    tree = subprocess.run(["git", "-C", str(REPO), "archive", commit.stdout.strip(), "ledger", "registrations"],
                          capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=tree, check=True)
    return root


def test_the_results_page_is_what_the_ledgers_give_now(page_root):
    from research.results_page import generated

    assert _page_section() == "\n" + generated(page_root), "run: python3 -m research.results_page --write"


def test_the_results_page_quotes_each_verdict_and_ceiling_row(page_root):
    # Read straight from the ledger files, not through the generator: the page's numbers are theirs.
    import json

    section = _page_section()
    for path in sorted((page_root / "ledger").glob("*.jsonl")):
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        for row in rows:
            if row["kind"] == "verdict":
                assert f"### `{row['line']}`: {row['outcome']}" in section
                assert f"ledger row {row['seq']}, measured at `{row['measured_at']['commit'][:12]}`" in section
                for c in row["clauses"]:
                    assert f"`{' '.join(c['text'].split())}` | {c['value']:.4g} | {c['n']} |" in section, c
            elif row["kind"] == "ceilings":
                assert f"| {row['fingerprint']['name']} |" in section
                assert f"| {row['copy_gbps']:.0f} |" in section
                for tf in row["matmul_tflops"].values():
                    assert f" {tf:.1f} |" in section


def test_the_protocol_floor_counts_the_protocols_own_work_and_no_more():
    """research.harness_cost's protocol_floor, from a real config's row: every timed round of
    every arm at its median, the gate's calls and references, the after-timing contents'
    references and the rechecks; more than the timed rounds alone, less than the config's
    whole cost (host work, draws and checks are not in it)."""
    from harness.ledger.rows import load
    from harness.pipeline.run import run_config
    from harness.workloads import Config
    from research.harness_cost import protocol_floor
    from tests.conftest import sweep_context

    cfg = Config("attention", 1, 2, 2, 64, 16, "float32", False)
    ctx = sweep_context(timing={"warmup_ms": 1, "min_samples": 5, "max_samples": 40, "min_time_ms": 1,
                                "timeout_s": 20, "noise_target": 0.9})
    (o,) = run_config(cfg, ("sdpa",), ctx)
    row = load({"kind": o.kind, **o.payload})
    t = row.timing
    rounds = sum(a["stats"]["median"] for a in t["arms"].values()) / 1e3 * (t["n_rounds"] + t["warmup_rounds"] + 1)
    floor = protocol_floor([row], ctx.reg, "cpu")
    assert set(floor) == {cfg.key()}
    assert rounds < floor[cfg.key()] < row.cost["total"], (rounds, floor, row.cost["total"])
    refs = row.cost["of_which"]["reference"]
    assert floor[cfg.key()] >= rounds + refs


@pytest.mark.slow
def test_the_clock_gap_probe_reads_every_arms_windows_on_the_cpu():
    """research/clock_gap_probe.py end to end on the host timer: one line per arm and mode with
    its windows (``measure`` takes each round's window out of ``clock_calls``; the probe keeps
    its own), and no clock fault on honest arms."""
    r = subprocess.run([sys.executable, "-m", "research.clock_gap_probe", "--device", "cpu"], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env=bench_env())
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if " n=" in ln]
    assert {ln.split()[2] for ln in lines if " cold " in ln} == {"sdpa", "again"}, r.stdout
    assert any("sustained loops" in ln for ln in lines), r.stdout
    assert all(int(ln.split(" n=")[1].split()[0]) > 0 for ln in lines), r.stdout
    assert "faults: none" in r.stdout and "fault: none" in r.stdout, r.stdout
